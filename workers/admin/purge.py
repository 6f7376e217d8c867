"""``memstream admin purge``: erase from the stream the events of sessions and profiles deleted
longer ago than a grace period.

Deleting a session or a profile is itself an event: its messages stay on the log, which is what
makes memory auditable and replayable, and also what a right to erasure must reach. A purge
erases them for good once the deletion is older than the grace period: each event with
JetStream's message delete, which overwrites it in the server's files, then each subject with a
purge by subject (which alone would leave the bytes in the server's block files; a stream that
denies message deletes, as older memstream streams do, gets that alone, and a warning):

- a **session deleted by a SessionManager** (its registry subject ends with
  ``registry.session_deleted``): its registry subject, its session subject and its built-in
  blocks' subjects, each up to its last event, provided each of them is blank (the session
  subject holds no message, compaction, frozen prompt or loaded skill after its events; each
  block ends with ``context.block_deleted``). A session written again after its deletion is
  left alone and reported as skipped: erasing part of it would change what it reads as;
- a **deleted profile** (its subject ends with ``memory.profile_deleted``): its subject.

Before it erases anything the purge records a ``purge.events_purged`` event per namespace
(:mod:`memstream.domain.purge_log`) naming the stream sequences of the erased subjects' last
events, and no personal data: projections remove what they still keep of those aggregates, so
that every read model equals one rebuilt from the purged log (``projections verify``), and the
workers that apply it forget their copies' dead letters of the erased events
(:mod:`memstream.workers.dead_letters`). The
event comes first: a purge that stops between it and the erasure left read models that a
rebuild (which replays the still present events, then the purge event) gives again, and the
next run erases the subjects (recording them once more, which removes nothing).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import nats.errors
from nats.js import api

from memstream.domain.errors import InvalidInputError, UnavailableError
from memstream.domain.purge_log import PURGE_EVENT_MAX_SUBJECTS, PURGE_LOG_ID, PurgeLog
from memstream.domain.session import SessionAggregate
from memstream.workers.admin.audit import AuditEvent, audit_event
from memstream.workers.admin.status import CopyStatus, consumer_statuses, copy_statuses
from memstream.workers.log.aggregate_store import AggregateStore, CommandResult
from memstream.workers.log.codec import CommandMeta, new_command_id
from memstream.workers.log.event_contract import utc_time
from memstream.workers.log.event_log import TRANSIENT_ERRORS, EventLog
from memstream.workers.log.subjects import parse_subject, subject_for
from memstream.workers.position import NUDGE_SECONDS
from memstream.workers.pull import Puller

logger = logging.getLogger(__name__)

# --older-than: one or more <count><unit> (s, m, h, d, w), e.g. 30d, 1d12h, 90m.
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_DURATION: Final = re.compile(r"(\d{1,9})([smhdw])")
MAX_GRACE: Final = timedelta(days=36_500)
_SESSION_END: Final = "registry.session_deleted"
_PROFILE_END: Final = "memory.profile_deleted"
_BLOCK_END: Final = "context.block_deleted"
# How long a purge waits for read-model copies to pass the last event it erases.
COPIES_WAIT: Final = 10.0
MAX_COPIES_WAIT: Final = 600.0
COPIES_POLL: Final = 0.2
COPY_BEHIND: Final = (
    "read-model copy %s has applied the stream up to %d, before the last erased event %d: it "
    "keeps what it held of the purged sessions and profiles until it is rebuilt (memstream "
    "projections rebuild, with its data dir or database), or forgotten if it is gone for good "
    "(memstream projections forget-copy)"
)
DENIED_DELETES: Final = (
    "stream %s denies message deletes (created by an older memstream): the purge takes the "
    "events out of the stream, but nats-server keeps their bytes in its files until their "
    "blocks go; to erase them for good, export the stream and import it into a new one "
    "(memstream events export / events import)"
)
# JetStream's answer to a message delete of a sequence it no longer holds (nats-server 2.15:
# err_code 10057, "message delete failed", with this description).
_DELETE_FAILED: Final = 10057
_NO_MESSAGE_FOUND: Final = "no message found"


def check_wait(wait: float) -> float:
    """``wait`` (seconds to wait for copies behind the erasure), checked: 0 to
    :data:`MAX_COPIES_WAIT`.

    Raises:
        InvalidInputError: out of range, or not a number.
    """
    if not 0 <= wait <= MAX_COPIES_WAIT:  # (NaN fails too)
        raise InvalidInputError(
            f"--wait {wait!r} must be between 0 and {MAX_COPIES_WAIT:g} seconds"
        )
    return wait


def parse_duration(text: str, option: str = "--older-than") -> timedelta:
    """A grace period such as ``30d``, ``12h``, ``1d12h`` or ``0s``.

    Raises:
        InvalidInputError: not such a duration, or longer than 100 years.
    """
    value = text.strip()
    parts = _DURATION.findall(value)
    if not value or "".join(count + unit for count, unit in parts) != value:
        raise InvalidInputError(
            f"{option} {text!r} is not a duration: give <count><unit>..., units s, m, h, d, w "
            "(e.g. 30d or 1d12h)"
        )
    seconds = sum(int(count) * _UNITS[unit] for count, unit in parts)
    if seconds > MAX_GRACE.total_seconds():
        raise InvalidInputError(f"{option} {text!r} is over the limit of {MAX_GRACE.days} days")
    return timedelta(seconds=seconds)


@dataclass(frozen=True, slots=True)
class PurgeUnit:
    """A deleted session or profile and the subjects its events are on (each with the stream
    sequence of its last event and how many events it holds)."""

    kind: str  # "session" or "profile"
    namespace: str
    identifier: str
    deleted_at: datetime
    subjects: tuple[tuple[str, int, int], ...]

    @property
    def events(self) -> int:
        return sum(count for _, _, count in self.subjects)

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "namespace": self.namespace,
            "id": self.identifier,
            "deleted_at": self.deleted_at.isoformat(),
            "subjects": len(self.subjects),
            "events": self.events,
        }


@dataclass(frozen=True, slots=True)
class Skipped:
    """A deleted session old enough that is not purged, and why."""

    namespace: str
    identifier: str
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "id": self.identifier, "reason": self.reason}


@dataclass
class PurgeReport:
    """What a purge erased (or, with ``dry_run``, would erase)."""

    older_than: str
    deleted_before: datetime
    dry_run: bool
    units: list[PurgeUnit] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    erased: int = 0  # events JetStream reported purged
    records: list[int] = field(default_factory=list)  # sequences of the purge events
    # Of those, the events overwritten in the server's files (each deleted on its own first);
    # 0 on a stream that denies message deletes (:data:`DENIED_DELETES`).
    overwritten: int = 0
    deletes_denied: bool = False
    # Read-model copies whose projectors had not applied every event up to the last one to be
    # erased when the purge went on (see COPIES_WAIT): they keep what they had of the purged
    # sessions and profiles until they are rebuilt.
    copies_behind: list[CopyStatus] = field(default_factory=list)

    @property
    def subjects(self) -> int:
        return sum(len(unit.subjects) for unit in self.units)

    @property
    def events(self) -> int:
        return sum(unit.events for unit in self.units)

    def as_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "older_than": self.older_than,
            "deleted_before": self.deleted_before.isoformat(),
            "sessions": sum(1 for unit in self.units if unit.kind == "session"),
            "profiles": sum(1 for unit in self.units if unit.kind == "profile"),
            "subjects": self.subjects,
            "events": self.events,
            "erased": self.erased,
            "overwritten": self.overwritten,
            "deletes_denied": self.deletes_denied,
            "copies_behind": [
                {"copy": c.copy_id, "consumers": c.consumers, "ack_floor": c.ack_floor}
                for c in self.copies_behind
            ],
            "records": self.records,
            "purged": [unit.as_json() for unit in self.units],
            "skipped": [skip.as_json() for skip in self.skipped],
        }


async def plan_purge(log: EventLog, older_than: str, *, now: datetime | None = None) -> PurgeReport:
    """What a purge with grace period ``older_than`` would erase now (nothing is changed).

    Raises:
        InvalidInputError: ``older_than`` is not a duration.
        UnavailableError: NATS did not answer in time.
    """
    grace = parse_duration(older_than)
    cutoff = (now or datetime.now(UTC)) - grace
    report = PurgeReport(older_than=older_than, deleted_before=cutoff, dry_run=True)
    ends = [event async for event in _last_per_subject(log)]
    blocks: dict[tuple[str, str], list[AuditEvent]] = {}
    for event in ends:
        subject = parse_subject(event.subject)
        if subject.aggregate == "block":
            _label, _, session_id = subject.identifier.partition("\x00")
            blocks.setdefault((subject.namespace, session_id), []).append(event)
    for event in ends:
        subject = parse_subject(event.subject)
        if event.type not in (_SESSION_END, _PROFILE_END) or _decided_at(event) >= cutoff:
            continue
        if event.type == _PROFILE_END and subject.aggregate == "profile":
            count = await _count(log, event.subject)
            report.units.append(
                PurgeUnit(
                    "profile",
                    subject.namespace,
                    subject.identifier,
                    _decided_at(event),
                    ((event.subject, event.seq, count),),
                )
            )
        elif event.type == _SESSION_END and subject.aggregate == "registry":
            unit = await _session_unit(
                log, event, blocks.get((subject.namespace, subject.identifier), [])
            )
            if isinstance(unit, Skipped):
                report.skipped.append(unit)
            else:
                report.units.append(unit)
    report.units.sort(key=lambda unit: (unit.namespace, unit.kind, unit.identifier))
    return report


async def purge(
    log: EventLog,
    older_than: str,
    *,
    meta: CommandMeta | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
    wait: float = COPIES_WAIT,
) -> PurgeReport:
    """Erase the events of sessions and profiles deleted longer ago than ``older_than``: per
    namespace, record a ``purge.events_purged`` event, then purge each subject up to its last
    event (an event appended after the plan was made stays).

    First it waits up to ``wait`` seconds for every read-model copy's projectors (their
    durable consumers) to pass the last event to be erased; those still behind are reported
    (:attr:`PurgeReport.copies_behind`) and logged: they keep what they held of the purged
    sessions and profiles until rebuilt.

    Raises:
        InvalidInputError: ``older_than`` is not a duration, or ``wait`` is out of range.
        UnavailableError: NATS did not answer in time.
    """
    check_wait(wait)
    report = await plan_purge(log, older_than, now=now)
    report.dry_run = dry_run
    report.deletes_denied = await _denies_deletes(log)
    if not report.units:
        return report
    # A copy whose projector has not seen the deletions yet never will once they are erased:
    # the purge record would not name anything it holds. Wait a while for it.
    last = max(seq for unit in report.units for _, seq, _ in unit.subjects)
    report.copies_behind = await _copies_behind(log, last, 0.0 if dry_run else wait)
    if dry_run:
        return report
    for copy in report.copies_behind:
        logger.warning(COPY_BEHIND, copy.copy_id, copy.ack_floor, last)
    if report.deletes_denied:
        logger.warning(DENIED_DELETES, log.stream)
    # One command per record (a command id is a message id: JetStream would take a second
    # record with the same one for a duplicate), correlated by the run's.
    run = meta or CommandMeta()
    by_namespace: dict[str, list[PurgeUnit]] = {}
    for unit in report.units:
        by_namespace.setdefault(unit.namespace, []).append(unit)
    for namespace, units in sorted(by_namespace.items()):
        store: AggregateStore[PurgeLog] = AggregateStore(log, _empty_purge_log(namespace))
        subject = subject_for(log.subject_prefix, namespace, "purge", PURGE_LOG_ID)
        for chunk in _chunks(units):
            command = replace(
                run,
                command_id=new_command_id(),
                correlation_id=run.correlation_id or run.command_id,
            )
            result: CommandResult[Any] = await store.execute(
                subject, PURGE_LOG_ID, _record(report, chunk), command
            )
            report.records.append(result.seq)
            erased = 0
            for unit in chunk:
                for erased_subject, last_seq, _ in unit.subjects:
                    # Overwritten one by one (where the stream allows it), then purged: the
                    # purge alone would leave their bytes in the server's files.
                    overwritten = (
                        0
                        if report.deletes_denied
                        else await _erase_events(log, erased_subject, last_seq)
                    )
                    report.overwritten += overwritten
                    erased += overwritten + await _purge_subject(log, erased_subject, last_seq)
            report.erased += erased
            # Counts only: what was erased is named nowhere once it is gone.
            logger.info(
                "purged %d events of %d subjects from %s (namespace %s), recorded at %d",
                erased,
                sum(len(unit.subjects) for unit in chunk),
                log.stream,
                namespace,
                result.seq,
            )
    return report


def _empty_purge_log(namespace: str) -> Callable[[str], PurgeLog]:
    return lambda _key: PurgeLog.empty(namespace)


def _record(report: PurgeReport, chunk: list[PurgeUnit]) -> Callable[[PurgeLog], list[Any]]:
    """The decision that records the purge of ``chunk``."""
    sequences = [seq for unit in chunk for _, seq, _ in unit.subjects]

    def decide(purge_log: PurgeLog) -> list[Any]:
        return purge_log.record(
            sequences=sequences,
            subjects=len(sequences),
            events=sum(unit.events for unit in chunk),
            sessions=sum(1 for unit in chunk if unit.kind == "session"),
            profiles=sum(1 for unit in chunk if unit.kind == "profile"),
            older_than=report.older_than,
            deleted_before=utc_time(report.deleted_before),
        )

    return decide


def _chunks(units: list[PurgeUnit]) -> Iterable[list[PurgeUnit]]:
    """``units`` in runs whose subjects fit one purge event."""
    chunk: list[PurgeUnit] = []
    size = 0
    for unit in units:
        if chunk and size + len(unit.subjects) > PURGE_EVENT_MAX_SUBJECTS:
            yield chunk
            chunk, size = [], 0
        chunk.append(unit)
        size += len(unit.subjects)
    if chunk:
        yield chunk


def _decided_at(event: AuditEvent) -> datetime:
    """When the event was decided (its payload's ``time``; the stored time when it has none:
    an imported stream's stored times are those of the import)."""
    payload = event.payload
    if isinstance(payload, dict) and isinstance(payload.get("time"), str):
        try:
            moment = datetime.fromisoformat(payload["time"])
        except ValueError:
            return event.time
        return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return event.time


async def _session_unit(
    log: EventLog, end: AuditEvent, blocks: list[AuditEvent]
) -> PurgeUnit | Skipped:
    """A deleted session's subjects, if every one of them is blank."""
    name = parse_subject(end.subject)
    namespace, session_id = name.namespace, name.identifier
    subjects = [(end.subject, end.seq, await _count(log, end.subject))]
    for block in blocks:
        if block.type != _BLOCK_END:
            label = parse_subject(block.subject).identifier.partition("\x00")[0]
            return Skipped(namespace, session_id, f"its block {label!r} was written again")
        subjects.append((block.subject, block.seq, await _count(log, block.subject)))
    session_subject = subject_for(log.subject_prefix, namespace, "session", session_id)
    session = SessionAggregate.empty(namespace, session_id)
    events = 0
    last_seq = 0
    compacted = False
    async for entry in log.read_subject(session_subject, consistent=True):
        try:
            event: Any = entry.decode()
            event.mutate(session)
        except Exception:  # a poison event: what the session holds cannot be told
            reason = f"its event at sequence {entry.seq} cannot be read"
            return Skipped(namespace, session_id, reason)
        if isinstance(event, SessionAggregate.MessagesCleared):
            compacted = False
        elif isinstance(event, SessionAggregate.CompactionAdded):
            compacted = True
        events += 1
        last_seq = entry.seq
    if events:
        if (
            session.latest_leaf is not None
            or compacted
            or session.frozen_prompt is not None
            or session.loaded_skills
        ):
            return Skipped(namespace, session_id, "it was written again after its deletion")
        subjects.append((session_subject, last_seq, events))
    return PurgeUnit("session", namespace, session_id, _decided_at(end), tuple(subjects))


async def _last_per_subject(log: EventLog) -> AsyncIterator[AuditEvent]:
    """The last event of every registry, profile and block subject (one ephemeral consumer):
    what ends a deletion. Session subjects, the largest, are read only for deleted sessions."""
    prefix = log.subject_prefix
    config = api.ConsumerConfig(
        deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
        ack_policy=api.AckPolicy.NONE,
        filter_subjects=[
            await log.stored(f"{prefix}.*.{kind}.*") for kind in ("registry", "profile", "block")
        ],
        inactive_threshold=30.0,
        mem_storage=True,
    )
    try:
        puller, info = await Puller.create(log.client, log.stream, config)
    except TRANSIENT_ERRORS as error:
        raise UnavailableError(f"cannot read stream {log.stream!r}: {error!r}") from error
    try:
        if not info.num_pending:
            return
        while True:
            try:
                msgs = await puller.fetch(500, log.timeout)
            except (TimeoutError, nats.errors.TimeoutError) as error:
                raise UnavailableError(f"reading stream {log.stream!r} timed out") from error
            for msg in msgs:
                yield audit_event(msg)
                if msg.metadata.num_pending == 0:
                    return
    finally:
        await puller.close()


async def _count(log: EventLog, subject: str) -> int:
    """How many events ``subject`` holds."""
    try:
        info = await log.js.stream_info(log.stream, subjects_filter=await log.stored(subject))
    except TRANSIENT_ERRORS as error:
        raise UnavailableError(f"cannot read stream {log.stream!r}: {error!r}") from error
    return sum(int(count) for count in (info.state.subjects or {}).values())


async def _copies_behind(log: EventLog, seq: int, wait: float) -> list[CopyStatus]:
    """The read-model copies whose projectors have not acknowledged the stream up to ``seq``,
    after waiting up to ``wait`` seconds for them."""
    deadline = time.monotonic() + wait
    nudged = -math.inf
    while True:
        copies = copy_statuses(await consumer_statuses(log), await log.stream_last_seq())
        behind = [copy for copy in copies if copy.ack_floor < seq]
        if not behind or time.monotonic() >= deadline:
            return behind
        if time.monotonic() - nudged >= NUDGE_SECONDS:  # lingering projectors: commit now
            nudged = time.monotonic()
            await log.nudge(seq)
        await asyncio.sleep(COPIES_POLL)


async def _denies_deletes(log: EventLog) -> bool:
    """Whether the stream denies message deletes (as memstream's streams did before their
    purges overwrote what they erase; a stream keeps it for good)."""
    try:
        info = await log.js.stream_info(log.stream)
    except TRANSIENT_ERRORS as error:
        raise UnavailableError(f"cannot read stream {log.stream!r}: {error!r}") from error
    return bool(info.config.deny_delete)


async def _purge_subject(log: EventLog, subject: str, last_seq: int) -> int:
    """Purge ``subject``'s events up to ``last_seq`` (those :func:`_erase_events` did not
    delete: all of them on a stream that denies deletes); how many JetStream purged."""
    request = {"filter": await log.stored(subject), "seq": last_seq + 1}
    answer = await _api(log, "PURGE", request, "purge")
    if "error" in answer:
        raise UnavailableError(f"JetStream refused to purge {log.stream!r}: {answer['error']}")
    return int(answer.get("purged", 0))


async def _api(log: EventLog, verb: str, request: dict[str, Any], doing: str) -> dict[str, Any]:
    """The JetStream API's answer to ``$JS.API.STREAM.<verb>.<stream>`` with ``request``.

    Raises:
        UnavailableError: NATS did not answer in time.
    """
    try:
        reply = await log.client.request(
            f"$JS.API.STREAM.{verb}.{log.stream}",
            json.dumps(request).encode(),
            timeout=log.timeout,
        )
    except TRANSIENT_ERRORS as error:
        raise UnavailableError(f"cannot {doing} {log.stream!r}: {error!r}") from error
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


# Message deletes in flight at once (each is a request to the stream's leader).
ERASE_WINDOW: Final = 64


async def _erase_events(log: EventLog, subject: str, last_seq: int) -> int:
    """Delete each of ``subject``'s events up to ``last_seq`` with JetStream's message delete,
    which overwrites the message where the server stores it; how many were deleted (one gone
    already, by an earlier run, is not counted).

    A purge by subject only drops events from the stream's index: their bytes stay in the
    server's block files until the whole block goes (seen with nats-server 2.15: with 80% of
    a block's events purged, every purged payload still in the file, after a restart too).
    """
    reads = log.read_subject(subject, consistent=True)
    sequences = [entry.seq async for entry in reads if entry.seq <= last_seq]
    erased = 0
    for start in range(0, len(sequences), ERASE_WINDOW):
        window = sequences[start : start + ERASE_WINDOW]
        results = await asyncio.gather(
            *(_erase_one(log, seq) for seq in window), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
            erased += result
    return erased


async def _erase_one(log: EventLog, seq: int) -> int:
    # (no "no_erase" in the request: the server overwrites the message)
    answer = await _api(log, "MSG.DELETE", {"seq": seq}, "erase from")
    refusal = answer.get("error")
    if refusal:
        if (
            refusal.get("err_code") == _DELETE_FAILED
            and refusal.get("description") == _NO_MESSAGE_FOUND
        ):
            return 0  # gone already (a purge that stopped halfway, run again)
        raise UnavailableError(f"JetStream refused to erase from {log.stream!r}: {refusal}")
    return 1 if answer.get("success") else 0


__all__ = [
    "PurgeReport",
    "PurgeUnit",
    "Skipped",
    "parse_duration",
    "plan_purge",
    "purge",
]
