"""Domain events to NATS messages and back.

Memstream's own events are written in the public contract (:mod:`event_contract`, version 1):
a plain JSON payload, the contract version in ``Ms-Schema`` and the audit headers that carry
something the payload does not. Events written before it (no ``Ms-Schema``) are eventsourcing's
stored events with the topic, originator and timestamp in headers; they are still read, and
the eventsourcing persistence module for other applications keeps writing that form
(:func:`stored_headers`, :func:`to_stored_event`).

Version-1 headers of an event:

- ``Nats-Msg-Id``: the command id, or ``<command id>:<index>`` for the events of a command
  that decided several (JetStream's de-duplication key);
- ``Ms-Schema``: the contract version of the payload (``1``);
- ``Ms-Actor``: who caused it;
- ``Ms-Command-Id``, ``Ms-Causation-Id``, ``Ms-Correlation-Id``: only where they differ from
  what can be derived: the command id from ``Nats-Msg-Id`` (up to a ``:``), causation and
  correlation from the command id.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from typing import Any, Final, cast

from eventsourcing.domain import CanMutateAggregate
from eventsourcing.persistence import (
    DatetimeAsISO,
    DecimalAsStr,
    JSONTranscoder,
    Mapper,
    StoredEvent,
    UUIDAsHex,
)
from eventsourcing.utils import register_topic

from memstream.domain.errors import MemstreamError
from memstream.domain.session import SessionAggregate
from memstream.workers.log.event_contract import (
    SCHEMA,
    EventContractError,
    decode_payload,
    encode_payload,
    type_name,
)
from memstream.workers.log.subjects import parse_subject

H_TOPIC = "Ms-Topic"
H_CLASS_VERSION = "Ms-Class-Version"
H_ORIGINATOR_ID = "Ms-Originator-Id"
H_ORIGINATOR_VERSION = "Ms-Originator-Version"
H_COMMAND_ID = "Ms-Command-Id"
H_CAUSATION_ID = "Ms-Causation-Id"
H_CORRELATION_ID = "Ms-Correlation-Id"
H_ACTOR = "Ms-Actor"
H_TRACEPARENT = "traceparent"  # W3C Trace Context
H_TIMESTAMP = "Ms-Timestamp"
H_MSG_ID = "Nats-Msg-Id"
H_SCHEMA = "Ms-Schema"
_SCHEMA_TEXT = str(SCHEMA)
H_EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"


class _CommandIds:
    """Unique command ids without reading the OS's random source for each (as ``uuid4`` does):
    80 random bits drawn once per process, then a counter, as 32 hex digits. A forked child
    draws its own bits."""

    def __init__(self) -> None:
        self._prefix = ""
        self._count = 0
        self._follows_forks = False

    def next(self) -> str:
        if not self._prefix:
            if not self._follows_forks:  # registered on first use, not at import
                os.register_at_fork(after_in_child=self.reset)
                self._follows_forks = True
            self._prefix = secrets.token_hex(10)
        self._count += 1
        return f"{self._prefix}{self._count:012x}"

    def reset(self) -> None:
        """Draw new bits on the next id (in a forked child, which must not repeat its
        parent's ids)."""
        self._prefix = ""


_command_ids = _CommandIds()


def new_command_id() -> str:
    """A fresh command id (the ``Nats-Msg-Id`` base that makes a retried command a no-op)."""
    return _command_ids.next()


@dataclass(frozen=True, slots=True)
class CommandMeta:
    """Who and what caused a write; carried in every event's headers for the audit trail."""

    command_id: str = field(default_factory=new_command_id)
    actor: str = "memstream"
    causation_id: str = ""
    correlation_id: str = ""
    traceparent: str = ""  # the W3C trace context of the command's span, when traced


# Aggregates renamed since events were written in eventsourcing's stored form, by the topic
# those events carry (``memstream.domain.session:Session.MessageAppended``): eventsourcing
# resolves a nested event's topic through its aggregate's, so one alias covers its events.
RENAMED_AGGREGATES: Final[dict[str, type[Any]]] = {
    "memstream.domain.session:Session": SessionAggregate,
}


def former_topics(cls: type[Any]) -> tuple[str, ...]:
    """The topics ``cls`` had before its aggregate was renamed (none if it never was)."""
    return tuple(
        old + cls.__qualname__[len(new.__qualname__) :]
        for old, new in RENAMED_AGGREGATES.items()
        if cls.__module__ == new.__module__
        and (cls is new or cls.__qualname__.startswith(new.__qualname__ + "."))
    )


@cache
def mapper() -> Mapper[Any]:
    """The process-wide mapper (built on first use, not at import), which reads the topics of
    renamed aggregates too."""
    for old, new in RENAMED_AGGREGATES.items():
        register_topic(old, new)
    transcoder = JSONTranscoder()
    transcoder.register(UUIDAsHex())
    transcoder.register(DatetimeAsISO())
    transcoder.register(DecimalAsStr())
    return Mapper(transcoder=transcoder)


def encode_event(
    event: CanMutateAggregate[Any], meta: CommandMeta, msg_id: str
) -> tuple[bytes, dict[str, str]]:
    """Return the payload and headers of one event's NATS message (contract version 1 for
    memstream's events, eventsourcing's stored form for any other)."""
    if type_name(event) is None:
        return _encode_stored(event, meta, msg_id)
    headers = {H_SCHEMA: _SCHEMA_TEXT, H_MSG_ID: msg_id, H_ACTOR: meta.actor}
    command_id = meta.command_id
    if command_id != msg_id.partition(":")[0] or ":" in command_id:
        headers[H_COMMAND_ID] = command_id
    if meta.causation_id and meta.causation_id != command_id:
        headers[H_CAUSATION_ID] = meta.causation_id
    if meta.correlation_id and meta.correlation_id != command_id:
        headers[H_CORRELATION_ID] = meta.correlation_id
    if meta.traceparent:
        headers[H_TRACEPARENT] = meta.traceparent
    return encode_payload(event), headers


def _encode_stored(
    event: CanMutateAggregate[Any], meta: CommandMeta, msg_id: str
) -> tuple[bytes, dict[str, str]]:
    stored = mapper().to_stored_event(event)
    headers = stored_headers(stored, meta, msg_id, event.timestamp.isoformat())
    headers[H_CLASS_VERSION] = str(getattr(type(event), "class_version", 1))
    return stored.state, headers


def command_id(headers: Mapping[str, str]) -> str:
    """The command id of an event's message (either contract)."""
    explicit = headers.get(H_COMMAND_ID)
    if explicit:
        return explicit
    return headers.get(H_MSG_ID, "").partition(":")[0]


def event_type(payload: bytes, headers: Mapping[str, str]) -> str:
    """The type of an event's message: its contract name, or the eventsourcing topic of an
    event written before the contract (``""`` when it says none)."""
    if H_SCHEMA not in headers:
        return headers.get(H_TOPIC, "")
    with contextlib.suppress(ValueError):
        data = json.loads(payload)
        if isinstance(data, dict) and isinstance(data.get("type"), str):
            return str(data["type"])
    return ""


def stored_headers(
    stored: StoredEvent, meta: CommandMeta, msg_id: str, timestamp: str | None = None
) -> dict[str, str]:
    """Headers for a stored event (shared by the domain path and the eventsourcing adapter).

    ``timestamp`` is the event's own time (our events carry one); without it, now. No
    class-version header here: a recorder stores events of classes it need not know (the
    version travels in the payload state); :func:`encode_event` adds it for our own events.
    """
    return {
        H_TOPIC: stored.topic,
        H_ORIGINATOR_ID: str(stored.originator_id),
        H_ORIGINATOR_VERSION: str(stored.originator_version),
        H_COMMAND_ID: meta.command_id,
        H_CAUSATION_ID: meta.causation_id or meta.command_id,
        H_CORRELATION_ID: meta.correlation_id or meta.command_id,
        H_ACTOR: meta.actor,
        H_TIMESTAMP: timestamp or datetime.now(UTC).isoformat(),
        H_MSG_ID: msg_id,
    }


def to_stored_event(payload: bytes, headers: dict[str, str]) -> StoredEvent:
    """Rebuild eventsourcing's stored event from a NATS message."""
    originator: Any = headers[H_ORIGINATOR_ID]
    with contextlib.suppress(ValueError):
        originator = uuid.UUID(originator)
    return StoredEvent(
        originator_id=originator,
        originator_version=int(headers[H_ORIGINATOR_VERSION]),
        topic=headers[H_TOPIC],
        state=payload,
    )


def decode_event(
    payload: bytes, headers: Mapping[str, str], subject: str
) -> CanMutateAggregate[Any]:
    """Rebuild the domain event of a NATS message on ``subject`` (upcasting older contract or
    class versions).

    Raises:
        EventContractError: a contract payload that is not a known event.
        Exception: an eventsourcing stored event that cannot be rebuilt.
    """
    schema = headers.get(H_SCHEMA)
    if schema is not None:
        try:
            version = int(schema)
        except ValueError:
            raise EventContractError(f"Ms-Schema is {schema!r}, not a version") from None
        try:
            namespace = parse_subject(subject).namespace
        except (MemstreamError, ValueError) as error:
            raise EventContractError(f"{subject!r} is not a subject of an aggregate") from error
        event: Any = decode_payload(payload, version, namespace)
    else:
        event = mapper().to_domain_event(to_stored_event(payload, dict(headers)))
    return cast("CanMutateAggregate[Any]", event)
