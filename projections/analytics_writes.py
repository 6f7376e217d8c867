"""The analytics projector: daily volumes per namespace, model and source, as a pure function
from events to counter increments, gathered per batch.

What it counts (all integers, so sums are exact whatever the batching): messages appended,
model usage (input and output tokens, cost in billionths), memories extracted by type, texts
remembered, messages and bytes ingested; and, per session, its model and source (from its
registration) and the day it was first seen, which give the sessions per day. An event counts
on the UTC day it was decided (its ``time``), for the model and source its session had at that
point of the log; events outside a registered session count under ``""``. Deletions remove
nothing: these are volumes of what happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from memstream.domain.memory_profile import MemoryProfile
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
    (``None``: outside any session)."""

    namespace: str
    day: str
    metric: str
    amount: int
    session_id: str | None


AnalyticsWrite = SeeSession | Count


def _day(timestamp: datetime) -> str:
    return timestamp.date().isoformat()


def project_analytics_event(namespace: str, event: object) -> list[AnalyticsWrite]:
    """The increments one event makes."""
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
            Count(namespace, day, "ingested_messages", len(event.messages), sid),
            Count(namespace, day, "ingested_bytes", size, sid),
        ]
    if isinstance(event, MemoryProfile.MemoryRemembered):
        return [Count(namespace, _day(event.timestamp), "remembered", 1, event.session_id)]
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
            )
            for memory in event.memories
        ]
    return []


# Rows as the writers take them: (namespace, day, metric, model, source, session id, amount),
# and (namespace, session id, first day, model, source, registered 0/1).
CountRow = tuple[str, str, str, str | None, str | None, str | None, int]
SessionRow = tuple[str, str, str, str, str, int]
# A pending increment: (namespace, day, metric, model, source, session id). Either model and
# source are known (the session's registration is in this batch; session id None) or they are
# read from the sessions table when the batch is written (model and source None).
Pending = tuple[str, str, str, str | None, str | None, str | None]


@dataclass
class AnalyticsBatch:
    """The increments of a batch, summed per counter and session, and the sessions it saw, in
    log order, written once before the batch commits (two statements for the batch).

    A count is for the model and source its session had at that point of the log: a session
    registered in this batch is known here from its registration on; any other is looked up
    in the sessions table when the batch is written, before the batch's sessions are (so the
    table still holds what it held when the batch began).
    """

    counts: dict[Pending, int] = field(default_factory=dict)
    sessions: list[SeeSession] = field(default_factory=list)
    registered: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)

    def add(self, writes: list[AnalyticsWrite]) -> None:
        for write in writes:
            if isinstance(write, SeeSession):
                self.sessions.append(write)
                if write.registered:
                    key = (write.namespace, write.session_id)
                    self.registered[key] = (write.model, write.source)
                continue
            known = (
                None
                if write.session_id is None
                else self.registered.get((write.namespace, write.session_id))
            )
            pending: Pending
            if write.session_id is None:
                pending = (write.namespace, write.day, write.metric, "", "", None)
            elif known is not None:
                pending = (write.namespace, write.day, write.metric, *known, None)
            else:
                pending = (write.namespace, write.day, write.metric, None, None, write.session_id)
            self.counts[pending] = self.counts.get(pending, 0) + write.amount

    def take(self) -> tuple[list[CountRow], list[SessionRow]]:
        """The batch's counter rows and session rows (one per session), then nothing."""
        counts = [(*key, amount) for key, amount in self.counts.items()]
        sessions = merged_sightings(self.sessions)
        self.forget()
        return counts, sessions

    def forget(self) -> None:
        self.counts.clear()
        self.sessions.clear()
        self.registered.clear()

    def __bool__(self) -> bool:
        return bool(self.counts or self.sessions)


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
