"""Tool call/result pairs in messages: finding them, and repairing those compaction breaks.

A tool part is a part whose ``type`` starts with ``tool-`` or is ``dynamic-tool`` (spec §1.1); it
names its call with ``toolCallId`` and carries its result as ``output`` (AI SDK messages) or
``result``. A call and its result may share one part or sit in consecutive messages.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from memstream.domain.messages import Message
from memstream.domain.tokens import is_tool_type

STUB_RESULT: Final = "[Result from earlier conversation — see context summary above]"


def parts_of(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The message's parts that are dicts (none if ``parts`` is not a list)."""
    parts = message.get("parts")
    if not isinstance(parts, list):
        return []
    return [part for part in parts if isinstance(part, Mapping)]


def tool_parts(message: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The message's tool parts (``type`` ``tool-*`` or ``dynamic-tool``)."""
    return (part for part in parts_of(message) if is_tool_type(part.get("type")))


def call_id(part: Mapping[str, Any]) -> str | None:
    """The part's ``toolCallId`` if it is a string."""
    ident = part.get("toolCallId")
    return ident if isinstance(ident, str) else None


def has_tool_calls(message: Mapping[str, Any]) -> bool:
    """True if the message has a tool part (``type`` ``tool-*`` or ``dynamic-tool``)."""
    return any(True for _ in tool_parts(message))


def call_ids(message: Mapping[str, Any]) -> set[str]:
    """The ``toolCallId`` of each of the message's tool parts that has one."""
    return {ident for part in tool_parts(message) if (ident := call_id(part)) is not None}


def is_tool_result_for(message: Mapping[str, Any], ids: Collection[str]) -> bool:
    """True if one of the message's tool parts has a ``toolCallId`` among ``ids``."""
    return any(call_id(part) in ids for part in tool_parts(message))


def calls_tools(message: Mapping[str, Any]) -> bool:
    """An assistant message with tool parts: a tool call whose results may follow."""
    return message.get("role") == "assistant" and has_tool_calls(message)


def as_text(value: object) -> str:
    """A part field as text: ``""`` for ``None``, ``str()`` for a non-string."""
    return "" if value is None else value if isinstance(value, str) else str(value)


def tool_name(part: Mapping[str, Any]) -> str:
    """The part's ``toolName``, else the name in its ``tool-<name>`` type, else ``unknown``."""
    name = part.get("toolName")
    if name is not None:
        return as_text(name)
    kind = str(part.get("type", ""))
    if kind.startswith("tool-") and len(kind) > len("tool-"):
        return kind[len("tool-") :]
    return "unknown"


def _is_result(part: Mapping[str, Any]) -> bool:
    # §1.1 tool parts carry their result as ``output`` (AI SDK) or ``result`` (our stubs)
    return (
        is_tool_type(part.get("type"))
        and call_id(part) is not None
        and ("output" in part or "result" in part)
    )


def sanitize_tool_pairs(
    messages: Sequence[Mapping[str, Any]], now: datetime | None = None
) -> list[Message]:
    """Repair tool call/result pairs broken by compaction; returns new messages.

    Result parts whose call no assistant message makes are removed; an assistant call without a
    result gets a stub result message right after it (``stub-<callId>``, the tool's name or
    ``unknown``, ``created_at`` ``now``); messages left without parts are dropped. A part counts
    as a result when it has ``output`` or ``result``, so sanitising twice adds no second stub.
    The input is never modified.
    """
    calls: set[str] = set()
    for message in messages:
        if message.get("role") == "assistant":
            calls |= call_ids(message)
    results = {call_id(part) for m in messages for part in parts_of(m) if _is_result(part)}
    orphans = results - calls
    missing = calls - results  # stubbed once each, after the first assistant message calling
    created_at = (now or datetime.now(UTC)).isoformat()
    repaired: list[Message] = []
    for message in messages:
        parts = message.get("parts")
        if not isinstance(parts, list):
            repaired.append(dict(message))
            continue
        kept = [part for part in parts if not _orphan(part, orphans)]
        if kept:
            repaired.append({**message, "parts": kept})
        if message.get("role") == "assistant":
            repaired.extend(_stubs(message, missing, created_at))
    return repaired


def _orphan(part: object, orphans: set[str | None]) -> bool:
    return isinstance(part, Mapping) and _is_result(part) and call_id(part) in orphans


def _stubs(message: Mapping[str, Any], missing: set[str], created_at: str) -> Iterator[Message]:
    for part in tool_parts(message):
        ident = call_id(part)
        if ident is None or ident not in missing:
            continue
        missing.discard(ident)
        yield {
            "id": f"stub-{ident}",
            "role": "assistant",
            "parts": [
                {
                    "type": "tool-result",
                    "toolCallId": ident,
                    "toolName": tool_name(part),
                    "result": STUB_RESULT,
                }
            ],
            "created_at": created_at,
        }
