"""OpenAI Responses input items (what the OpenAI Agents SDK keeps in a session) stored as
session messages and given back exactly.

Each item is one message of AI SDK parts, so search, token estimates and compaction's tool
pairing see it: a ``message`` item (the easy form ``{"role", "content"}`` too) holds ``text``
and ``file`` parts, a ``function_call`` a ``dynamic-tool`` call (role ``assistant``), a
``function_call_output`` its result (role ``tool``, named from its call when the call was
seen), a ``reasoning`` item its summary as ``reasoning`` parts; any other item (hosted tools,
item references, …) a ``data-openai-item`` part holding it. The fields the parts do not hold
(ids, statuses, annotations, a call's ``arguments`` text when it is not the canonical JSON of
its input, ``encrypted_content``, …) are kept under the message's ``responses_item`` key.

Messages that did not come from items (a chat, a compaction overlay) convert as the Agents SDK
would read them: text as ``{"role", "content"}``, tool parts as calls and outputs.

Pure: no I/O. A malformed item is :class:`InvalidInputError` naming the field.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

from memstream.domain.chat_formats import call_part, parse_arguments
from memstream.domain.errors import InvalidInputError

Item = dict[str, Any]
# The message-level record of the item a message holds: {"kind": ..., "fields": {...}}.
ITEM_KEY = "responses_item"
META = "providerMetadata"
PROVIDER = "openai-responses"
DATA_PART = "data-openai-item"
TOOL_PART = "dynamic-tool"
UNKNOWN_TOOL = "unknown"
_ROLES = frozenset({"user", "assistant", "system", "developer"})
_TEXT_PARTS = frozenset({"input_text", "output_text"})


def item_to_message(item: object, tool_names: MutableMapping[str, str] | None = None) -> Item:
    """The stored message of one Responses input item (``tool_names`` maps call ids to tool
    names across a batch).

    Raises:
        InvalidInputError: the item is malformed (the error names the field).
    """
    if hasattr(item, "model_dump"):  # an openai-package model rather than its TypedDict
        item = item.model_dump(exclude_unset=True)
    if not isinstance(item, Mapping):
        raise InvalidInputError(f"item must be a dict, not {type(item).__name__}")
    names = {} if tool_names is None else tool_names
    kind = item.get("type", "message")
    if kind == "message" and "role" in item:
        return _message_item(item)
    if kind == "function_call":
        return _function_call(item, names)
    if kind == "function_call_output":
        return _function_output(item, names)
    if kind == "reasoning":
        return _reasoning(item)
    if not isinstance(kind, str):
        raise _error(item, "type", f"must be a string, not {type(kind).__name__}")
    return _message("assistant", [{"type": DATA_PART, "data": dict(item)}], "other", {})


def messages_to_items(history: Iterable[Mapping[str, Any]]) -> list[Item]:
    """Stored messages as Responses input items, in order (see the module's docstring)."""
    items: list[Item] = []
    for message in history:
        items.extend(message_to_items(message))
    return items


def message_to_items(message: Mapping[str, Any]) -> list[Item]:
    """The items of one stored message: the item it holds, or what the SDK would read."""
    record = message.get(ITEM_KEY)
    parts = [p for p in message.get("parts") or () if isinstance(p, Mapping)]
    if isinstance(record, Mapping) and isinstance(record.get("fields"), Mapping):
        kind = record.get("kind")
        fields = dict(record["fields"])
        if kind == "message":
            return [_message_out(message, parts, fields)]
        if kind == "function_call" and parts:
            return [_call_out(parts[0], fields)]
        if kind == "function_call_output" and parts:
            return [
                {**fields, "call_id": parts[0].get("toolCallId"), "output": parts[0].get("output")}
            ]
        if kind == "reasoning":
            summary = [
                {"type": "summary_text", **_meta(p), "text": p.get("text", "")}
                for p in parts
                if p.get("type") == "reasoning"
            ]
            absent = record.get("absent") or ()
            return [fields if "summary" in absent else {**fields, "summary": summary}]
        if kind == "other" and parts and isinstance(parts[0].get("data"), Mapping):
            return [dict(parts[0]["data"])]
    return _generic(message, parts)


def _message_item(item: Mapping[str, Any]) -> Item:
    role = item.get("role")
    if role not in _ROLES:
        raise _error(item, "role", f"must be one of {sorted(_ROLES)}, not {role!r}")
    content = item.get("content")
    fields = {k: v for k, v in item.items() if k not in ("role", "content")}
    parts: list[dict[str, Any]] = []
    if isinstance(content, str):
        fields["content"] = "string"
        parts.append({"type": "text", "text": content})
    elif isinstance(content, list):
        for index, part in enumerate(content):
            parts.append(_content_part(item, part, index))
    else:
        raise _error(item, "content", f"must be a string or a list, not {_kind(content)}")
    return _message(str(role), parts, "message", fields)


def _content_part(item: Mapping[str, Any], part: object, index: int) -> dict[str, Any]:
    if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
        raise _error(item, f"content[{index}]", "must be a dict with a string type")
    kind = part["type"]
    if kind in _TEXT_PARTS:
        if not isinstance(part.get("text"), str):
            raise _error(
                item, f"content[{index}].text", f"must be a string, not {_kind(part.get('text'))}"
            )
        return _with_meta({"type": "text", "text": part["text"]}, _rest(part, "text"))
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        url = part["image_url"]
        return _with_meta(
            {"type": "file", "mediaType": "image/*", "url": url}, _rest(part, "image_url")
        )
    return {"type": DATA_PART, "data": dict(part)}


def _function_call(item: Mapping[str, Any], names: MutableMapping[str, str]) -> Item:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
    for field, value in (("call_id", call_id), ("name", name)):
        if not isinstance(value, str) or not value:
            raise _error(item, field, f"must be a non-empty string, not {_kind(value)}")
    if not isinstance(arguments, str):
        raise _error(item, "arguments", f"must be a string, not {_kind(arguments)}")
    parsed, meta = parse_arguments(arguments)
    names[str(call_id)] = str(name)
    part = call_part(str(name), str(call_id), parsed)
    fields = _rest(item, "call_id", "name", "arguments")
    return _message("assistant", [_with_meta(part, meta)], "function_call", fields)


def _function_output(item: Mapping[str, Any], names: MutableMapping[str, str]) -> Item:
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str) or not call_id:
        raise _error(item, "call_id", f"must be a non-empty string, not {_kind(call_id)}")
    if not isinstance(output, str | list):
        raise _error(item, "output", f"must be a string or a list, not {_kind(output)}")
    part = {
        "type": TOOL_PART,
        "toolName": names.get(call_id, UNKNOWN_TOOL),
        "toolCallId": call_id,
        "state": "output-available",
        "output": output,
    }
    return _message("tool", [part], "function_call_output", _rest(item, "call_id", "output"))


def _reasoning(item: Mapping[str, Any]) -> Item:
    summary = item.get("summary", [])
    if not isinstance(summary, list):
        raise _error(item, "summary", f"must be a list, not {_kind(summary)}")
    parts = []
    for index, entry in enumerate(summary):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("text"), str):
            raise _error(item, f"summary[{index}].text", "must be a string")
        parts.append(
            _with_meta({"type": "reasoning", "text": entry["text"]}, _rest(entry, "type", "text"))
        )
    message = _message("assistant", parts, "reasoning", _rest(item, "summary"))
    if "summary" not in item:
        message[ITEM_KEY]["absent"] = ["summary"]
    return message


def _message(role: str, parts: list[dict[str, Any]], kind: str, fields: dict[str, Any]) -> Item:
    return {
        "id": uuid.uuid4().hex,
        "role": role,
        "parts": parts,
        ITEM_KEY: {"kind": kind, "fields": fields},
    }


def _message_out(
    message: Mapping[str, Any], parts: list[Mapping[str, Any]], fields: dict[str, Any]
) -> Item:
    shape = fields.pop("content", "list")
    out: Item = {"role": message.get("role"), **fields}
    if shape == "string" and len(parts) == 1 and parts[0].get("type") == "text":
        out["content"] = parts[0].get("text", "")
        return out
    content = []
    for part in parts:
        kind = part.get("type")
        if kind == "text":
            content.append({**_meta(part), "text": part.get("text", "")})
        elif kind == "file":
            content.append({**_meta(part), "image_url": part.get("url")})
        elif kind == DATA_PART and isinstance(part.get("data"), Mapping):
            content.append(dict(part["data"]))
    out["content"] = content
    return out


def _call_out(part: Mapping[str, Any], fields: dict[str, Any]) -> Item:
    meta = _meta(part)
    arguments = meta.get("arguments")
    if not isinstance(arguments, str):
        arguments = _canonical(part.get("input", {}))
    return {
        **fields,
        "call_id": part.get("toolCallId"),
        "name": part.get("toolName"),
        "arguments": arguments,
    }


def _generic(message: Mapping[str, Any], parts: list[Mapping[str, Any]]) -> list[Item]:
    """A message that holds no item, as the Agents SDK would read it."""
    role = str(message.get("role"))
    texts: list[str] = []
    calls: list[Item] = []
    outputs: list[Item] = []
    for part in parts:
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif isinstance(kind, str) and (kind.startswith("tool-") or kind == TOOL_PART):
            call_id = str(part.get("toolCallId", ""))
            if "input" in part:
                name = part.get("toolName") or (
                    kind[5:] if kind.startswith("tool-") else UNKNOWN_TOOL
                )
                calls.append(
                    {
                        "type": "function_call",
                        "call_id": call_id,
                        "name": name,
                        "arguments": _canonical(part.get("input")),
                    }
                )
            if "output" in part or "result" in part:
                value = part["output"] if "output" in part else part.get("result")
                outputs.append(
                    {
                        "type": "function_call_output",
                        "call_id": call_id,
                        "output": value if isinstance(value, str) else _canonical(value),
                    }
                )
    items: list[Item] = []
    if texts and role in _ROLES:
        items.append({"role": role, "content": "\n".join(texts)})
    return items + calls + outputs


def _with_meta(part: dict[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
    if meta:
        part[META] = {PROVIDER: dict(meta)}
    return part


def _meta(part: Mapping[str, Any]) -> dict[str, Any]:
    meta = part.get(META)
    value = meta.get(PROVIDER) if isinstance(meta, Mapping) else None
    return dict(value) if isinstance(value, Mapping) else {}


def _rest(block: Mapping[str, Any], *known: str) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k not in known}


def _kind(value: object) -> str:
    return "missing" if value is None else type(value).__name__


def _canonical(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _error(item: Mapping[str, Any], field: str, problem: str) -> InvalidInputError:
    kind = item.get("type", "message")
    return InvalidInputError(f"{kind} item: {field} {problem}")
