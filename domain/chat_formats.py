"""Chat formats in and out: OpenAI Chat Completions and Anthropic Messages messages, stored
losslessly as parts (the reference shape, spec §1.1) and given back exactly.

A message in either shape becomes one stored message of the same role whose parts are the
AI SDK's: ``text``, ``reasoning``, ``file`` (an image by URL or ``data:`` URL) and
``dynamic-tool`` (a call with ``input``, or a result with ``output``), so that full-text
search, token estimates, compaction's tool pairing and skills see them like any other
message. What those parts cannot say is kept beside them so that :func:`to_openai` and
:func:`to_anthropic` give the very message back:

- per part, under ``providerMetadata`` (where the AI SDK keeps provider fields): e.g. an
  image's ``detail``, a call's ``arguments`` text when it is not the canonical JSON of its
  input, a thinking block's ``signature``, ``cache_control``;
- per message, under ``chat_format``: the shape the content had (a string, a list, ``null``
  or absent) and the top-level fields memstream has no part for (``name``, ``refusal``, …);
- a block or part of a kind with no AI SDK counterpart (audio, documents, server tools, …)
  as a ``data-openai`` / ``data-anthropic`` part holding it verbatim.

Pure: no I/O. Every malformed message is :class:`InvalidInputError` naming the field.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, Literal

from memstream.domain.errors import InvalidInputError

ChatMessage = dict[str, Any]
Format = Literal["openai", "anthropic"]

OPENAI: Format = "openai"
ANTHROPIC: Format = "anthropic"
# The message-level record of the shape a converted message came in.
FORMAT_KEY = "chat_format"
# The part-level record of provider fields (the AI SDK's own name for it).
META = "providerMetadata"
TOOL_PART = "dynamic-tool"
# A tool result whose call this message or batch did not show has this tool name.
UNKNOWN_TOOL = "unknown"

OPENAI_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
ANTHROPIC_ROLES = frozenset({"user", "assistant"})
# Keys only an OpenAI message has (an Anthropic one has role and content only).
_OPENAI_KEYS = ("tool_calls", "tool_call_id", "function_call", "reasoning_content", "refusal")
_ANTHROPIC_BLOCKS = frozenset(
    {
        "image",
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
        "document",
        "search_result",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "container_upload",
    }
)
_OPENAI_PARTS = frozenset({"image_url", "input_audio", "file", "refusal"})
# Fields of a message that are memstream's, not the chat format's.
_OWN_KEYS = frozenset({"id", "created_at", "createdAt"})
_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+);base64,", re.ASCII)
_IMAGE_SUFFIXES = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
}

# ---------------------------------------------------------------------------------------------
# in


def chat_format_of(message: Mapping[str, Any]) -> Format | None:
    """The chat format of a message dict that has no ``parts``, or ``None`` when it is the
    reference shape or its ``{"role", "content": str}`` convenience (stored as before)."""
    if "parts" in message:
        return None
    content = message.get("content")
    if isinstance(content, str) and not any(key in message for key in _OPENAI_KEYS):
        return None
    if any(key in message for key in _OPENAI_KEYS) or message.get("role") in (
        OPENAI_ROLES - ANTHROPIC_ROLES
    ):
        return OPENAI
    if isinstance(content, list):
        kinds = {b.get("type") for b in content if isinstance(b, Mapping)}
        if kinds & _ANTHROPIC_BLOCKS:
            return ANTHROPIC
        if kinds & _OPENAI_PARTS:
            return OPENAI
        if any(
            isinstance(b, Mapping) and ("cache_control" in b or "citations" in b) for b in content
        ):
            return ANTHROPIC
        return OPENAI
    if content is None and "content" in message:
        return OPENAI
    return None


def from_chat(
    message: Mapping[str, Any], tool_names: MutableMapping[str, str] | None = None
) -> ChatMessage | None:
    """The stored form of a message in a chat format (see :func:`chat_format_of`), else None.

    ``tool_names`` maps call ids to tool names across a batch: calls add to it and results
    take their tool's name from it.
    """
    fmt = chat_format_of(message)
    if fmt == OPENAI:
        return from_openai(message, tool_names)
    if fmt == ANTHROPIC:
        return from_anthropic(message, tool_names)
    return None


def from_openai(
    message: Mapping[str, Any], tool_names: MutableMapping[str, str] | None = None
) -> ChatMessage:
    """An OpenAI Chat Completions message (roles system, developer, user, assistant, tool;
    ``content`` a string, ``None`` or a list of parts; ``tool_calls``; ``tool_call_id``;
    ``name``) as a stored message.

    Raises:
        InvalidInputError: it is malformed (the error names the field).
    """
    where = _Where(OPENAI, message)
    role = message.get("role")
    if role not in OPENAI_ROLES:
        raise where.error("role", f"must be one of {sorted(OPENAI_ROLES)}, not {role!r}")
    names = {} if tool_names is None else tool_names
    parts: list[dict[str, Any]] = []
    shape: dict[str, Any] = {"name": OPENAI}
    extra: dict[str, Any] = {}
    handled = {"role", "content", "reasoning_content", "tool_calls", "tool_call_id"}
    content = message.get("content")
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise where.error("tool_call_id", f"must be a non-empty string, not {_kind(call_id)}")
        if not isinstance(content, str | list):
            raise where.error("content", f"must be a string or a list, not {_kind(content)}")
        parts.append(
            {
                "type": TOOL_PART,
                "toolName": names.get(call_id, UNKNOWN_TOOL),
                "toolCallId": call_id,
                "state": "output-available",
                "output": content,
            }
        )
        shape["content"] = "output"
    else:
        # (the openai package's model_dump() gives absent fields as None: kept as they came)
        if message.get("tool_call_id") is not None:
            raise where.error("tool_call_id", f"is only for role 'tool', not {role!r}")
        handled = {key for key in handled if message.get(key) is not None} | {"role", "content"}
        reasoning = message.get("reasoning_content")
        if reasoning is not None:
            if not isinstance(reasoning, str):
                raise where.error("reasoning_content", f"must be a string, not {_kind(reasoning)}")
            parts.append({"type": "reasoning", "text": reasoning})
        shape["content"] = _content_shape(message, where)
        if isinstance(content, str):
            parts.append({"type": "text", "text": content})
        elif isinstance(content, list):
            parts.extend(
                _openai_part(part, f"content[{index}]", where) for index, part in enumerate(content)
            )
        if message.get("tool_calls") is not None:
            calls = message["tool_calls"]
            if not isinstance(calls, list):
                raise where.error("tool_calls", f"must be a list, not {_kind(calls)}")
            if role != "assistant":
                raise where.error("tool_calls", f"are only for role 'assistant', not {role!r}")
            for index, call in enumerate(calls):
                parts.append(_openai_call(call, f"tool_calls[{index}]", where, names))
            shape["tool_calls"] = True  # present, even when empty
    for key, value in message.items():
        if key not in handled and key not in _OWN_KEYS:
            extra[key] = value
    if extra:
        shape["extra"] = extra
    return _stored(message, role, parts, shape)


def from_anthropic(
    message: Mapping[str, Any], tool_names: MutableMapping[str, str] | None = None
) -> ChatMessage:
    """An Anthropic Messages message (role user or assistant; ``content`` a string or a list of
    blocks: ``text``, ``image``, ``tool_use``, ``tool_result``, ``thinking`` and the others,
    kept verbatim) as a stored message.

    Raises:
        InvalidInputError: it is malformed (the error names the field).
    """
    where = _Where(ANTHROPIC, message)
    role = message.get("role")
    if role not in ANTHROPIC_ROLES:
        raise where.error("role", f"must be 'user' or 'assistant', not {role!r}")
    names = {} if tool_names is None else tool_names
    content = message.get("content")
    shape: dict[str, Any] = {"name": ANTHROPIC}
    parts: list[dict[str, Any]] = []
    if isinstance(content, str):
        shape["content"] = "string"
        parts.append({"type": "text", "text": content})
    elif isinstance(content, list):
        shape["content"] = "list"
        for index, block in enumerate(content):
            parts.append(_anthropic_block(block, f"content[{index}]", where, names))
    else:
        raise where.error("content", f"must be a string or a list of blocks, not {_kind(content)}")
    extra = {
        k: v for k, v in message.items() if k not in ("role", "content") and k not in _OWN_KEYS
    }
    if extra:
        shape["extra"] = extra
    return _stored(message, role, parts, shape)


def _stored(
    message: Mapping[str, Any], role: str, parts: list[dict[str, Any]], shape: dict[str, Any]
) -> ChatMessage:
    stored: ChatMessage = {"id": message["id"] if "id" in message else uuid.uuid4().hex}
    stored["role"] = role
    stored["parts"] = parts
    for key in ("created_at", "createdAt"):
        if key in message:
            stored[key] = message[key]
    stored[FORMAT_KEY] = shape
    return stored


def _content_shape(message: Mapping[str, Any], where: _Where) -> str:
    if "content" not in message:
        return "absent"
    content = message["content"]
    if content is None:
        return "null"
    if isinstance(content, str):
        return "string"
    if isinstance(content, list):
        return "list"
    raise where.error("content", f"must be a string, null or a list of parts, not {_kind(content)}")


def _openai_part(part: object, field: str, where: _Where) -> dict[str, Any]:
    block = _block(part, field, where)
    kind = block["type"]
    if kind == "text":
        return _text_part(block, field, where)
    if kind == "image_url":
        image = block.get("image_url")
        if not isinstance(image, Mapping) or not isinstance(image.get("url"), str):
            raise where.error(f"{field}.image_url.url", "must be a string")
        url = image["url"]
        rest = _rest(block, "type", "image_url")
        image_rest = _rest(image, "url")
        if image_rest:
            rest["image_url"] = image_rest
        return _with_meta({"type": "file", "mediaType": _media_type(url), "url": url}, OPENAI, rest)
    return {"type": "data-openai", "data": dict(block)}


def _openai_call(
    call: object, field: str, where: _Where, names: MutableMapping[str, str]
) -> dict[str, Any]:
    block = _block(call, field, where)
    if block["type"] != "function":
        return {"type": "data-openai-tool-call", "data": dict(block)}
    call_id = block.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise where.error(f"{field}.id", f"must be a non-empty string, not {_kind(call_id)}")
    function = block.get("function")
    if not isinstance(function, Mapping):
        raise where.error(f"{field}.function", f"must be a dict, not {_kind(function)}")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise where.error(
            f"{field}.function.name", f"must be a non-empty string, not {_kind(name)}"
        )
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        raise where.error(
            f"{field}.function.arguments", f"must be a string, not {_kind(arguments)}"
        )
    parsed, meta = parse_arguments(arguments)
    call_rest = _rest(block, "type", "id", "function")
    if call_rest:
        meta["call"] = call_rest
    function_rest = _rest(function, "name", "arguments")
    if function_rest:
        meta["function"] = function_rest
    names[call_id] = name
    return _with_meta(call_part(name, call_id, parsed), OPENAI, meta)


def _anthropic_block(
    block_value: object, field: str, where: _Where, names: MutableMapping[str, str]
) -> dict[str, Any]:
    block = _block(block_value, field, where)
    kind = block["type"]
    if kind == "text":
        return _text_part(block, field, where)
    if kind == "thinking":
        thinking = block.get("thinking")
        if not isinstance(thinking, str):
            raise where.error(f"{field}.thinking", f"must be a string, not {_kind(thinking)}")
        return _with_meta(
            {"type": "reasoning", "text": thinking}, ANTHROPIC, _rest(block, "type", "thinking")
        )
    if kind == "image":
        source = block.get("source")
        if not isinstance(source, Mapping):
            raise where.error(f"{field}.source", f"must be a dict, not {_kind(source)}")
        url = _anthropic_image_url(source, f"{field}.source", where)
        if url is None:
            return {"type": "data-anthropic", "data": dict(block)}
        return _with_meta(
            {"type": "file", "mediaType": _media_type(url), "url": url},
            ANTHROPIC,
            _rest(block, "type", "source"),
        )
    if kind == "tool_use":
        call_id, name = block.get("id"), block.get("name")
        if not isinstance(call_id, str) or not call_id:
            raise where.error(f"{field}.id", f"must be a non-empty string, not {_kind(call_id)}")
        if not isinstance(name, str) or not name:
            raise where.error(f"{field}.name", f"must be a non-empty string, not {_kind(name)}")
        if "input" not in block:
            raise where.error(f"{field}.input", "is missing")
        names[call_id] = name
        part = call_part(name, call_id, block["input"])
        return _with_meta(part, ANTHROPIC, _rest(block, "type", "id", "name", "input"))
    if kind == "tool_result":
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str) or not call_id:
            raise where.error(
                f"{field}.tool_use_id", f"must be a non-empty string, not {_kind(call_id)}"
            )
        content = block.get("content", "")
        if not isinstance(content, str | list):
            raise where.error(
                f"{field}.content", f"must be a string or a list, not {_kind(content)}"
            )
        is_error = block.get("is_error", False)
        if not isinstance(is_error, bool):
            raise where.error(f"{field}.is_error", f"must be a boolean, not {_kind(is_error)}")
        meta = _rest(block, "type", "tool_use_id", "content")
        if "content" not in block:
            meta["content"] = False  # absent: given back without one
        part = {
            "type": TOOL_PART,
            "toolName": names.get(call_id, UNKNOWN_TOOL),
            "toolCallId": call_id,
            "state": "output-error" if is_error else "output-available",
            "output": content,
        }
        return _with_meta(part, ANTHROPIC, meta)
    return {"type": "data-anthropic", "data": dict(block)}


def call_part(name: str, call_id: str, arguments: object) -> dict[str, Any]:
    """The AI SDK part of a tool call whose input is complete."""
    return {
        "type": TOOL_PART,
        "toolName": name,
        "toolCallId": call_id,
        "state": "input-available",
        "input": arguments,
    }


def parse_arguments(arguments: str) -> tuple[object, dict[str, Any]]:
    """A call's ``arguments`` text as its input, and ``{"arguments": text}`` to keep when the
    input's canonical JSON would not give that text back (a model's broken JSON stays a
    string)."""
    try:
        parsed: object = json.loads(arguments)
    except ValueError:
        return arguments, {"arguments": arguments}
    return parsed, ({} if _canonical(parsed) == arguments else {"arguments": arguments})


def _text_part(block: Mapping[str, Any], field: str, where: _Where) -> dict[str, Any]:
    text = block.get("text")
    if not isinstance(text, str):
        raise where.error(f"{field}.text", f"must be a string, not {_kind(text)}")
    return _with_meta({"type": "text", "text": text}, where.fmt, _rest(block, "type", "text"))


def _anthropic_image_url(source: Mapping[str, Any], field: str, where: _Where) -> str | None:
    """An image source as a URL (base64 as a ``data:`` URL), or None for another kind."""
    kind = source.get("type")
    if kind == "base64" and set(source) == {"type", "media_type", "data"}:
        media_type, data = source.get("media_type"), source.get("data")
        if not isinstance(media_type, str) or not isinstance(data, str):
            raise where.error(f"{field}", "media_type and data must be strings")
        return f"data:{media_type};base64,{data}"
    if kind == "url" and set(source) == {"type", "url"}:
        url = source.get("url")
        if not isinstance(url, str):
            raise where.error(f"{field}.url", f"must be a string, not {_kind(url)}")
        if url.startswith("data:"):
            return None  # would read back as base64: kept verbatim instead
        return url
    return None


# ---------------------------------------------------------------------------------------------
# out


def to_openai(history: Iterable[Mapping[str, Any]]) -> list[ChatMessage]:
    """Stored messages as OpenAI Chat Completions messages: a message that came in that shape
    comes back exactly; others as the AI SDK's ``convertToModelMessages`` would (a tool part
    with its output gives a call and a ``tool`` message; reasoning is left out)."""
    out: list[ChatMessage] = []
    for message in history:
        out.extend(_openai_messages(message))
    return out


def to_anthropic(history: Iterable[Mapping[str, Any]]) -> list[ChatMessage]:
    """Stored messages as Anthropic Messages messages: a message that came in that shape comes
    back exactly. System and developer messages are left out (Anthropic takes the system
    prompt as a parameter of its own); an OpenAI ``tool`` message becomes a ``user`` message
    of ``tool_result`` blocks; reasoning without a signature is left out."""
    out: list[ChatMessage] = []
    for message in history:
        out.extend(_anthropic_messages(message))
    return out


def _openai_messages(message: Mapping[str, Any]) -> list[ChatMessage]:
    role = str(message.get("role"))
    shape = _shape(message, OPENAI)
    parts = [p for p in message.get("parts") or () if isinstance(p, Mapping)]
    content: list[Any] = []
    calls: list[Any] = []
    results: list[ChatMessage] = []
    reasoning: list[str] = []
    for part in parts:
        kind = part.get("type")
        if kind == "text":
            content.append(_merge({"type": "text", "text": part.get("text", "")}, part, OPENAI))
        elif kind == "file" and isinstance(part.get("url"), str):
            meta = dict(_meta(part, OPENAI))
            image = {"url": part["url"], **meta.pop("image_url", {})}
            content.append({"type": "image_url", "image_url": image, **meta})
        elif kind == "reasoning" and isinstance(part.get("text"), str):
            reasoning.append(part["text"])
        elif kind == "data-openai" and isinstance(part.get("data"), Mapping):
            content.append(dict(part["data"]))
        elif kind == "data-openai-tool-call" and isinstance(part.get("data"), Mapping):
            calls.append(dict(part["data"]))
        elif _is_tool(kind):
            if _is_call(part):
                calls.append(_openai_call_out(part))
            if _is_result(part):
                results.append(
                    {
                        "role": "tool",
                        "tool_call_id": str(part.get("toolCallId", "")),
                        "content": _openai_output(part),
                    }
                )
    extra = dict(shape.get("extra") or {}) if shape is not None else {}
    if role == "tool" or (not content and not calls and results and role != "assistant"):
        if shape is not None and len(results) == 1:
            results[0].update(extra)
        return results
    built: ChatMessage = {"role": role}
    kind = shape.get("content") if shape is not None else None
    if reasoning and shape is not None and shape["name"] == OPENAI:
        built["reasoning_content"] = "".join(reasoning)
    if kind == "absent" and not content:
        pass
    elif kind == "null" and not content:
        built["content"] = None
    elif kind == "list":
        built["content"] = content
    elif len(content) == 1 and content[0].get("type") == "text" and len(content[0]) == 2:
        built["content"] = content[0]["text"]
    elif not content:
        built["content"] = None if calls else ""
    else:
        built["content"] = content
    if calls or (shape is not None and shape.get("tool_calls")):
        built["tool_calls"] = calls
    for key in ("name",):
        if shape is None and isinstance(message.get(key), str):
            built[key] = message[key]
    built.update(extra)
    if results and role != "tool":
        # The AI SDK's combined tool part (call and output): the outputs follow the call, and
        # a user message of results (Anthropic's shape) gives its tool messages first.
        if calls:
            return [built, *results]
        return [*results, built] if "content" in built and built["content"] != "" else results
    return [built]


def _openai_call_out(part: Mapping[str, Any]) -> dict[str, Any]:
    meta = _meta(part, OPENAI)
    arguments = meta.get("arguments")
    if not isinstance(arguments, str):
        # the JSON of the input (a call still streaming its input has none yet)
        arguments = _canonical(part.get("input", {}))
    function = {"name": _tool_name(part), "arguments": arguments, **meta.get("function", {})}
    return {
        "id": str(part.get("toolCallId", "")),
        "type": "function",
        "function": function,
        **meta.get("call", {}),
    }


def _openai_output(part: Mapping[str, Any]) -> Any:
    """A result as a tool message's content: a string, or a list of text parts as it came."""
    value = part["output"] if "output" in part else part.get("result", part.get("errorText", ""))
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(
        isinstance(item, Mapping) and item.get("type") == "text" for item in value
    ):
        return value
    return _canonical(value)


def _anthropic_messages(message: Mapping[str, Any]) -> list[ChatMessage]:
    role = str(message.get("role"))
    if role in ("system", "developer"):
        return []
    shape = _shape(message, ANTHROPIC)
    blocks: list[Any] = []
    results: list[Any] = []
    for part in message.get("parts") or ():
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind == "text":
            blocks.append(_merge({"type": "text", "text": part.get("text", "")}, part, ANTHROPIC))
        elif kind == "reasoning":
            meta = _meta(part, ANTHROPIC)
            if "signature" in meta:
                blocks.append({"type": "thinking", "thinking": part.get("text", ""), **meta})
        elif kind == "file" and isinstance(part.get("url"), str):
            blocks.append(
                {
                    "type": "image",
                    "source": _anthropic_source(part["url"]),
                    **_meta(part, ANTHROPIC),
                }
            )
        elif kind == "data-anthropic" and isinstance(part.get("data"), Mapping):
            blocks.append(dict(part["data"]))
        elif _is_tool(kind):
            if _is_call(part) and role != "user":
                blocks.append(_anthropic_call_out(part))
            if _is_result(part):
                result = _anthropic_result_out(part)
                (blocks if role == "user" or not _is_call(part) else results).append(result)
    if role == "tool":
        role = "user"
    if role not in ANTHROPIC_ROLES:
        return []
    if not blocks and not results:
        return (
            [] if shape is None else [{"role": role, "content": [], **(shape.get("extra") or {})}]
        )
    built: ChatMessage = {"role": role}
    kind = shape.get("content") if shape is not None else None
    plain = len(blocks) == 1 and blocks[0].get("type") == "text" and len(blocks[0]) == 2
    if plain and kind in (None, "string"):
        built["content"] = blocks[0]["text"]
    else:
        built["content"] = blocks
    if shape is not None:
        built.update(shape.get("extra") or {})
    out = [built] if blocks else []
    if results:
        out.append({"role": "user", "content": results})
    return out


def _anthropic_call_out(part: Mapping[str, Any]) -> dict[str, Any]:
    value = part.get("input")
    if isinstance(value, str) and _shape_name(part) == OPENAI:
        try:
            value = json.loads(value)
        except ValueError:
            value = {"arguments": value}
    return {
        "type": "tool_use",
        "id": str(part.get("toolCallId", "")),
        "name": _tool_name(part),
        "input": value if value is not None else {},
        **_meta(part, ANTHROPIC),
    }


def _anthropic_result_out(part: Mapping[str, Any]) -> dict[str, Any]:
    meta = dict(_meta(part, ANTHROPIC))
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": str(part.get("toolCallId", ""))}
    if meta.pop("content", True) is not False:
        value = (
            part["output"] if "output" in part else part.get("result", part.get("errorText", ""))
        )
        result["content"] = value if isinstance(value, str | list) else _canonical(value)
    if part.get("state") == "output-error" and "is_error" not in meta:
        meta["is_error"] = True
    result.update(meta)
    return result


def _anthropic_source(url: str) -> dict[str, Any]:
    match = _DATA_URL.match(url)
    if match is not None:
        return {"type": "base64", "media_type": match.group(1), "data": url[match.end() :]}
    return {"type": "url", "url": url}


# ---------------------------------------------------------------------------------------------
# shared


class _Where:
    """Names a message and its fields in errors."""

    __slots__ = ("fmt", "name")

    def __init__(self, fmt: Format, message: object) -> None:
        if not isinstance(message, Mapping):
            raise InvalidInputError(f"message must be a dict, not {type(message).__name__}")
        self.fmt = fmt
        message_id = message.get("id")
        label = "OpenAI" if fmt == OPENAI else "Anthropic"
        self.name = f"{label} message" + (
            f" {message_id[:64]!r}" if isinstance(message_id, str) else ""
        )

    def error(self, field: str, problem: str) -> InvalidInputError:
        return InvalidInputError(f"{self.name}: {field} {problem}")


def _block(value: object, field: str, where: _Where) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise where.error(field, f"must be a dict, not {_kind(value)}")
    if not isinstance(value.get("type"), str):
        raise where.error(f"{field}.type", f"must be a string, not {_kind(value.get('type'))}")
    return value


def _kind(value: object) -> str:
    return "missing" if value is None else type(value).__name__


def _rest(block: Mapping[str, Any], *known: str) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k not in known}


def _with_meta(part: dict[str, Any], fmt: Format, meta: Mapping[str, Any]) -> dict[str, Any]:
    if meta:
        part[META] = {fmt: dict(meta)}
    return part


def _meta(part: Mapping[str, Any], fmt: Format) -> Mapping[str, Any]:
    meta = part.get(META)
    value = meta.get(fmt) if isinstance(meta, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _merge(out: dict[str, Any], part: Mapping[str, Any], fmt: Format) -> dict[str, Any]:
    out.update(_meta(part, fmt))
    return out


def _shape(message: Mapping[str, Any], fmt: Format) -> dict[str, Any] | None:
    """The message's ``chat_format`` record when it came in as ``fmt``; a record of the other
    format gives only the content's shape (its fields are not this format's)."""
    shape = message.get(FORMAT_KEY)
    if not isinstance(shape, Mapping) or shape.get("name") not in (OPENAI, ANTHROPIC):
        return None
    if shape["name"] == fmt:
        return dict(shape)
    return {"name": shape["name"], "content": shape.get("content")}


def _shape_name(part: Mapping[str, Any]) -> str | None:
    meta = part.get(META)
    if isinstance(meta, Mapping):
        for name in (OPENAI, ANTHROPIC):
            if name in meta:
                return name
    return None


def _is_tool(kind: object) -> bool:
    return isinstance(kind, str) and (kind.startswith("tool-") or kind == TOOL_PART)


def _is_call(part: Mapping[str, Any]) -> bool:
    return "input" in part or part.get("state") in ("input-streaming", "input-available")


def _is_result(part: Mapping[str, Any]) -> bool:
    return "output" in part or "result" in part or part.get("state") == "output-error"


def _tool_name(part: Mapping[str, Any]) -> str:
    name = part.get("toolName")
    if isinstance(name, str) and name:
        return name
    kind = str(part.get("type", ""))
    return kind[len("tool-") :] if kind.startswith("tool-") and len(kind) > 5 else UNKNOWN_TOOL


def _media_type(url: str) -> str:
    match = _DATA_URL.match(url)
    if match is not None:
        return match.group(1)
    path = url.split("?", 1)[0].split("#", 1)[0]
    suffix = path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    return _IMAGE_SUFFIXES.get(suffix, "image/*")


def _canonical(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
