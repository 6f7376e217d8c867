"""Own writes: a client's events projected by the projector of its own process, both halves.

A client that runs the projector in its process need not wait for the log to deliver its own
events before a reader here sees them:

- **read-your-writes** (:meth:`OwnWrites.before_read`): a reader waiting for events this client
  wrote, next in the stream, has the projector apply them at once, as their delivery would
  (same bytes, same sequences, in the transaction that records the positions); the delivery,
  when it comes, is passed over;
- **speculation** (:meth:`OwnWrites.speculate`): in an agent loop (a read follows each write),
  the projector applies a write's events *while its acknowledgement is on its way*, at the
  sequences they get if nobody else writes first, and keeps them only if the acknowledgement
  says they got them (else rolls them back): the projection overlaps the round trip;
- **decided events** (:meth:`OwnWrites.own_event`): the projector applies this client's events
  as the domain decided them instead of decoding their payloads again.

:class:`OwnWrites` is the client half (what this client wrote, when to speculate);
:class:`OwnGroup` the projector half (the open transaction of own events, committed in groups
within :data:`GROUP_SECONDS`). Everything here is an optimisation: when any step declines or
fails, the events are applied by their delivery, as on a projector in another process.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

from memstream.projections.ports import ProjectorStats, ReadModelStore, StoreTransaction, run_to_end
from memstream.workers.log.codec import H_MSG_ID
from memstream.workers.log.event_log import LogEntry, OutgoingMessage

logger = logging.getLogger(__name__)

# At most this many of a client's own events are kept for the projector of its process to apply
# for a reader (it forgets them as it commits; older ones are its to deliver).
OWN_EVENTS = 10_000
# Writes that apply nothing early (see OwnWrites.speculate) after one whose sequence another
# writer's event took: 1, 3, 7, ... after 1, 2, 3, ... misses in a row, at most this many.
SPECULATION_PAUSE = 31
# How long a write's events stay applied-but-uncommitted while its acknowledgement is awaited:
# then they are rolled back (the projector and other writers to the read model wait meanwhile).
HOLD_SECONDS = 0.1
# Own events kept in the projector's open transaction are committed within this long, or once
# they number this many (readers here read them through the open transaction meanwhile;
# readers elsewhere wait for the commit).
GROUP_SECONDS = 0.005
GROUP_EVENTS = 64


# -- the projector half ------------------------------------------------------------------------


class GroupHost(Protocol):
    """What :class:`OwnGroup` needs of its projector
    (:class:`~memstream.workers.projector.ProjectorWorker`)."""

    store: ReadModelStore
    stats: ProjectorStats
    durable: str  # its consumer's name, for the log lines

    @property
    def committed(self) -> int:
        """The last sequence applied, committed or in the open group."""

    @property
    def durable_seq(self) -> int:
        """The last sequence committed."""

    def idle_store(self) -> ReadModelStore | None:
        """Its store while readers here may read through it."""

    def accepts_own(self, entries: Sequence[LogEntry]) -> bool:
        """Whether it may apply ``entries`` now (running, between batches, next in line)."""

    def lend(self, lendable: bool) -> None:
        """Let readers read through its store (or not, while unacknowledged events are in)."""

    def own_applied(self, seq: int) -> None:
        """Own events up to ``seq`` are in the open group (not committed)."""

    def own_committed(self, seq: int) -> None:
        """Everything up to ``seq`` is committed (readers are told)."""

    def own_rolled_back(self) -> None:
        """The open group was rolled back: applied is committed again."""


class HeldOwn:
    """A writer's own events applied by :meth:`OwnGroup.hold` and not yet acknowledged by the
    log: exactly one of :meth:`commit` and :meth:`abandon` ends it."""

    __slots__ = ("_count", "_group", "_last", "ended")

    def __init__(self, group: OwnGroup, last: int, count: int) -> None:
        self._group: OwnGroup | None = group
        self._last = last
        self._count = count
        self.ended: asyncio.Event | None = None  # made for a batch that waits for the end

    def commit(self) -> bool:
        """The log has the events at the sequences they were applied with: they join the
        projector's open transaction, which commits them soon (:data:`GROUP_SECONDS`);
        readers here read them through it at once. True if done (False after a failure,
        when nothing is left of them and their delivery applies them)."""
        group, self._group = self._group, None
        return group is not None and group.confirm(self, self._last)

    def abandon(self) -> None:
        """Roll the events back (the log did not store them at those sequences, or at all),
        and with them the open transaction's events: their deliveries apply them."""
        group, self._group = self._group, None
        if group is not None:
            group.drop(self, self._count)


class OwnGroup:
    """The projector's open transaction of own events (:meth:`apply`, :meth:`hold`),
    committed within :data:`GROUP_SECONDS` or :data:`GROUP_EVENTS`, before any batch, or at
    :meth:`flush`."""

    def __init__(self, host: GroupHost) -> None:
        self._host = host
        self._group: StoreTransaction | None = None
        self._entries: list[LogEntry] = []  # what it applied (the held ones last)
        self._stats = ProjectorStats()
        self.held: HeldOwn | None = None  # the part the log has not acknowledged yet
        self._flush_due = False
        self._flush_timer: asyncio.TimerHandle | None = None
        self.batches = 0  # batches applied for a reader here, for tests and status

    @property
    def open(self) -> bool:
        """Whether own events wait in an open transaction."""
        return self._group is not None

    @property
    def projections(self) -> Sequence[str]:
        """The projections of the projector's store (asked on every read that waits)."""
        return self._host.store.projections

    def readable(self, projection: str, seq: int) -> bool:
        """Whether reads here through the projector's store (its idle store) see
        ``projection`` up to ``seq`` although it is not committed yet: own events the log
        acknowledged, in the open transaction."""
        host = self._host
        return (
            self._group is not None
            and self.held is None
            and seq <= host.committed
            and projection in host.store.projections
            and host.idle_store() is not None
        )

    def apply(self, entries: Sequence[LogEntry]) -> bool:
        """Apply and commit events this process wrote, which the log has acknowledged but the
        projector has not been delivered yet, for a reader here that waits for them; True if
        done.

        Only the next events in the stream (the first is ``committed + 1``, the rest follow it
        without a gap), only between batches, and only as much as a batch applies on the event
        loop: otherwise the reader waits for the projector as before. The events are applied
        as their delivery would be (the same bytes at the same sequences, in the transaction
        that records the positions), so the delivery, when it comes, is passed over. On a
        failure nothing is written and the delivery applies them (with its retries and dead
        letters).
        """
        held = self.hold(entries)
        if held is None or not held.commit():
            return False
        return self.flush()

    def hold(self, entries: Sequence[LogEntry]) -> HeldOwn | None:
        """Apply events this process is writing as :meth:`apply` does, in the open transaction
        (begun here if there is none), without committing: :meth:`HeldOwn.commit` keeps them,
        :meth:`HeldOwn.abandon` rolls them back. ``None`` where :meth:`apply` would not apply
        them, or when applying failed (the open transaction is then rolled back: its events
        come again with their deliveries). Until the hold ends the projector applies no batch
        and lends its store to no reader."""
        host = self._host
        if (
            not entries
            or entries[0].seq != host.committed + 1
            or any(b.seq != a.seq + 1 for a, b in itertools.pairwise(entries))
            or not host.accepts_own(entries)
        ):
            return None
        host.lend(False)  # no reader reads what the log has not acknowledged
        try:
            group = self._group
            if group is None:
                # Not waiting for another connection's write lock: the deliveries apply them.
                group = self._group = host.store.transaction(committed=host.durable_seq, wait=False)
            self._entries += entries
            run_to_end(group.apply(entries, self._stats))
            group.expose()
        except Exception:  # the deliveries meet them again, with retries (and reports)
            logger.debug("projector %s: applying own events failed", host.durable, exc_info=True)
            self.drop(None, len(entries))
            return None
        self.held = held = HeldOwn(self, entries[-1].seq, len(entries))
        return held

    def confirm(self, held: HeldOwn, last: int) -> bool:
        """The log acknowledged ``held``'s events at their sequences (up to ``last``)."""
        if self.held is not held or self._group is None:
            return False
        self._end_hold()
        self.batches += 1
        self._host.own_applied(last)
        if self._flush_due or self._group.position - self._host.durable_seq >= GROUP_EVENTS:
            return self.flush()
        if self._flush_timer is None:
            self._flush_timer = asyncio.get_running_loop().call_later(
                GROUP_SECONDS, self._flush_soon
            )
        return True

    def _end_hold(self) -> None:
        held, self.held = self.held, None
        self._host.lend(True)
        if held is not None and held.ended is not None:
            held.ended.set()

    def _flush_soon(self) -> None:
        self._flush_timer = None
        if self.held is not None:
            self._flush_due = True  # committed when the hold ends
        else:
            self.flush()

    def _cancel_timer(self) -> None:
        self._flush_due = False
        timer, self._flush_timer = self._flush_timer, None
        if timer is not None:
            timer.cancel()

    def flush(self) -> bool:
        """Commit the open transaction of own events (a no-op without one); False if that
        failed (it is then rolled back: the events come again with their deliveries)."""
        if self.held is not None:
            self._flush_due = True
            return True
        group, self._group = self._group, None
        self._cancel_timer()
        if group is None:
            return True
        host = self._host
        stats, self._stats = self._stats, ProjectorStats()
        self._entries = []
        try:
            seq = group.commit(stats)
        except Exception:
            logger.debug("projector %s: committing own events failed", host.durable, exc_info=True)
            host.own_rolled_back()
            return False
        host.stats.batches += stats.batches
        host.stats.applied += stats.applied
        host.stats.skipped += stats.skipped
        host.own_committed(seq)
        return True

    def drop(self, held: HeldOwn | None, count: int) -> None:
        """Roll back ``held``'s events (the last ``count`` applied) with the open transaction,
        then apply and commit again the events kept before them."""
        if held is not None and self.held is not held:
            return
        host = self._host
        group, self._group = self._group, None
        kept = self._entries[: len(self._entries) - count]
        self._entries = []
        self._cancel_timer()
        self._stats = ProjectorStats()
        if group is not None:
            try:
                group.rollback()
            except Exception:
                logger.debug("projector %s: rolling back failed", host.durable, exc_info=True)
        host.own_rolled_back()
        self._end_hold()
        if not kept or group is None:
            return
        # Rare (another writer's event came first). Applied again now, so that the readers here
        # that read them already need not wait for their deliveries (which would bring them:
        # no delivery is passed over before its event is committed).
        stats = ProjectorStats()
        try:
            seq = host.store.apply(kept, stats, committed=host.durable_seq)
        except Exception:  # their deliveries apply them
            logger.debug("projector %s: applying own events failed", host.durable, exc_info=True)
            return
        host.stats.batches += stats.batches
        host.stats.applied += stats.applied
        host.own_committed(seq)

    def abandon_held(self) -> None:
        """At close: a held write is rolled back (its writer's read then waits, and fails, as
        without it)."""
        if self.held is not None:
            self.held.abandon()

    async def wait_for_hold(self, done: Callable[[], bool]) -> None:
        """Wait while a writer's own events are held open (their transaction is on the
        store's connection), until ``done()`` (their commit made a batch's events applied
        already)."""
        while (held := self.held) is not None and not done():
            if held.ended is None:
                held.ended = asyncio.Event()
            await held.ended.wait()


# -- the client half ---------------------------------------------------------------------------


class OwnProjector(Protocol):
    """What :class:`OwnWrites` needs of the projector of its process."""

    @property
    def committed(self) -> int: ...

    @property
    def own(self) -> OwnGroup: ...


class OwnWrites:
    """A client's own events, for the projector of its process (see the module's docstring).

    ``stored(subject)`` is a subject as the stream stores it (with its partition).
    """

    def __init__(self, stored: Callable[[str], str]) -> None:
        self._stored = stored
        self.projector: OwnProjector | None = None  # set while one runs in this process
        # Own writes applied while their acknowledgement is on its way (see speculate);
        # False: applied after it, for a reader (before_read), or when delivered.
        self.overlap_writes = True
        # The projector here takes this client's own events as decided rather than decoding
        # their payloads again (False: it decodes every delivery, as a projector elsewhere).
        self.reuse_own_events = True
        self._events: dict[int, LogEntry] = {}  # by sequence, until delivered or committed
        # This client's events that the projector of this process has not committed yet.
        self._own: deque[LogEntry] = deque()
        # Whether a read waited since this client's last write (see speculate), and the
        # writes left before it speculates again after a miss.
        self.read_since_write = False
        self._pause = 0
        self._misses = 0  # in a row
        # Writes whose events were applied during their round trip, and those rolled back
        # (another event took their sequence): for tests and benchmarks.
        self.overlapped_writes = 0
        self.missed_overlaps = 0

    @property
    def pending(self) -> bool:
        """Whether some of this client's events may not be committed by the projector here."""
        return bool(self._own)

    def published(self, subject: str, messages: Sequence[OutgoingMessage], first: int) -> None:
        """Keep this client's events as the log stored them (from sequence ``first``), while a
        projector runs in this process (it forgets them as it commits: :meth:`projected`)."""
        if self.projector is None:
            return
        own = self._own
        for index, message in enumerate(messages):
            headers = dict(message.headers)
            headers[H_MSG_ID] = message.msg_id
            event = message.event if self.reuse_own_events else None
            entry = LogEntry(first + index, self._stored(subject), message.payload, headers, event)
            if own and own[-1].seq > entry.seq:  # concurrent commands' acks out of order
                bisect.insort(own, entry, key=lambda e: e.seq)
            else:
                own.append(entry)
            if event is not None:
                self._events[entry.seq] = entry
        while len(own) > OWN_EVENTS:
            own.popleft()
        events = self._events
        while len(events) > OWN_EVENTS:
            del events[next(iter(events))]

    def own_event(self, seq: int, payload: bytes) -> object | None:
        """The domain event this client decided and the log stored at ``seq`` with ``payload``
        (the projector here applies it without decoding the payload again); ``None`` if it is
        not one of this client's, or the log holds another payload there."""
        entry = self._events.pop(seq, None)
        if entry is None or entry.payload != payload:
            return None
        return entry.event

    def projected(self, seq: int) -> None:
        """The projector of this process committed up to ``seq``."""
        own = self._own
        while own and own[0].seq <= seq:
            own.popleft()
        events = self._events
        while events and next(iter(events)) <= seq:  # applied without a delivery
            del events[next(iter(events))]

    def _uncommitted(self, projector: OwnProjector) -> int:
        """Forget what ``projector`` committed; its committed sequence."""
        own = self._own
        committed = projector.committed
        while own and own[0].seq <= committed:
            own.popleft()
        return committed

    def speculate(self, subject: str, messages: Sequence[OutgoingMessage]) -> OwnWrite | None:
        """Before a publish: have the projector of this process apply the events while their
        acknowledgement is on its way (:meth:`OwnGroup.hold`), at the sequences they get if no
        other event is stored before them, and keep them if the acknowledgement says they did
        (else roll them back); kept events are committed with the next few in the projector's
        open transaction. The reader that follows finds them projected.

        Only for a client that reads what it wrote (a read waited since its last write: an
        agent loop, not a burst of writes, which the projector applies in batches), while every
        earlier event of this client is projected, and not for a while after a miss (another
        writer's event came first).
        """
        projector = self.projector
        if (
            projector is None
            or not self.overlap_writes
            or not self.read_since_write
            or len(messages) != 1  # (a batch is published as a whole: nothing to overlap)
        ):
            return None
        self.read_since_write = False
        if self._pause:
            self._pause -= 1
            return None
        committed = self._uncommitted(projector)
        if self._own:
            return None
        entries = []
        for index, message in enumerate(messages):
            headers = dict(message.headers)
            headers[H_MSG_ID] = message.msg_id
            entries.append(
                LogEntry(committed + 1 + index, self._stored(subject), message.payload, headers)
            )
        return OwnWrite(self, projector.own, entries)

    def speculation_ended(self, committed: bool) -> None:
        if committed:
            self.overlapped_writes += 1
            self._misses = 0
        else:
            self.missed_overlaps += 1
            self._misses = misses = min(self._misses + 1, 5)
            self._pause = min(2**misses - 1, SPECULATION_PAUSE)

    def before_read(
        self, projection: str, target: int, *, uncommitted: bool, lent: Callable[[], bool]
    ) -> bool:
        """A reader here waits for ``projection`` up to ``target``, which its watch has not
        seen committed. If the events up to it are this client's own, next in the stream, the
        projector of this process applies them now rather than wait for their delivery
        (read-your-writes then costs what a write to the read model does). True when the
        reader may read at once: an ``uncommitted`` read whose reads go through the
        projector's open transaction (``lent()``), which has them; else they are committed
        now rather than within :data:`GROUP_SECONDS`."""
        projector = self.projector
        if projector is None:
            return False
        group = projector.own
        if self._own and projection in group.projections:
            committed = self._uncommitted(projector)
            own = self._own
            if own and own[0].seq == committed + 1:
                entries = list(itertools.takewhile(lambda e: e.seq <= target, own))
                if entries and entries[-1].seq >= target:
                    group.apply(entries)  # its commit forgets them (projected)
        if group.readable(projection, target):
            if uncommitted and lent():
                return True
            group.flush()
        return False


class OwnWrite:
    """A client's events applied while their acknowledgement is on its way (a
    :class:`~memstream.workers.log.aggregate_store.Speculation`): see
    :meth:`OwnWrites.speculate`."""

    __slots__ = ("_entries", "_group", "_held", "_timer", "_writes")

    def __init__(self, writes: OwnWrites, group: OwnGroup, entries: list[LogEntry]) -> None:
        self._writes = writes
        self._group = group
        self._entries = entries
        self._held: HeldOwn | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def first(self) -> int:
        return self._entries[0].seq

    def start(self) -> None:
        try:
            self._held = self._group.hold(self._entries)
        except Exception:  # called inside a publish, which must not fail for it
            logger.debug("holding own events failed", exc_info=True)
        if self._held is not None:
            self._timer = asyncio.get_running_loop().call_later(HOLD_SECONDS, self.finish, None)

    def finish(self, first: int | None) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        held, self._held = self._held, None
        if held is None:
            return
        if first == self._entries[0].seq:
            if held.commit():  # kept; the group's commit forgets them (projected)
                self._writes.speculation_ended(True)
        else:
            held.abandon()
            self._writes.speculation_ended(False)


__all__ = [
    "GROUP_EVENTS",
    "GROUP_SECONDS",
    "GroupHost",
    "HeldOwn",
    "OwnGroup",
    "OwnProjector",
    "OwnWrite",
    "OwnWrites",
]
