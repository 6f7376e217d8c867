"""Run domain commands against aggregates that live on the log.

The store keeps recently used aggregates in memory together with the stream sequence of their
last event. A command is decided on the cached aggregate and published with
``Nats-Expected-Last-Subject-Sequence``; when another writer got there first the aggregate is
fast-forwarded from its subject and the command decided again (bounded), so the common case costs
one publish round trip and a long session is never replayed per command.

With a :class:`SnapshotSource` (the sessions read model) an aggregate is never replayed from its
first event: it is restored from the snapshot — state that looks its rows up lazily, as of the
subject sequence the snapshot records — plus the events after that sequence, which the store
keeps (its own publishes, and what a fast-forward read). Every decision runs inside one reading
of the source, and starts by reconciling: a snapshot that has caught up with the kept events
replaces them; one that went backwards (a rebuild) is restored from again. The publish that
follows is guarded by the subject sequence, so a decision on stale state fails safely and is
fast-forwarded by reading only the events after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from eventsourcing.domain import Aggregate, OriginatorVersionError

from memstream.domain.errors import ConcurrencyError, LogGapError, MemstreamError
from memstream.domain.message_index import StoredMessagesMoved
from memstream.projections.ports import Snapshot, SnapshotSource
from memstream.workers.log.codec import CommandMeta, decode_event, encode_event
from memstream.workers.log.event_log import (
    ExpectedSequenceMismatch,
    LogEntry,
    OutgoingMessage,
    PublishResult,
)
from memstream.workers.observability.metrics_hooks import hooks

logger = logging.getLogger(__name__)
A = TypeVar("A", bound=Aggregate)
T = TypeVar("T")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
# Conflicts are retried for this long (a writer that keeps losing to others in tight loops can
# wait for several of their bursts): room to spare over the longest such wait seen
# (bench/RESULTS.md, 'Figures moved from code comments').
RETRY_SECONDS = 15.0
CACHE_SIZE = 256
# A writer that lost a race reads the winner's events before it retries, while the winner can go
# on at once: under contention the same writers kept winning, and one that lost could lose for
# longer than RETRY_SECONDS (8 writers on one session, each write synced to disk). So for a
# while after a subject was contended here, a new command on it waits up to this long first.
COURTESY_SECONDS = 0.002
CONTENDED_SECONDS = 1.0
# Decisions on a kept aggregate between two readings of its snapshot: in between, lookups check
# the snapshot's position themselves (one statement each, no read transaction).
GUARDED_DECISIONS = 32


class Log(Protocol):
    """What the store needs of the log (:class:`~memstream.workers.log.event_log.EventLog`)."""

    async def publish(
        self,
        subject: str,
        messages: Sequence[OutgoingMessage],
        expected_last_seq: int | None,
        while_waiting: Callable[[], None] | None = None,
    ) -> PublishResult: ...

    def read_subject(self, subject: str, after_seq: int = 0) -> AsyncIterator[LogEntry]: ...

    async def last_seq(self, subject: str) -> int: ...


@dataclass
class _Cached(Generic[A]):
    aggregate: A
    seq: int  # the subject's last sequence known: the aggregate plus ``pending``
    applied: int = 0  # the last sequence applied to the aggregate
    base: int = 0  # the snapshot position the aggregate was restored from
    # events after ``applied`` (up to ``seq``), applied at the next decision
    pending: list[tuple[int, Aggregate.Event]] = field(default_factory=list)
    guarded: int = 0  # decisions since the last reading of the snapshot
    broken: bool = False  # pending events half applied: restore at the next reading
    # Replayed from the log because a snapshot was ahead of it (the log lost its tail): decided
    # on as it is, never restored from a snapshot again while it is cached.
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class Decided(Generic[R_co]):
    """What a decision returns when it has an answer besides its events (e.g. the prompt that
    is frozen now, which a no-op freeze finds in the aggregate): the events to publish, and
    ``value``, which the command's :class:`CommandResult` carries back."""

    events: Sequence[Aggregate.Event]
    value: R_co
    # The command id to publish the events under, when the decision knows better than the
    # caller's (it derives from state the caller did not see): None keeps the caller's.
    command_id: str | None = None


# Told of every publish the log stored: its subject, its messages, and the stream sequence of
# the first (an atomic batch is stored contiguously).
Published = Callable[[str, Sequence[OutgoingMessage], int], None]


class Speculation(Protocol):
    """Work that a publish's round trip can overlap (see :data:`Speculate`)."""

    @property
    def first(self) -> int:
        """The stream sequence the first event gets if no other event is stored before it."""

    def start(self) -> None:
        """The events are on their way to the log: do the work (it must not raise)."""

    def finish(self, first: int | None) -> None:
        """The log stored the events from sequence ``first`` on, or not at all (``None``: a
        refusal, a duplicate, a timeout). Called once, whether or not :meth:`start` was."""


# Asked before each publish with its subject and messages: work to overlap with the publish's
# round trip, or None.
Speculate = Callable[[str, Sequence[OutgoingMessage]], Speculation | None]

# A decision: the events it decides on the aggregate, or those and a value (:class:`Decided`).
Decide = Callable[[A], Sequence[Aggregate.Event] | Decided[R]]


@dataclass(frozen=True, slots=True)
class CommandResult(Generic[R_co]):
    """Outcome of a command: the events it published (none when it decided none, or when an
    earlier attempt of the same command was in the log already), the stream sequence of the
    last of them (or the subject's as the decision saw it), and the decision's ``value``
    (``None`` unless it returned a :class:`Decided`)."""

    events: Sequence[Aggregate.Event]
    seq: int
    value: R_co | None = None


class AggregateStore(Generic[A]):
    """Load-decide-publish-apply for one aggregate class, with a per-subject cache and lock."""

    def __init__(
        self,
        log: Log,
        empty: Callable[[str], A],
        *,
        snapshots: SnapshotSource[A] | None = None,
        cache_size: int = CACHE_SIZE,
        retry_seconds: float = RETRY_SECONDS,
        published: Published | None = None,
        speculate: Speculate | None = None,
    ) -> None:
        self.log = log
        self.published = published
        self.speculate = speculate
        self.retry_seconds = retry_seconds
        self.snapshots = snapshots
        self._empty = empty
        self._cache: OrderedDict[str, _Cached[A]] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}
        self._cache_size = cache_size
        # Subjects this store lost a race on lately, until when (see COURTESY_SECONDS).
        self._contended: dict[str, float] = {}

    def without_snapshots(self) -> AggregateStore[A]:
        """A store of the same aggregates that replays them from the log (nothing cached)."""
        return AggregateStore(self.log, self._empty, retry_seconds=self.retry_seconds)

    async def execute(
        self,
        subject: str,
        key: str,
        decide: Decide[A, R],
        meta: CommandMeta | None = None,
    ) -> CommandResult[R]:
        """Decide events with ``decide(aggregate)`` and append them to ``subject`` atomically.

        ``key`` identifies the aggregate for :attr:`empty` (e.g. the session id). ``decide``
        returns the events, or a :class:`Decided` with them and a value for the result. Domain
        errors raised by ``decide`` propagate unchanged and publish nothing.

        Raises:
            ConcurrencyError: the subject kept moving for ``retry_seconds``.
            UnavailableError: NATS is unreachable.
        """
        meta = meta or CommandMeta()
        lock = self._locks.setdefault(subject, asyncio.Lock())
        async with lock:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.retry_seconds
            if self._contended.get(subject, 0.0) > loop.time():
                # Others write this subject too: let a writer that lost to this one go first
                # (it has to read what won before it can retry; this one need not).
                await asyncio.sleep(random.uniform(0, COURTESY_SECONDS))
            attempt = 0
            while loop.time() < deadline or attempt < 3:
                attempt += 1
                await self._load(subject, key)
                try:
                    cached, events, value, refusal, command_id = self._decide(subject, key, decide)
                except OriginatorVersionError as error:
                    await self._replayed_after_gap(subject, key, error)
                    continue
                if refusal is not None:
                    # A refusal may come from a stale cache (another writer moved on).
                    if await self._caught_up(subject, key, cached):
                        continue
                    raise refusal
                if not events:
                    if await self._caught_up(subject, key, cached):
                        continue  # a no-op decided on stale state: decide again
                    return CommandResult((), cached.seq, value)
                decided_meta = meta
                if command_id is not None and command_id != meta.command_id:
                    decided_meta = dataclasses.replace(meta, command_id=command_id)
                outgoing = [
                    OutgoingMessage(
                        *encode_event(
                            event, decided_meta, _msg_id(decided_meta.command_id, i, len(events))
                        ),
                        msg_id=_msg_id(decided_meta.command_id, i, len(events)),
                        event=event,
                    )
                    for i, event in enumerate(events)
                ]
                speculation = self.speculate(subject, outgoing) if self.speculate else None
                early: list[bool] = []  # the events applied to the aggregate before the ack

                def overlapped(
                    speculation: Speculation | None = speculation,
                    cached: _Cached[A] = cached,
                    events: list[Aggregate.Event] = events,
                    early: list[bool] = early,
                ) -> None:
                    assert speculation is not None
                    early.append(self._apply_early(cached, events, speculation.first))
                    speculation.start()

                try:
                    if speculation is None:
                        result = await self.log.publish(subject, outgoing, cached.seq)
                    else:
                        result = await self.log.publish(subject, outgoing, cached.seq, overlapped)
                except ExpectedSequenceMismatch:
                    if hooks.observer is not None:
                        hooks.observer.conflict()
                    if speculation is not None:
                        speculation.finish(None)
                    if early and early[0]:
                        self._cache.pop(subject, None)  # it holds events the log refused
                        continue
                    before = cached.seq
                    await self._fast_forward(subject, cached)
                    # Nothing after what it decided on, yet refused: decided past the log's
                    # end for the subject (a snapshot of a copy ahead of the log)?
                    if cached.seq == before and await self._replayed_if_ahead(subject, key, cached):
                        continue
                    self._mark_contended(subject, loop.time())
                    continue
                except BaseException:
                    if speculation is not None:
                        speculation.finish(None)
                    # Unknown outcome (timeout, disconnect): the cache may be stale; reload later.
                    self._cache.pop(subject, None)
                    raise
                first = result.seq - len(events) + 1  # an atomic batch is stored contiguously
                if early and early[0]:
                    assert speculation is not None
                    if result.duplicate or first != speculation.first:
                        # It holds the events at sequences they did not get: restored anew.
                        self._cache.pop(subject, None)
                    else:
                        cached.seq = result.seq
                if result.duplicate:
                    if speculation is not None:
                        speculation.finish(None)
                    if subject not in self._cache:
                        return CommandResult((), await self.log.last_seq(subject), value)
                    # An earlier attempt of this command is already in the log: read it back.
                    await self._fast_forward(subject, cached)
                    return CommandResult((), cached.seq, value)
                if not (early and early[0]):
                    # Applied now if the snapshot has not seen them (else at the next reading).
                    cached.pending.extend((first + i, event) for i, event in enumerate(events))
                    cached.seq = result.seq
                    self._apply_now(cached)  # before a speculation keeps what the guard reads
                if speculation is not None:
                    speculation.finish(first)
                if self.published is not None:
                    self.published(subject, outgoing, first)
                return CommandResult(events, result.seq, value)
        raise ConcurrencyError(
            f"{subject} changed under the command {attempt} times in "
            f"{self.retry_seconds:g} s; giving up"
        )

    def _mark_contended(self, subject: str, now: float) -> None:
        """Remember that ``subject`` was contended here (for COURTESY_SECONDS)."""
        contended = self._contended
        contended[subject] = now + CONTENDED_SECONDS
        if len(contended) > self._cache_size:  # forget the subjects no longer contended
            for stale in [s for s, until in contended.items() if until <= now]:
                del contended[stale]

    async def inspect(self, subject: str, key: str, view: Callable[[A], T]) -> T:
        """``view(aggregate)`` on the aggregate as of the log's current end (for decisions and
        tests, not for reads: a restored aggregate looks its state up lazily)."""
        async with self._locks.setdefault(subject, asyncio.Lock()):
            await self._load(subject, key)
            with self._reading():
                cached = self._prepare(subject, key)
            await self._fast_forward(subject, cached)
            with self._reading():
                return view(self._prepare(subject, key).aggregate)

    def _decide(
        self, subject: str, key: str, decide: Decide[A, R]
    ) -> tuple[_Cached[A], list[Aggregate.Event], R | None, MemstreamError | None, str | None]:
        """Decide on the cached aggregate: guarded when it was read recently, else (or when a
        guarded lookup finds the snapshot moved) inside a reading."""
        cached = self._cache.get(subject)
        if cached is not None and cached.replayed:
            self._cache.move_to_end(subject)
            _apply_pending(cached)
            return (cached, *_decided(cached.aggregate, decide))
        if self.snapshots is not None and cached is not None and self._guardable(cached):
            try:
                self._apply_guarded(cached)
                self.snapshots.guard(cached.base, 2**63 - 1)
                cached.guarded += 1
                self._cache.move_to_end(subject)
                return (cached, *_decided(cached.aggregate, decide))
            except StoredMessagesMoved:
                cached.guarded = GUARDED_DECISIONS  # read the snapshot next
        with self._reading():
            cached = self._prepare(subject, key)
            return (cached, *_decided(cached.aggregate, decide))

    def _guardable(self, cached: _Cached[A]) -> bool:
        return not cached.broken and not cached.replayed and cached.guarded < GUARDED_DECISIONS

    def _apply_guarded(self, cached: _Cached[A]) -> None:
        """Apply the pending events outside a reading: the snapshot must not have seen the
        event being applied (its lookups would count it twice)."""
        assert self.snapshots is not None
        applied = cached.applied
        try:
            for seq, event in cached.pending:
                self.snapshots.guard(cached.base, seq - 1)
                event.mutate(cached.aggregate)
                applied = seq
        except StoredMessagesMoved:
            cached.broken = True
            raise
        cached.applied = applied
        cached.pending.clear()

    def _apply_now(self, cached: _Cached[A]) -> None:
        """Apply the events just published while the snapshot most likely has not seen them
        (guarded: a lookup that finds it has leaves them for the next reading). Left pending,
        they would be applied at the next decision, by which time a read-your-writes reader has
        had them projected: the guard then refuses them, and every later decision of the
        session paid a refused lookup, a reading and a restore."""
        if self.snapshots is None or not self._guardable(cached):
            return
        try:
            self._apply_guarded(cached)
        except StoredMessagesMoved:
            pass  # the snapshot has them already: restored at the next decision
        except Exception:
            # The write is in the log whatever a lookup met (a damaged read model, say): the
            # next decision restores the aggregate (and meets the error itself).
            cached.broken = True
            logger.debug("applying the events just published failed", exc_info=True)

    def _apply_early(
        self, cached: _Cached[A], events: Sequence[Aggregate.Event], first: int
    ) -> bool:
        """Apply the events being published to the aggregate as :meth:`_apply_now` would once
        they are acknowledged, at the sequences they get if nobody else writes first (from
        ``first``): while their acknowledgement is on its way, and before the projector of this
        process applies them (the snapshot it lends then has not seen them). True if applied;
        the caller forgets the aggregate if the log stores them elsewhere, or not at all."""
        if self.snapshots is None or not self._guardable(cached) or cached.pending:
            return False
        cached.pending.extend((first + i, event) for i, event in enumerate(events))
        try:
            self._apply_guarded(cached)
        except Exception:
            # Nothing applied (the first lookup refused) or half applied: restore it later.
            cached.pending.clear()
            cached.broken = True
            logger.debug("applying the events being published failed", exc_info=True)
            return False
        return True

    def _reading(self) -> AbstractContextManager[None]:
        return contextlib.nullcontext() if self.snapshots is None else self.snapshots.reading()

    async def _load(self, subject: str, key: str) -> None:
        """Without snapshots, a new aggregate is replayed from its subject before deciding."""
        if self.snapshots is None and subject not in self._cache:
            cached = self._remember(subject, _Cached(self._empty(key), 0))
            await self._fast_forward(subject, cached)

    def _prepare(self, subject: str, key: str) -> _Cached[A]:
        """The cached aggregate, reconciled with the snapshot and with its pending events
        applied (inside a reading)."""
        cached = self._cache.get(subject)
        if cached is not None and cached.replayed:
            pass  # the log's, not a snapshot's (see _replayed_if_ahead)
        elif self.snapshots is not None:
            snapshot = self.snapshots.snapshot(key)
            if cached is not None:
                cached.guarded = 0
            if cached is None or _restore(cached, snapshot.seq):
                cached = self._remember(subject, _restored(cached, snapshot))
            else:
                # Between what it was restored from and what was applied here: the applied
                # events stay on top of the snapshot's rows.
                snapshot.rebind(cached.aggregate)
                cached.base = snapshot.seq
        elif cached is None:
            cached = self._remember(subject, _Cached(self._empty(key), 0))
        self._cache.move_to_end(subject)
        _apply_pending(cached)
        return cached

    def _remember(self, subject: str, cached: _Cached[A]) -> _Cached[A]:
        self._cache[subject] = cached
        while len(self._cache) > self._cache_size:
            evicted, _ = self._cache.popitem(last=False)
            lock = self._locks.get(evicted)
            if lock is not None and not lock.locked():
                del self._locks[evicted]
        return cached

    async def _caught_up(self, subject: str, key: str, cached: _Cached[A]) -> bool:
        """Fast-forward if the subject moved past the cache; True if it did (or if the cache
        was ahead of the log: replayed from it, see :meth:`_replayed_if_ahead`)."""
        last = await self.log.last_seq(subject)
        if last < cached.seq:
            return await self._replayed_if_ahead(subject, key, cached, last)
        if last == cached.seq:
            return False
        await self._fast_forward(subject, cached)
        return True

    async def _replayed_if_ahead(
        self, subject: str, key: str, cached: _Cached[A], last: int | None = None
    ) -> bool:
        """When the aggregate was decided on past the subject's last event in the log (a
        snapshot from a read model ahead of a log that lost its tail), replace it with one
        replayed from the log, not from the snapshot: True. The log is the truth; retrying on
        the snapshot would only meet the same refusal until the retries ran out."""
        if last is None:
            last = await self.log.last_seq(subject)
        if last >= cached.seq or cached.replayed:
            return False
        logger.warning(
            "%s: the aggregate was decided on at sequence %d, the log ends the subject at %d "
            "(a read model ahead of the log?); replaying it from the log",
            subject,
            cached.seq,
            last,
        )
        replayed = self._remember(subject, _Cached(self._empty(key), 0, replayed=True))
        await self._fast_forward(subject, replayed)
        return True

    async def _replayed_after_gap(
        self, subject: str, key: str, error: OriginatorVersionError
    ) -> None:
        """An event did not follow the aggregate's version. Once, the aggregate is replayed from
        the log alone (what was cached or restored may be what is wrong); when the log's own
        events skip versions, that is named.

        Raises:
            LogGapError: the aggregate was replayed from the log and its events still skip.
        """
        cached = self._cache.pop(subject, None)
        if cached is not None and cached.replayed:
            found, due = (*error.args, None, None)[:2]
            raise LogGapError(
                f"{subject}: the log serves the aggregate's event version {found} where "
                f"version {due} is due: events acknowledged earlier are missing from the copy "
                f"of the stream that answered (a server's damaged store?); nothing was "
                f"decided. `memstream doctor` (with MEMSTREAM_NATS_MONITOR_URL naming every "
                f"server) names the server and how to have its copy made anew"
            ) from error
        logger.warning("%s: %s; replaying the aggregate from the log", subject, error)
        replayed = self._remember(subject, _Cached(self._empty(key), 0, replayed=True))
        await self._fast_forward(subject, replayed)

    async def _fast_forward(self, subject: str, cached: _Cached[A]) -> None:
        """Read the subject's events after ``cached.seq``; they are applied at the next
        decision."""
        async for entry in self.log.read_subject(subject, cached.seq):
            try:
                event = decode_event(entry.payload, entry.headers, entry.subject)
            except Exception:
                # Not an event of ours (the projector dead-letters it too): pass over it.
                logger.exception("skipping undecodable message %d on %s", entry.seq, subject)
            else:
                cached.pending.append((entry.seq, event))  # type: ignore[arg-type]
            cached.seq = entry.seq


def _apply_pending(cached: _Cached[A]) -> None:
    """Apply the events kept after the aggregate's state to it."""
    for seq, event in cached.pending:
        event.mutate(cached.aggregate)
        cached.applied = seq
    cached.pending.clear()


def _decided(
    aggregate: A, decide: Decide[A, R]
) -> tuple[list[Aggregate.Event], R | None, MemstreamError | None, str | None]:
    try:
        decision = decide(aggregate)
    except MemstreamError as error:
        return [], None, error, None
    if isinstance(decision, Decided):
        return list(decision.events), decision.value, None, decision.command_id
    return list(decision), None, None, None


def _restore(cached: _Cached[A], position: int) -> bool:
    """Whether to restore from a snapshot at ``position`` rather than keep the aggregate: when
    the snapshot has everything applied here (and more than it was restored from, so the kept
    overlay shrinks), went backwards (the read model was rebuilt), or the aggregate was left
    half updated."""
    return (
        cached.broken
        or position < cached.base
        or position > cached.applied
        or (position == cached.applied and position != cached.base)
    )


def _restored(cached: _Cached[A] | None, snapshot: Snapshot[A]) -> _Cached[A]:
    """The aggregate restored from ``snapshot``, with the events known here that the snapshot
    has not seen yet (none after a rebuild: no event here covers the gap it left)."""
    position = snapshot.seq
    if cached is None or position < cached.base or position < cached.applied:
        # Nothing here covers what the snapshot lacks: publishing will fast-forward from it.
        return _Cached(snapshot.restore(), position, applied=position, base=position)
    return _Cached(
        snapshot.restore(),
        max(position, cached.seq),
        applied=position,
        base=position,
        pending=[(seq, event) for seq, event in cached.pending if seq > position],
    )


def _msg_id(command_id: str, index: int, count: int) -> str:
    return command_id if count == 1 else f"{command_id}:{index}"
