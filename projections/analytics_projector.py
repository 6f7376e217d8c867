"""The analytics projector: daily volumes per namespace, model and source, as a pure function
from events to counter increments, gathered per batch.

What it counts (all integers, so sums are exact whatever the batching): messages appended,
model usage (input and output tokens, cost in billionths), memories extracted by type, texts
remembered, messages and bytes ingested; and, per session, its model and source (from its
registration) and the day it was first seen, which give the sessions per day. An event counts
on the UTC day it was decided (its ``time``), for the model and source its session had at that
point of the log; events outside a registered session count under ``""``. Deletions remove
nothing: these are volumes of what happened.

A purge (``purge.events_purged``) is the exception: what the log no longer holds is no longer
counted, so that a rebuild from the purged log gives the same counters. So each counter is kept
per origin (the session whose subjects, or the profile whose subject, its events are on) and
per session it was counted for; a deletion records its sequence (:class:`EndUnit`), and a purge
of that sequence removes the origin's counters, its session row, and counts the counters of
other origins made for the session again as outside any registered session (:class:`Purge`),
as a rebuild that never saw the registration counts them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from memstream.domain.memory_profile import MemoryProfile
from memstream.domain.purge_log import PurgeLog
from memstream.domain.session import SessionAggregate
from memstream.domain.session_registry import SessionRecord

# The counters (``metric`` column) and the memory types that have one each.
MEMORY_TYPES = ("fact", "event", "instruction", "task")
METRICS = (
    "messages",
    "input_tokens",
    "output_tokens",
    "cost_nanos",
    *(f"memories_{kind}" for kind in MEMORY_TYPES),
    "memories_other",
    "remembered",
    "ingested_messages",
    "ingested_bytes",
)
COST_SCALE = 1_000_000_000  # cost is counted in billionths (exact integer sums)


@dataclass(frozen=True, slots=True)
class SeeSession:
    """A session was seen: by its first event (``registered`` False: no model or source), or
    by its registration (``registered``: its model and source from then on)."""

    namespace: str
    session_id: str
    day: str
    model: str
    source: str
    registered: bool


@dataclass(frozen=True, slots=True)
class Count:
    """Add ``amount`` to ``metric`` on ``day``, for the model and source of ``session_id``
    (``None``: outside any session); ``profile`` is the profile whose subject the event is on
    (``""``: a session's or registry subject, of ``session_id``)."""

    namespace: str
    day: str
    metric: str
    amount: int
    session_id: str | None
    profile: str = ""


@dataclass(frozen=True, slots=True)
class EndUnit:
    """A session (its registration) or a profile was deleted by the event at ``seq``: a purge
    naming ``seq`` erases its events."""

    namespace: str
    kind: str  # "session" or "profile"
    identifier: str
    seq: int


@dataclass(frozen=True, slots=True)
class Purge:
    """The subjects whose last events are at ``sequences`` were erased."""

    namespace: str
    sequences: tuple[int, ...]


AnalyticsWrite = SeeSession | Count | EndUnit | Purge


def _day(timestamp: datetime) -> str:
    return timestamp.date().isoformat()


def project_analytics_event(namespace: str, event: object, seq: int = 0) -> list[AnalyticsWrite]:
    """The increments one event (at stream sequence ``seq``) makes."""
    if isinstance(event, SessionRecord.SessionDeleted):
        return [EndUnit(namespace, "session", event.session_id, seq)]
    if isinstance(event, MemoryProfile.ProfileDeleted):
        return [EndUnit(namespace, "profile", event.profile, seq)]
    if isinstance(event, PurgeLog.EventsPurged):
        return [Purge(namespace, tuple(event.sequences))]
    if isinstance(event, SessionAggregate.MessageAppended | SessionAggregate.MessagesAppended):
        day = _day(event.timestamp)
        count = len(event.entries) if isinstance(event, SessionAggregate.MessagesAppended) else 1
        sid = event.session_id
        return [
            SeeSession(namespace, sid, day, "", "", registered=False),
            Count(namespace, day, "messages", count, sid),
        ]
    if isinstance(event, SessionRecord.SessionCreated):
        return [
            SeeSession(
                namespace,
                event.session_id,
                _day(event.timestamp),
                event.model or "",
                event.source or "",
                registered=True,
            )
        ]
    if isinstance(event, SessionRecord.UsageAdded):
        day, sid = _day(event.timestamp), event.session_id
        return [
            Count(namespace, day, metric, amount, sid)
            for metric, amount in (
                ("input_tokens", event.input_tokens),
                ("output_tokens", event.output_tokens),
                ("cost_nanos", round(event.cost * COST_SCALE)),
            )
            if amount
        ]
    if isinstance(event, MemoryProfile.ConversationIngested):
        day, sid = _day(event.timestamp), event.session_id
        size = sum(len(str(m.get("content", "")).encode()) for m in event.messages)
        return [
            Count(namespace, day, "ingested_messages", len(event.messages), sid, event.profile),
            Count(namespace, day, "ingested_bytes", size, sid, event.profile),
        ]
    if isinstance(event, MemoryProfile.MemoryRemembered):
        day = _day(event.timestamp)
        return [Count(namespace, day, "remembered", 1, event.session_id, event.profile)]
    if isinstance(event, MemoryProfile.MemoriesExtracted):
        day = _day(event.timestamp)
        return [
            Count(
                namespace,
                day,
                f"memories_{memory['type']}"
                if memory.get("type") in MEMORY_TYPES
                else "memories_other",
                1,
                memory.get("session_id"),
                event.profile,
            )
            for memory in event.memories
        ]
    return []


# Rows as the writers take them: (namespace, day, metric, model, source, session id, profile,
# amount), with session id and profile "" for none; (namespace, session id, first day, model,
# source, registered 0/1); and (namespace, kind, id, deletion sequence).
CountRow = tuple[str, str, str, str | None, str | None, str, str, int]
SessionRow = tuple[str, str, str, str, str, int]
UnitRow = tuple[str, str, str, int]
# A pending increment: (namespace, day, metric, model, source, session id, profile). Either
# model and source are known (outside any session, or the session's registration is in this
# batch) or they are read from the sessions table when the batch is written (None).
Pending = tuple[str, str, str, str | None, str | None, str, str]


@dataclass
class AnalyticsBatch:
    """The increments of a batch, summed per counter, session and origin, the sessions it saw
    in log order, and the deletions it saw, written once before the batch commits (one
    statement each for the batch). A purge is not gathered: whoever applies the writes writes
    the batch so far, then the purge.

    A count is for the model and source its session had at that point of the log: a session
    registered in this batch is known here from its registration on; any other is looked up
    in the sessions table when the batch is written, before the batch's sessions are (so the
    table still holds what it held when the batch began).
    """

    counts: dict[Pending, int] = field(default_factory=dict)
    sessions: list[SeeSession] = field(default_factory=list)
    registered: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    units: dict[tuple[str, str, str], int] = field(default_factory=dict)

    def add(self, writes: list[AnalyticsWrite]) -> None:
        for write in writes:
            if isinstance(write, SeeSession):
                self.sessions.append(write)
                if write.registered:
                    key = (write.namespace, write.session_id)
                    self.registered[key] = (write.model, write.source)
                continue
            if isinstance(write, EndUnit):
                self.units[(write.namespace, write.kind, write.identifier)] = write.seq
                continue
            if isinstance(write, Purge):
                continue
            known = (
                ("", "")
                if write.session_id is None
                else self.registered.get((write.namespace, write.session_id))
            )
            model, source = (None, None) if known is None else known
            pending = (
                write.namespace,
                write.day,
                write.metric,
                model,
                source,
                write.session_id or "",
                write.profile,
            )
            self.counts[pending] = self.counts.get(pending, 0) + write.amount

    def take(self) -> tuple[list[CountRow], list[SessionRow], list[UnitRow]]:
        """The batch's counter rows, session rows (one per session) and deletions, then
        nothing."""
        counts = [(*key, amount) for key, amount in self.counts.items()]
        sessions = merged_sightings(self.sessions)
        units = [(*key, seq) for key, seq in self.units.items()]
        self.forget()
        return counts, sessions, units

    def forget(self) -> None:
        self.counts.clear()
        self.sessions.clear()
        self.registered.clear()
        self.units.clear()

    def __bool__(self) -> bool:
        return bool(self.counts or self.sessions or self.units)


def merged_sightings(seen: list[SeeSession]) -> list[SessionRow]:
    """A batch's sightings as one row per session: the day of its first, and the model and
    source of its last registration (registered 1) or none (0). Written with "insert, or on a
    registration update the model and source", a row does what its sightings in log order
    would have done one by one."""
    rows: dict[tuple[str, str], SessionRow] = {}
    for sight in seen:
        key = (sight.namespace, sight.session_id)
        row = rows.get(key)
        day = sight.day if row is None else row[2]
        if sight.registered:
            rows[key] = (*key, day, sight.model, sight.source, 1)
        elif row is None:
            rows[key] = (*key, day, "", "", 0)
    return list(rows.values())
