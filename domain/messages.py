"""Session messages: validation, canonical JSON, and the text that full-text search sees."""

from __future__ import annotations

import contextlib
import gc
import json
import uuid
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from datetime import date, time
from typing import Any, cast

from memstream.domain.chat_formats import from_chat
from memstream.domain.errors import InvalidInputError
from memstream.domain.limits import MESSAGE_MAX_BYTES, check_message_id

Message = dict[str, Any]
COMPACTION_PREFIX = "compaction_"


def normalize_message(
    message: object, tool_names: MutableMapping[str, str] | None = None
) -> Message:
    """Validate a message dict and return the dict to store.

    Accepts the reference shape ``{"id", "role", "parts": [...]}`` (extra keys kept verbatim),
    the chat-style convenience ``{"role", "content": str}``, stored as one text part, and an
    OpenAI Chat Completions or Anthropic Messages message, stored losslessly as parts (see
    :mod:`~memstream.domain.chat_formats`; ``tool_names`` carries a batch's call names to its
    results). A message without an ``id`` gets a fresh one.

    Raises:
        InvalidInputError: the message is not a dict, has a bad id/role/parts, is not JSON, or its
            JSON exceeds 1 MiB.
    """
    # (``type(...) is dict`` first: the Mapping check is an ABC lookup, hundreds per batch)
    if type(message) is not dict and not isinstance(message, Mapping):
        raise InvalidInputError(f"message must be a dict, not {type(message).__name__}")
    stored: Message = dict(message)
    if "parts" not in stored:
        converted = from_chat(stored, tool_names)
        if converted is not None:
            stored = converted
    if "parts" not in stored and isinstance(stored.get("content"), str):
        stored["parts"] = [{"type": "text", "text": stored.pop("content")}]
    if "id" not in stored:
        stored = {"id": uuid.uuid4().hex, **stored}
    check_message_id(stored["id"], "message id")
    if not isinstance(stored.get("role"), str):
        raise InvalidInputError(
            f"{_name(stored)} role must be a string, not {_kind(stored, 'role')}"
        )
    if "parts" not in stored and "content" in stored:
        raise InvalidInputError(
            f"{_name(stored)} content must be a string, not {_kind(stored, 'content')}"
        )
    parts = stored.get("parts")
    if not isinstance(parts, list):
        raise InvalidInputError(
            f"{_name(stored)} parts must be a list, not {_kind(stored, 'parts')}"
        )
    for index, part in enumerate(parts):
        if type(part) is not dict and not isinstance(part, Mapping):
            raise InvalidInputError(
                f"{_name(stored)} part {index} must be a dict, not {type(part).__name__}"
            )
    return stored


def _name(message: Mapping[str, Any]) -> str:
    """How an error names a message: by (the start of) its id."""
    return f"message {message['id'][:64]!r}"


def _kind(message: Mapping[str, Any], key: str) -> str:
    """What a message holds under ``key``, for an error: its type name, or "missing"."""
    return type(message[key]).__name__ if key in message else "missing"


def encode_message(message: Message) -> str:
    """Return the canonical JSON of a message, checking the 1 MiB limit.

    Dates and datetimes anywhere in it (such as ``created_at``) are stored as ISO 8601 strings
    and come back as strings, as ``JSON.stringify`` does in the reference (spec §1.1).

    Raises:
        InvalidInputError: the message is not JSON-serialisable, holds a lone surrogate, or is
            larger than 1 MiB.
    """
    try:
        text = _CANONICAL.encode(message)
    except (TypeError, ValueError) as error:
        raise InvalidInputError(f"message {message.get('id')!r} is not JSON: {error}") from None
    except RecursionError:
        raise InvalidInputError(
            f"message {message.get('id')!r} is nested too deeply to be stored as JSON"
        ) from None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInputError(
            f"message {str(message.get('id'))[:64]!r} is not valid Unicode: "
            "it holds a lone surrogate"
        ) from None
    if size > MESSAGE_MAX_BYTES:
        raise InvalidInputError(
            f"message {str(message.get('id'))[:64]!r} is {size} bytes of JSON; "
            f"the limit is {MESSAGE_MAX_BYTES}"
        )
    return text


def _iso_date(value: object) -> str:
    if isinstance(value, date | time):
        return value.isoformat()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# The canonical form of a stored message, built once (json.dumps builds an encoder per call).
_CANONICAL = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_iso_date
)


class MessageText(str):
    """A message's JSON text that also holds what it parses to (``message``), set by a reader
    that parsed it already, such as the event decoder: :func:`decode_message` then does not
    parse it again. It is the text in every other respect."""

    message: object = None


def decode_message(text: str) -> Message | None:
    """Parse stored JSON; ``None`` unless it is a dict with string id and role and a parts list."""
    if isinstance(text, MessageText) and text.message is not None:
        value: object = text.message
    else:
        try:
            value = json.loads(text)
        except ValueError:
            return None
    return cast(Message, value) if _is_message(value) else None


# Decoding this many messages at once pauses the cyclic garbage collector (see below).
LARGE_DECODE = 1000


@contextlib.contextmanager
def _collector_paused(pause: bool) -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a large JSON array is decoded.

    A 10,000-message history creates some 40,000 dicts and lists, all new and none in a cycle: the
    collector would walk them again and again for nothing, and could start a full collection of the
    whole process in the middle, which walks every object the process holds (bench/RESULTS.md,
    'Figures moved from code comments'). Paused, the objects are examined once afterwards, at the
    collector's next turn. Only re-enabled if it was enabled.
    """
    if not pause or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def decode_messages(texts: Sequence[str]) -> list[Message | None]:
    """:func:`decode_message` of each text, parsed as one JSON array when every text is valid.

    One parse of a long history enters the parser once instead of once per message
    (bench/RESULTS.md, 'Figures moved from code comments'). A text that is not one JSON value makes
    the array invalid (or changes its length), and then each text is parsed on its own, so corrupt
    rows still come back as ``None`` in their place.
    """
    try:
        with _collector_paused(len(texts) >= LARGE_DECODE):
            values = json.loads("[" + ",".join(texts) + "]")
    except ValueError:
        values = None
    if not isinstance(values, list) or len(values) != len(texts):
        return [decode_message(text) for text in texts]
    return [value if _is_message(value) else None for value in values]


def _is_message(value: object) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("id"), str)
        and isinstance(value.get("role"), str)
        and isinstance(value.get("parts"), list)
    )


def searchable_text(message: Message) -> str:
    """The text full-text search indexes: the ``text`` of text parts, joined by one space."""
    texts = [
        part["text"]
        for part in message.get("parts", [])
        if isinstance(part, Mapping)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    ]
    return " ".join(t for t in texts if t)


def compaction_message(compaction_id: str, summary: str) -> Message:
    """The synthetic assistant message that stands for a compacted range."""
    return {
        "id": COMPACTION_PREFIX + compaction_id,
        "role": "assistant",
        "parts": [{"type": "text", "text": summary}],
    }


def is_compaction_message(message: Mapping[str, Any]) -> bool:
    """True for synthetic overlay messages (id starts with ``compaction_``)."""
    return str(message.get("id", "")).startswith(COMPACTION_PREFIX)
