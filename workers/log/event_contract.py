"""The public event contract, version 1: what a memstream event is on the log, as plain JSON.

A consumer written with nats-py and ``json`` reads it without memstream (``docs/events.md`` is
the catalogue). The payload of every event is one JSON object::

    {"type": "session.message_appended", "version": 3,
     "time": "2026-12-01T22:00:00.123456Z", "session_id": "chat-1", "parent_id": "m2",
     "message": {"id": "m3", "role": "user", "parts": [...]}}

``type`` is a stable dotted name, ``version`` the version this event gives its aggregate
(the aggregate is the subject: its id is derived from the namespace and the payload, as the
domain derives it), ``time`` ISO 8601 in UTC; the other fields are the event's own, a message
as a nested object. Headers carry the contract version (``Ms-Schema``) and the audit fields
(see :mod:`~memstream.workers.log.codec`).

The domain keeps its eventsourcing events; only their wire form is defined here. A message is
spliced into the payload as the canonical JSON text the domain already made (no second
encoding), and re-made from the parsed object when an event is read: the same text, since
Python's JSON keeps key order and the text was made by the same encoder. A later version of
the contract adds an upcaster per changed type (:data:`UPCASTERS`), applied on read until the
payload is current.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from memstream.domain.context import (
    ContextDocument,
    SearchIndex,
    block_aggregate_id,
    document_id,
    search_aggregate_id,
)
from memstream.domain.memory_profile import MemoryProfile, profile_aggregate_id
from memstream.domain.messages import MessageText
from memstream.domain.purge_log import PURGE_LOG_ID, PurgeLog, purge_log_aggregate_id
from memstream.domain.session import SessionAggregate, session_aggregate_id
from memstream.domain.session_registry import SessionRecord, record_aggregate_id

SCHEMA: Final = 1

# Stable names of every event type, as on the log. Renaming one is a breaking change.
EVENT_TYPES: Final[dict[str, type[Any]]] = {
    "session.message_appended": SessionAggregate.MessageAppended,
    "session.messages_appended": SessionAggregate.MessagesAppended,
    "session.message_updated": SessionAggregate.MessageUpdated,
    "session.messages_deleted": SessionAggregate.MessagesDeleted,
    "session.messages_cleared": SessionAggregate.MessagesCleared,
    "session.compaction_added": SessionAggregate.CompactionAdded,
    "session.system_prompt_frozen": SessionAggregate.SystemPromptFrozen,
    "session.system_prompt_cleared": SessionAggregate.SystemPromptCleared,
    "session.skill_loaded": SessionAggregate.SkillLoaded,
    "session.skill_unloaded": SessionAggregate.SkillUnloaded,
    "context.block_written": ContextDocument.ContextBlockWritten,
    "context.block_deleted": ContextDocument.ContextBlockDeleted,
    "context.search_entry_indexed": SearchIndex.SearchEntryIndexed,
    "registry.session_created": SessionRecord.SessionCreated,
    "registry.session_renamed": SessionRecord.SessionRenamed,
    "registry.usage_added": SessionRecord.UsageAdded,
    "registry.session_ended": SessionRecord.SessionEnded,
    "registry.session_deleted": SessionRecord.SessionDeleted,
    "memory.profile_created": MemoryProfile.ProfileCreated,
    "memory.conversation_ingested": MemoryProfile.ConversationIngested,
    "memory.memory_remembered": MemoryProfile.MemoryRemembered,
    "memory.memories_extracted": MemoryProfile.MemoriesExtracted,
    "memory.memory_superseded": MemoryProfile.MemorySuperseded,
    "memory.memory_deleted": MemoryProfile.MemoryDeleted,
    "memory.session_forgotten": MemoryProfile.SessionForgotten,
    "memory.profile_deleted": MemoryProfile.ProfileDeleted,
    "purge.events_purged": PurgeLog.EventsPurged,
}
TYPE_NAMES: Final[dict[type[Any], str]] = {cls: name for name, cls in EVENT_TYPES.items()}

# (type, contract version) -> the payload in the next version; none yet (version 1 is the first).
UPCASTERS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {}

_BASE = ("originator_id", "originator_version", "timestamp")
# json's own C encoder of a string (what json.dumps(ensure_ascii=False) calls for one).
_encode_string: Callable[[str], str] = json.encoder.encode_basestring
# The domain's canonical message text (domain.messages.encode_message), built once.
_CANONICAL: Callable[[object], str] = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False
).encode


class EventContractError(ValueError):
    """A payload that is not an event of this contract (unknown type or version, missing or
    malformed fields)."""


def type_name(event: object) -> str | None:
    """The contract's name of an event's type (``None``: not a memstream event)."""
    return TYPE_NAMES.get(type(event))


def encode_payload(event: Any) -> bytes:
    """The version-1 payload of a registered event."""
    name = TYPE_NAMES[type(event)]
    parts = [
        '{"type":"',
        name,
        '","version":',
        str(int(event.originator_version)),
        ',"time":"',
        utc_time(event.timestamp),
        '"',
    ]
    state = vars(event)
    # A message carries its own id: the event's message_id is left out where it has one.
    nested = "message_json" in state
    for key, value in state.items():
        if key in _BASE or (nested and key == "message_id" and _carries_id(value, state)):
            continue
        if key == "message_json":
            parts += [',"message":', _raw(value)]
        elif key == "entries":
            parts.append(',"messages":[')
            parts.append(
                ",".join(
                    '{"parent_id":'
                    + _string(entry["parent_id"])
                    + ',"message":'
                    + _raw(entry["message_json"])
                    + "}"
                    for entry in value
                )
            )
            parts.append("]")
        else:
            parts += [",", json.dumps(key), ":", json.dumps(value, ensure_ascii=False)]
    parts.append("}")
    return "".join(parts).encode("utf-8")


def utc_time(moment: datetime) -> str:
    """``moment`` in ISO 8601 with ``Z`` for UTC (RFC 3339), the contract's time form; a
    time in another zone keeps its offset."""
    text = moment.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _carries_id(message_id: object, state: dict[str, Any]) -> bool:
    """Whether the event's message has ``message_id`` as its own id (always, from the
    domain): then the payload leaves the event's copy out."""
    message_json = state.get("message_json")
    return isinstance(message_json, str) and message_json.startswith(
        '{"id":' + _string(message_id) + ","
    )


def _string(value: object) -> str:
    """A string or null as JSON, without ``json.dumps``'s per-call cost (a chain of 500 messages
    encodes 500 parent ids)."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return _encode_string(value)
    return json.dumps(value, ensure_ascii=False)


def _raw(message_json: object) -> str:
    """A message's JSON text, spliced as it is (the domain made it canonical JSON); anything
    else (never from the domain) is encoded as a JSON value, to fail where it is applied."""
    return message_json if isinstance(message_json, str) else json.dumps(message_json)


def decode_payload(payload: bytes, schema: int, namespace: str) -> Any:
    """The domain event of a payload of contract version ``schema`` read from a subject of
    ``namespace`` (the aggregate's id derives from it and the payload).

    Raises:
        EventContractError: not an event of this contract.
    """
    try:
        text = payload.decode("utf-8")
        data = (_as_written(text) if schema == SCHEMA else None) or json.loads(text)
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError included
        raise EventContractError(f"payload is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise EventContractError(f"payload is a JSON {type(data).__name__}, not an object")
    if schema > SCHEMA or schema < 1:
        raise EventContractError(f"contract version {schema} is not known (current: {SCHEMA})")
    name = data.get("type")
    while schema < SCHEMA:
        upcast = UPCASTERS.get((str(name), schema))
        if upcast is None:
            raise EventContractError(f"no upcaster for {name!r} from contract version {schema}")
        data = upcast(data)
        schema += 1
        name = data.get("type")
    if not isinstance(name, str) or name not in EVENT_TYPES:
        raise EventContractError(f"unknown event type {name!r}")
    cls = EVENT_TYPES[name]
    try:
        state = _state(name, data, namespace)
    except (AttributeError, KeyError, TypeError, ValueError) as error:
        raise EventContractError(f"{name}: a field is missing or malformed ({error!r})") from None
    event = object.__new__(cls)
    object.__setattr__(event, "__dict__", state)
    return event


class _Raw:
    """A message as its JSON text in the payload, with its id: what reading an event needs of
    it, without building the object and encoding it again."""

    __slots__ = ("id", "text")

    def __init__(self, text: str, message: dict[str, Any]) -> None:
        self.text = MessageText(text)
        self.text.message = message  # parsed once here: the projector reads it from the text
        self.id = message.get("id")


_DECODER = json.JSONDecoder()
# Aggregate ids are uuid5 hashes: each subject's is computed once (bounded: a few hundred KiB).
_ID_OF: dict[str, Callable[[str, str], uuid.UUID]] = {
    "session": session_aggregate_id,
    "block": block_aggregate_id,
    "search": search_aggregate_id,
    "registry": record_aggregate_id,
    "profile": profile_aggregate_id,
    "purge": purge_log_aggregate_id,
}
_AGGREGATE_IDS: dict[tuple[str, str, str], uuid.UUID] = {}
_SINGLE_KEYS = (
    ["type", "version", "time", "session_id", "parent_id", "message"],
    ["type", "version", "time", "session_id", "message"],
)
_MESSAGES = ',"messages":['
_CHAIN_START = '{"type":"session.messages_appended",'
_SINGLE_STARTS = ('{"type":"session.message_appended",', '{"type":"session.message_updated",')
_ENTRY = '{"parent_id":'
_MESSAGE = ',"message":'


def _as_written(text: str) -> dict[str, Any] | None:
    """The payload of a message event laid out exactly as :func:`encode_payload` writes it,
    with each message as its text in the payload (:class:`_Raw`); ``None`` for any other
    payload or layout, which is then read the general way. A message's text is the slice
    between its key and the end of its value: before it come only strings, numbers and null,
    whose quotes are escaped, so the first ``,"message":`` (``,"messages":[``) is the key's."""
    try:
        if text.startswith(_CHAIN_START):
            return _chain_as_written(text)
        if text.startswith(_SINGLE_STARTS):
            return _single_as_written(text)
    except ValueError:  # not laid out as written here after all
        return None
    return None


def _single_as_written(text: str) -> dict[str, Any] | None:
    start = text.find(_MESSAGE)
    if start < 0 or not text.endswith("}"):
        return None
    data = json.loads(text)
    if not isinstance(data, dict) or list(data) not in _SINGLE_KEYS:
        return None
    message = data["message"]
    raw = text[start + len(_MESSAGE) : -1]
    if not isinstance(message, dict) or not raw.startswith("{"):
        return None
    data["message"] = _Raw(raw, message)
    return data


def _chain_as_written(text: str) -> dict[str, Any] | None:
    """:func:`_as_written` for ``session.messages_appended``: each message parsed once, for its
    id and the end of its text."""
    start = text.find(_MESSAGES)
    if start < 0:
        return None
    data = json.loads(text[:start] + "}")
    if not isinstance(data, dict) or list(data) != ["type", "version", "time", "session_id"]:
        return None
    entries = []
    position = start + len(_MESSAGES)
    while text.startswith(_ENTRY, position):
        parent, position = _DECODER.raw_decode(text, position + len(_ENTRY))
        if not text.startswith(_MESSAGE, position):
            return None
        begin = position + len(_MESSAGE)
        message, position = _DECODER.raw_decode(text, begin)
        if not isinstance(message, dict) or text[position : position + 1] != "}":
            return None
        entries.append({"parent_id": parent, "message": _Raw(text[begin:position], message)})
        position += 1
        if text.startswith(",", position):
            position += 1
            continue
        break
    if text[position:] != "]}" or not entries:
        return None
    data["messages"] = entries
    return data


def aggregate_id(name: str, data: dict[str, Any], namespace: str) -> uuid.UUID:
    """The id of the aggregate an event of type ``name`` with payload ``data`` belongs to, in
    ``namespace``: derived as the domain derives it (so the payload leaves it out).

    Raises:
        KeyError: the payload lacks a field the id derives from.
    """
    if name.startswith("session."):
        key = ("session", namespace, data["session_id"])
    elif name.startswith("registry."):
        key = ("registry", namespace, data["session_id"])
    elif name.startswith("memory."):
        key = ("profile", namespace, data["profile"])
    elif name.startswith("purge."):
        key = ("purge", namespace, PURGE_LOG_ID)
    elif name in ("context.block_written", "context.block_deleted"):
        key = ("block", namespace, document_id(data["label"], data["session_id"]))
    else:
        key = ("search", namespace, data["key"])
    known = _AGGREGATE_IDS.get(key)
    if known is None:
        if len(_AGGREGATE_IDS) >= 4096:
            _AGGREGATE_IDS.clear()
        known = _AGGREGATE_IDS[key] = _ID_OF[key[0]](key[1], key[2])
    return known


def _state(name: str, data: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The domain event's attributes (in its own order) from a current payload."""
    state: dict[str, Any] = {
        "originator_id": aggregate_id(name, data, namespace),
        "originator_version": int(data.pop("version")),
        "timestamp": datetime.fromisoformat(data.pop("time")),
    }
    del data["type"]
    if "message" in data:
        message = data.pop("message")
        session_id = data.pop("session_id")
        # The event's own order: session_id, message_id (from the message), parent_id, ...
        state["session_id"] = session_id
        state["message_id"] = data.pop("message_id", None) or _id(message)
        state.update(data)
        state["message_json"] = _text(message)
    elif "messages" in data and name == "session.messages_appended":
        messages = data.pop("messages")
        state.update(data)
        state["entries"] = [
            {
                "message_id": entry.get("message_id") or _id(entry["message"]),
                "parent_id": entry["parent_id"],
                "message_json": _text(entry["message"]),
            }
            for entry in messages
        ]
    else:
        state.update(data)
    return state


def _id(message: Any) -> Any:
    return message.id if isinstance(message, _Raw) else message["id"]


def _text(message: object) -> object:
    """The JSON text of a message: as written in the payload, or (for a payload laid out
    otherwise) the canonical text of the object (the domain's own encoding); a value that is
    not an object is passed on as it is, to fail where it is applied."""
    if isinstance(message, _Raw):
        return message.text
    if not isinstance(message, dict):
        return message
    text = MessageText(_CANONICAL(message))
    text.message = message
    return text


__all__ = [
    "EVENT_TYPES",
    "SCHEMA",
    "TYPE_NAMES",
    "UPCASTERS",
    "EventContractError",
    "aggregate_id",
    "decode_payload",
    "encode_payload",
    "type_name",
]
