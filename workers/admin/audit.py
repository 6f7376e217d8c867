"""Audit reads of the log: events with their headers, filtered by subject, type, sequence, time.

Every read uses an ephemeral consumer (ack none, memory storage) that the server drops on its
own, so reading leaves no state behind and never disturbs the workers' durable consumers. A read
is bounded by the stream's last sequence at its start unless it follows the log.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import nats.errors
import nats.js.errors
from eventsourcing.utils import get_topic
from nats.aio.msg import Msg
from nats.js import api

from memstream.domain.context import document_id
from memstream.domain.errors import InvalidInputError, MemstreamError, UnavailableError
from memstream.domain.limits import check_namespace
from memstream.workers.log.codec import (
    H_ACTOR,
    H_CAUSATION_ID,
    H_CLASS_VERSION,
    H_COMMAND_ID,
    H_CORRELATION_ID,
    H_MSG_ID,
    H_ORIGINATOR_ID,
    H_ORIGINATOR_VERSION,
    H_SCHEMA,
    H_TIMESTAMP,
    command_id,
    event_type,
    former_topics,
)
from memstream.workers.log.event_contract import EVENT_TYPES, aggregate_id
from memstream.workers.log.event_log import EventLog
from memstream.workers.log.subjects import encode_token, parse_subject, subject_for
from memstream.workers.pull import Puller

logger = logging.getLogger(__name__)

# Audit headers of an event, under the names the JSONL export uses.
AUDIT_HEADERS: dict[str, str] = {
    "command_id": H_COMMAND_ID,
    "causation_id": H_CAUSATION_ID,
    "correlation_id": H_CORRELATION_ID,
    "actor": H_ACTOR,
    "originator_id": H_ORIGINATOR_ID,
    "originator_version": H_ORIGINATOR_VERSION,
    "class_version": H_CLASS_VERSION,
    "timestamp": H_TIMESTAMP,
    "msg_id": H_MSG_ID,
}
FOLLOW_POLL_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class EventQuery:
    """Which events to read; every criterion is optional and they combine with AND.

    ``subject`` is a NATS subject filter (wildcards allowed) inside the stream's subjects;
    ``event_type`` matches the event's contract type (``session.message_appended``), its
    class name (``MessageAppended`` or ``SessionAggregate.MessageAppended``, or
    ``Session.MessageAppended`` as the class was called) or the eventsourcing topic of an event
    written before the contract; sequences are inclusive; times are aware
    datetimes, inclusive, compared with the time the stream stored the event.
    """

    subject: str | None = None
    event_type: str | None = None
    from_seq: int | None = None
    to_seq: int | None = None
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        for name in ("from_seq", "to_seq"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise InvalidInputError(f"{name} is {value}; stream sequences start at 1")
        if self.from_seq and self.to_seq and self.from_seq > self.to_seq:
            raise InvalidInputError(f"from_seq {self.from_seq} is after to_seq {self.to_seq}")
        if self.since and self.until and self.since > self.until:
            raise InvalidInputError(
                f"since {self.since.isoformat()} is after until {self.until.isoformat()}"
            )

    def matches(self, event: AuditEvent) -> bool:
        """True when ``event`` has the wanted type and is not older than ``since``."""
        if self.since is not None and event.time < self.since:
            return False
        wanted, topic = self.event_type, event.type
        if not wanted or topic == wanted or topic.endswith((":" + wanted, "." + wanted)):
            return True
        return topic in type_aliases(wanted)


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One event of the log as the audit trail shows it."""

    seq: int
    subject: str
    time: datetime
    type: str
    headers: dict[str, str]
    payload: Any
    nats_headers: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The audit view as JSON: seq, subject, stored time, type, audit headers, payload."""
        return {
            "seq": self.seq,
            "subject": self.subject,
            "time": self.time.isoformat(),
            "type": self.type,
            "headers": self.headers,
            "payload": self.payload,
        }

    def export_json(self) -> dict[str, Any]:
        """One line of an export: the audit view, and the headers the event was stored with
        (``nats_headers``), which ``events import`` sends again."""
        line = self.as_json()
        line["nats_headers"] = self.nats_headers
        line["payload"] = line.pop("payload")  # last: the biggest field
        return line


AGGREGATE_KINDS = ("session", "block", "search", "registry", "profile", "purge")


def subject_filter(
    prefix: str,
    *,
    namespace: str | None = None,
    aggregate: str | None = None,
    identifier: str | None = None,
) -> str:
    """The subject filter of the events of a namespace, an aggregate kind and/or one aggregate
    (``identifier``: a session id, a profile name, ...; escaped as subjects escape it).

    Raises:
        InvalidInputError: the namespace is not a valid namespace, or the kind is none of
            :data:`AGGREGATE_KINDS`.
    """
    if namespace is not None:
        check_namespace(namespace)
    if aggregate is not None and aggregate not in AGGREGATE_KINDS:
        raise InvalidInputError(
            f"aggregate {aggregate!r} is not one of {', '.join(AGGREGATE_KINDS)}"
        )
    return ".".join(
        (
            prefix,
            namespace or "*",
            aggregate or "*",
            "*" if identifier is None else encode_token(identifier),
        )
    )


def type_aliases(wanted: str) -> frozenset[str]:
    """Every name of the event types ``wanted`` names: the contract's (``session.message_appended``)
    and the eventsourcing topics events written before the contract carry (the current one, and
    any from before the aggregate was renamed), for a contract name, a class name
    (``MessageAppended``), a qualified one (``SessionAggregate.MessageAppended``, or as it was,
    ``Session.MessageAppended``) or a topic."""
    names: set[str] = set()
    for name, cls in EVENT_TYPES.items():
        topics = (get_topic(cls), *former_topics(cls))
        qualified = {topic.partition(":")[2] for topic in topics}
        if wanted in (name, cls.__name__, *qualified, *topics):
            names.update((name, *topics))
    return frozenset(names)


def _audit_headers(headers: dict[str, str], payload: Any, subject: str) -> dict[str, str]:
    """The audit fields of an event: from its headers, and for a contract event the derived
    ones, and the aggregate's id (from its subject and payload), version and time."""
    if H_SCHEMA not in headers:
        return {key: headers[h] for key, h in AUDIT_HEADERS.items() if h in headers}
    command = command_id(headers)
    fields = {
        "command_id": command,
        "causation_id": headers.get(H_CAUSATION_ID, command),
        "correlation_id": headers.get(H_CORRELATION_ID, command),
        "actor": headers.get(H_ACTOR, ""),
        "msg_id": headers.get(H_MSG_ID, ""),
        "schema": headers[H_SCHEMA],
    }
    if isinstance(payload, dict):
        with contextlib.suppress(MemstreamError, KeyError, TypeError, ValueError):
            namespace = parse_subject(subject).namespace
            fields["originator_id"] = str(aggregate_id(str(payload["type"]), payload, namespace))
        for key, name in (("originator_version", "version"), ("timestamp", "time")):
            if name in payload:
                fields[key] = str(payload[name])
    return fields


def audit_event(msg: Msg) -> AuditEvent:
    """The audit view of one stream message (payload decoded from JSON when it is JSON)."""
    headers = dict(msg.headers or {})
    try:
        payload: Any = json.loads(msg.data)
    except ValueError:  # a poison message stays visible in the audit trail, as text
        payload = msg.data.decode("utf-8", "replace")
    metadata = msg.metadata
    return AuditEvent(
        seq=metadata.sequence.stream,
        subject=msg.subject,
        time=metadata.timestamp,
        type=event_type(msg.data, headers),
        headers=_audit_headers(headers, payload, msg.subject),
        payload=payload,
        nats_headers=headers,
    )


async def read_events(
    log: EventLog, query: EventQuery, *, follow: bool = False, batch: int = 500
) -> AsyncIterator[AuditEvent]:
    """Yield the events ``query`` selects, in stream order.

    Without ``follow`` the read ends at the stream's last sequence as of the call; with it, the
    read waits for new events until the caller stops iterating (or ``to_seq``/``until`` pass).

    Raises:
        InvalidInputError: the subject filter is not inside the stream's subjects.
        UnavailableError: NATS did not answer in time.
    """
    last = await log.stream_last_seq()
    end = query.to_seq if follow else min(query.to_seq or last, last)
    start = query.from_seq or 1
    if end is not None and start > end:
        return
    config = api.ConsumerConfig(
        deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=start,
        ack_policy=api.AckPolicy.NONE,
        filter_subject=await log.stored(query.subject or f"{log.subject_prefix}.>"),
        inactive_threshold=30.0,
        mem_storage=True,
    )
    if query.since is not None and query.from_seq is None:
        config.deliver_policy = api.DeliverPolicy.BY_START_TIME
        config.opt_start_seq = None
        config.opt_start_time = query.since
    try:
        puller, info = await Puller.create(log.client, log.stream, config)
    except nats.js.errors.BadRequestError as error:
        raise InvalidInputError(
            f"cannot read subject {config.filter_subject!r} of stream {log.stream!r}: "
            f"{error.description}"
        ) from error
    try:
        if not follow and not info.num_pending:
            return
        while True:
            try:
                msgs = await puller.fetch(batch, FOLLOW_POLL_SECONDS if follow else log.timeout)
            except (TimeoutError, nats.errors.TimeoutError) as error:
                if follow:
                    continue
                raise UnavailableError(f"reading stream {log.stream!r} timed out") from error
            for msg in msgs:
                event = audit_event(msg)
                if (end is not None and event.seq > end) or (
                    query.until is not None and event.time > query.until
                ):
                    return  # stream sequences and store times only grow
                if query.matches(event):
                    yield event
                if (end is not None and event.seq >= end) or (
                    not follow and msg.metadata.num_pending == 0
                ):
                    return
    finally:
        await puller.close()


async def last_events(log: EventLog, query: EventQuery, count: int) -> tuple[list[AuditEvent], int]:
    """The last ``count`` events ``query`` selects, and the stream sequence the read ended at.

    Reads backwards in growing windows, so a filter that matches rarely costs more reads but a
    plain tail reads only ``count`` events.
    """
    last = await log.stream_last_seq()
    if count <= 0 or last == 0:
        return [], last
    window = count
    while True:
        start = max(1, last - window + 1)
        window_query = replace(query, from_seq=start, to_seq=last)
        found = [event async for event in read_events(log, window_query)]
        if len(found) >= count or start == 1:
            return found[-count:], last
        window *= 8


async def tail_events(
    log: EventLog, query: EventQuery, *, count: int, follow: bool = False
) -> AsyncIterator[AuditEvent]:
    """``tail``: the last ``count`` matching events (or all from ``query.from_seq`` when set),
    then, with ``follow``, every new matching event until the caller stops iterating."""
    if query.from_seq is not None:
        async for event in read_events(log, query, follow=follow):
            yield event
        return
    events, last = await last_events(log, query, count)
    for event in events:
        yield event
    if follow:
        async for event in read_events(log, replace(query, from_seq=last + 1), follow=True):
            yield event


async def session_trail(
    log: EventLog, namespace: str, session_id: str, block_labels: Iterable[str] = ()
) -> list[AuditEvent]:
    """Every event that shaped a session, in log order: its own (messages, overlays, prompt,
    skills), its registration's (``registry``), and its built-in blocks' (``block_labels``)."""
    prefix = log.subject_prefix
    subjects = [
        subject_for(prefix, namespace, "session", session_id),
        subject_for(prefix, namespace, "registry", session_id),
        *(
            subject_for(prefix, namespace, "block", document_id(label, session_id))
            for label in sorted(set(block_labels))
        ),
    ]
    trail: list[AuditEvent] = []
    for subject in subjects:
        trail.extend([event async for event in read_events(log, EventQuery(subject=subject))])
    return sorted(trail, key=lambda event: event.seq)


async def memory_trail(
    log: EventLog, namespace: str, memory_id: str, profile: str | None = None
) -> list[AuditEvent]:
    """Every event that shaped one memory, in log order (see :func:`shaped_memory`), read from
    ``profile``'s subject, or from every profile's of ``namespace`` when it is not given (a
    deleted memory is in no read model: the log is the only place that still knows it)."""
    prefix = log.subject_prefix
    subject = (
        subject_for(prefix, namespace, "profile", profile)
        if profile is not None
        else f"{prefix}.{namespace}.profile.*"
    )
    events = [event async for event in read_events(log, EventQuery(subject=subject))]
    return shaped_memory(events, memory_id)


def shaped_memory(events: Iterable[AuditEvent], memory_id: str) -> list[AuditEvent]:
    """The events among ``events`` (one or more profiles' events, in log order) that shaped
    memory ``memory_id``: the text remembered as it, or the ingest it was extracted from
    (by its source, or holding one of its source messages); its extraction; a supersession
    naming it; its deletion; the forgetting of its session, or the deletion of its profile,
    after it was extracted."""
    events = list(events)
    sources: set[str] = set()
    messages: set[str] = set()
    sessions: set[str] = set()
    profiles: set[str] = set()
    extracted_at = None
    for event in events:
        payload = event.payload if isinstance(event.payload, dict) else {}
        if event.type != "memory.memories_extracted":
            continue
        for memory in payload.get("memories") or ():
            if isinstance(memory, dict) and memory.get("id") == memory_id:
                sources.add(str(payload.get("source")))
                messages.update(str(m) for m in memory.get("source_message_ids") or ())
                if memory.get("session_id"):
                    sessions.add(str(memory["session_id"]))
                profiles.add(str(payload.get("profile")))
                extracted_at = event.seq if extracted_at is None else extracted_at
    shaped = []
    for event in events:
        payload = event.payload if isinstance(event.payload, dict) else {}
        kind = event.type
        if (
            (kind == "memory.memory_remembered" and payload.get("memory_id") == memory_id)
            or (
                kind == "memory.conversation_ingested"
                and payload.get("profile") in profiles
                and (
                    payload.get("ingest_id") in sources
                    or any(
                        isinstance(m, dict) and m.get("id") in messages
                        for m in payload.get("messages") or ()
                    )
                )
            )
            or (
                kind == "memory.memories_extracted"
                and payload.get("source") in sources
                and any(
                    isinstance(m, dict) and m.get("id") == memory_id
                    for m in payload.get("memories") or ()
                )
            )
            or (
                kind in ("memory.memory_superseded", "memory.memory_deleted")
                and memory_id in (payload.get("memory_id"), payload.get("superseded_by"))
            )
            or (
                extracted_at is not None
                and event.seq > extracted_at
                and payload.get("profile") in profiles
                and (
                    (kind == "memory.session_forgotten" and payload.get("session_id") in sessions)
                    or kind == "memory.profile_deleted"
                )
            )
        ):
            shaped.append(event)
    return shaped
