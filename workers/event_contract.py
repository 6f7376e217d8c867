"""The public event contract, version 1: what a memstream event is on the log, as plain JSON.

A consumer written with nats-py and ``json`` reads it without memstream (``docs/events.md`` is
the catalogue). The payload of every event is one JSON object::

    {"type": "session.message_appended", "version": 3,
     "time": "2026-12-01T22:00:00.123456+00:00", "session_id": "chat-1", "parent_id": "m2",
     "message": {"id": "m3", "role": "user", "parts": [...]}}

``type`` is a stable dotted name, ``version`` the version this event gives its aggregate
(the aggregate is the subject: its id is derived from the namespace and the payload, as the
domain derives it), ``time`` ISO 8601 in UTC; the other fields are the event's own, a message
as a nested object. Headers carry the contract version (``Ms-Schema``) and the audit fields
(see :mod:`~memstream.workers.codec`).

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
from memstream.domain.session import Session, session_aggregate_id

SCHEMA: Final = 1

# Stable names of every event type, as on the log. Renaming one is a breaking change.
EVENT_TYPES: Final[dict[str, type[Any]]] = {
    "session.message_appended": Session.MessageAppended,
    "session.messages_appended": Session.MessagesAppended,
    "session.message_updated": Session.MessageUpdated,
    "session.messages_deleted": Session.MessagesDeleted,
    "session.messages_cleared": Session.MessagesCleared,
    "session.compaction_added": Session.CompactionAdded,
    "session.system_prompt_frozen": Session.SystemPromptFrozen,
    "session.skill_loaded": Session.SkillLoaded,
    "session.skill_unloaded": Session.SkillUnloaded,
    "context.block_written": ContextDocument.ContextBlockWritten,
    "context.search_entry_indexed": SearchIndex.SearchEntryIndexed,
}
TYPE_NAMES: Final[dict[type[Any], str]] = {cls: name for name, cls in EVENT_TYPES.items()}

# (type, contract version) -> the payload in the next version; none yet (version 1 is the first).
UPCASTERS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {}

_BASE = ("originator_id", "originator_version", "timestamp")
_MESSAGE_SEPARATORS = (",", ":")


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
        event.timestamp.isoformat(),
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
                    + json.dumps(entry["parent_id"], ensure_ascii=False)
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


def _carries_id(message_id: object, state: dict[str, Any]) -> bool:
    """Whether the event's message has ``message_id`` as its own id (always, from the
    domain): then the payload leaves the event's copy out."""
    message_json = state.get("message_json")
    return isinstance(message_json, str) and message_json.startswith(
        '{"id":' + json.dumps(message_id, ensure_ascii=False) + ","
    )


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
        data = json.loads(payload)
    except ValueError as error:
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


def aggregate_id(name: str, data: dict[str, Any], namespace: str) -> uuid.UUID:
    """The id of the aggregate an event of type ``name`` with payload ``data`` belongs to, in
    ``namespace``: derived as the domain derives it (so the payload leaves it out).

    Raises:
        KeyError: the payload lacks a field the id derives from.
    """
    if name.startswith("session."):
        return session_aggregate_id(namespace, data["session_id"])
    if name == "context.block_written":
        return block_aggregate_id(namespace, document_id(data["label"], data["session_id"]))
    return search_aggregate_id(namespace, data["key"])


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
        state["message_id"] = data.pop("message_id", None) or message["id"]
        state.update(data)
        state["message_json"] = _text(message)
    elif "messages" in data:
        messages = data.pop("messages")
        state.update(data)
        state["entries"] = [
            {
                "message_id": entry.get("message_id") or entry["message"]["id"],
                "parent_id": entry["parent_id"],
                "message_json": _text(entry["message"]),
            }
            for entry in messages
        ]
    else:
        state.update(data)
    return state


def _text(message: object) -> object:
    """The canonical JSON text of a message object (the domain's own encoding); a value that is
    not an object is passed on as it is, to fail where it is applied."""
    if not isinstance(message, dict):
        return message
    return json.dumps(message, ensure_ascii=False, separators=_MESSAGE_SEPARATORS)


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
