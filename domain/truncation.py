"""Read-time truncation: older tool outputs and long texts shortened before a model reads them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from memstream.domain.messages import Message
from memstream.domain.tokens import compact_json, is_tool_type

TRUNCATED_FLAG: Final = "__truncated"
TRUNCATED_CHARS: Final = "__truncatedChars"
_MAX_DEPTH: Final = 8
_CHILD_MIN_CHARS: Final = 80


def truncate_older_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    keep_recent: int = 4,
    max_tool_output_chars: int = 500,
    max_text_chars: int = 10000,
) -> list[Message]:
    """A copy of ``messages`` with long tool outputs and texts of older messages shortened.

    The last ``keep_recent`` messages come back unchanged (shallow copies whose parts are the
    given objects). In older ones
    a tool output (``output`` or ``result``) longer than ``max_tool_output_chars`` as JSON is
    shortened keeping its shape: strings stay strings (ending ``... [truncated N chars]``),
    objects keep their keys, and arrays that cannot fit collapse to one
    ``{"__truncated": true, "__truncatedChars": N}`` marker; a text longer than
    ``max_text_chars`` becomes its start plus ``... [truncated N chars]``. Never modifies its
    input: a changed message is a new dict with new parts.
    """
    cutoff = len(messages) - keep_recent
    return [
        _shorten_message(message, max_tool_output_chars, max_text_chars)
        if index < cutoff
        else dict(message)
        for index, message in enumerate(messages)
    ]


def _shorten_message(message: Mapping[str, Any], max_output: int, max_text: int) -> Message:
    parts = message.get("parts")
    if not isinstance(parts, list):
        return dict(message)
    new_parts: list[Any] = []
    changed = False
    for part in parts:
        new_part = _shorten_part(part, max_output, max_text) if isinstance(part, Mapping) else part
        changed = changed or new_part is not part
        new_parts.append(new_part)
    return {**message, "parts": new_parts} if changed else dict(message)


def _shorten_part(part: Mapping[str, Any], max_output: int, max_text: int) -> Mapping[str, Any]:
    if is_tool_type(part.get("type")):
        changes = {
            key: _shorten_value(part[key], max_output, _json_length(part[key]), 0)
            for key in ("output", "result")
            if key in part and part[key] is not None and _json_length(part[key]) > max_output
        }
        return {**part, **changes} if changes else part
    text = part.get("text")
    if part.get("type") == "text" and isinstance(text, str) and len(text) > max_text:
        return {**part, "text": f"{text[:max_text]}... [truncated {len(text)} chars]"}
    return part


def _json_length(value: object) -> int:
    return len(value) if isinstance(value, str) else len(compact_json(value))


def _suffix(length: int) -> str:
    return f"... [truncated {length} chars]"


def _shorten_string(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    suffix = _suffix(len(text))
    return suffix[:limit] if limit <= len(suffix) else text[: limit - len(suffix)] + suffix


def _marker(length: int) -> dict[str, Any]:
    return {TRUNCATED_FLAG: True, TRUNCATED_CHARS: length}


def _child_limit(limit: int, children: int) -> int:
    return limit if children <= 1 else max(_CHILD_MIN_CHARS, limit // min(children, 10))


def _shorten_value(value: object, limit: int, length: int, depth: int) -> object:
    if isinstance(value, str):
        return _shorten_string(value, limit)
    if not isinstance(value, Mapping | list):
        return value
    if depth >= _MAX_DEPTH:
        return f"[Nested output omitted {_suffix(length)}]"
    if isinstance(value, list):
        return _shorten_list(value, limit, length, depth)
    return _shorten_mapping(value, limit, length, depth)


def _shorten_list(value: list[Any], limit: int, length: int, depth: int) -> list[Any]:
    child = _child_limit(limit, len(value))
    items = [_shorten_value(item, child, _json_length(item), depth + 1) for item in value]
    while len(items) > 1 and _json_length(items) > limit:
        items.pop()
    if len(items) < len(value):
        items.append(_marker(length))
    return items if _json_length(items) <= limit else [_marker(length)]


def _shorten_mapping(
    value: Mapping[str, Any], limit: int, length: int, depth: int
) -> dict[str, Any]:
    child = _child_limit(limit, len(value))
    result = {
        key: _shorten_value(item, child, _json_length(item), depth + 1)
        for key, item in value.items()
    }
    shortened_length = _json_length(result)
    if shortened_length <= limit:
        return result
    longest_first = sorted(
        (key for key, item in result.items() if isinstance(item, str)),
        key=lambda key: -len(str(result[key])),
    )
    for key in longest_first:
        if _json_length(result) <= limit:
            break
        result[key] = _shorten_string(str(result[key]), limit // 4)
    if _json_length(result) > limit:
        result.update(_marker(shortened_length))
    return result if _json_length(result) <= limit else _marker(length)
