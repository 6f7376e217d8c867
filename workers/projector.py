"""The projector worker: a durable, ordered JetStream pull consumer feeding the read models.

It writes through a :class:`~memstream.projections.ports.ReadModelStore` (the backend's).
Each batch is applied in one transaction together with each projection's tracking row, then
acknowledged; a redelivered sequence at or below the tracked one is skipped. On start the
durable consumer is (re)positioned at the read models' tracked sequence, so a dropped read model
is rebuilt from the log and a killed worker resumes exactly where its last commit ended. A
damaged read-model file (met in a batch, or reported by a reader) is moved aside and rebuilt
the same way, from sequence 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import api

from memstream.domain.errors import (
    MemstreamError,
    ProjectorRunningError,
    ReadModelAheadError,
    ReadModelDamagedError,
)
from memstream.projections.ports import (
    CopyLock,
    ProjectorStats,
    ReadModelCopy,
    ReadModelRewound,
    ReadModelStore,
    StoreBusy,
    step,
)
from memstream.projections.registry import INDEXER_PROJECTIONS, PROJECTIONS, PROJECTOR_PROJECTIONS
from memstream.projections.tracking import PARTITION_ROW, TrackingRows
from memstream.workers.dead_letters import forget_erased_while_projecting, is_purge_record
from memstream.workers.log.event_log import EventLog, LogEntry
from memstream.workers.log.log_position import check_copy
from memstream.workers.log.subjects import demand_subject, partition_filter
from memstream.workers.observability.tracing import batch_span, tracing
from memstream.workers.own_writes import GROUP_SECONDS, HeldOwn, OwnGroup
from memstream.workers.position import Demand, wanted_by
from memstream.workers.pull import Puller, stream_sequence

logger = logging.getLogger(__name__)

# How long a projector gathers a burst of writes before committing it, unless a reader waits for
# more than is committed, in its process or any other (see ProjectorWorker._linger).
DEFAULT_LINGER = 0.05
# Acknowledgements are for the server's bookkeeping only (the tracking row decides what was
# applied), so they are sent at most this often, or for large batches at once: one message less
# per event for the client to send and the server to handle.
ACK_INTERVAL = 0.1
ACK_AT_ONCE = 100
# The wait before a failed batch is tried again (doubling up to 5 s while it keeps failing).
FIRST_RETRY_DELAY = 0.05
# Batches of at most THREAD_EVENTS events holding at least THREAD_BYTES are applied in a worker
# thread (THREAD_BYTES 0: never), as are batches of big events (THREAD_EVENT_BYTES): big events
# (an append_messages of hundreds of messages) are
# mostly SQLite work, which runs beside this process's writers with the GIL released. Many small
# events are mostly Python work, which would only contend for the GIL with the writers
# (bench/RESULTS.md, 'Figures moved from code comments').
THREAD_BYTES = 64 * 1024
THREAD_EVENTS = 16
# ... and so are larger batches whose events hold this much on average (a burst of chains).
THREAD_EVENT_BYTES = 16 * 1024
# How long a batch is applied before the event loop gets a turn (while no reader waits for the
# batch): a writer in the process waits at most about this long behind the projector, and the
# loop is not entered after every event (each entry costs a turn of the loop: bench/RESULTS.md,
# 'Figures moved from code comments').
APPLY_SLICE = 0.0005
# How long a clean stop waits for the batch in hand to commit before it abandons it.
STOP_DRAIN_SECONDS = 5.0
# How long a projector waits before trying again to replace a damaged read model it could not.
RENEW_RETRY = 5.0
# Seconds between checks of a copy refused for being ahead of the log (a rebuild mends it).
REFUSED_RECHECK = 5.0
PROJECTOR_CONSUMER_PREFIX = "projector-"
# A durable consumer at most this many stream sequences behind the read model is bound again
# as it is (see ProjectorWorker._bind).
REUSE_BEHIND = 4096
# How long forgetting the dead letters of erased events waits for own events held meanwhile.
FORGET_WAIT = 1.0
# A batch "waiting for" this refuses every writer's hold (see ProjectorWorker.hold_own).
_NO_HOLDS = 2**63 - 1


def projector_consumer(
    copy: str,
    projections: Sequence[str] = PROJECTOR_PROJECTIONS,
    partition: int | None = None,
) -> str:
    """The durable consumer name of a projector of ``projections`` in read-model copy ``copy``:
    ``projector-<copy>`` for the projector's default set, else
    ``projector-<copy>-<name>[-<name>...]``; a projector of one partition adds ``-p<n>``.
    Each projector has its own: projectors of other projections of the copy (a slow one), or
    of other partitions, never hold it up."""
    names = [name for name in PROJECTIONS if name in projections]
    if names == list(PROJECTOR_PROJECTIONS):
        name = f"{PROJECTOR_CONSUMER_PREFIX}{copy}"
    else:
        name = f"{PROJECTOR_CONSUMER_PREFIX}{copy}-{'-'.join(names)}"
    return name if partition is None else f"{name}-p{partition}"


def only_partition(rows: TrackingRows) -> int | None:
    """The one partition a projector tracking ``rows`` consumes, if it consumes one of several
    (``None``: the whole stream)."""
    if rows.count and len(rows.owned) == 1 and rows.count > 1:
        return next(iter(rows.owned))
    return None


def claim_copy(copy: ReadModelCopy, projections: Sequence[str] = PROJECTIONS) -> CopyLock:
    """Take the projector locks of ``projections`` of the read-model copy ``copy`` (creating
    it if new), for a projector this process is about to run.

    Raises:
        ProjectorRunningError: another projector runs one of them for this copy (the message
            names it).
        UnavailableError: the copy cannot be opened.
    """
    return copy.claim(projections)


def consumed_subjects(prefix: str, projections: Sequence[str]) -> str:
    """The subject filter of a projector of ``projections``: every event, or only Agent Memory
    events for ``vectors`` alone (the indexer)."""
    if set(projections) <= set(INDEXER_PROJECTIONS):
        return f"{prefix}.*.profile.*"
    return f"{prefix}.>"


class ProjectorWorker:
    """Consumes the stream in order and keeps the read models current: the whole stream, or
    one partition of a partitioned one (``rows`` at :meth:`open`, see
    :class:`~memstream.projections.tracking.TrackingRows`).

    Its durable consumer is named from the read-model copy's id (``projector-<copy id>``, with
    ``-p<n>`` for partition n), so every copy (data dir, host) projects the stream on its own;
    :meth:`open` also takes the copy's projector locks (of the partition's rows, for one
    partition).
    """

    def __init__(
        self,
        log: EventLog,
        store: ReadModelStore,
        *,
        durable: str | None = None,
        batch_size: int = 500,
        on_commit: Callable[[int], None] | None = None,
        demand: Demand | None = None,
        linger: float = 0.0,
        lock: CopyLock | None = None,
        standing_pull: bool = False,
        thread_bytes: int | None = None,
        thread_events: int = THREAD_EVENTS,
        in_thread: bool = False,
        reclaim: Callable[[], CopyLock] | None = None,
        own_event: Callable[[int, bytes], object | None] | None = None,
    ) -> None:
        self.log = log
        self.store = store
        self.durable = durable or projector_consumer(
            store.copy_id(), store.projections, only_partition(store.rows)
        )
        self._named_by_copy = durable is None
        self.lock = lock
        # Takes the copy's locks again when they were lost (see _hold_lock).
        self._reclaim = reclaim
        self.batch_size = batch_size
        self.on_commit = on_commit
        self.demand = demand
        self.linger = linger
        # True: standing pull requests (Puller.pull) and deferred acks. Off by default: the server
        # then delivers each event on its own as it is stored, a delivery per event that sequential
        # appends with the projector in-process pay for in their rate, for no gain in the agent loop
        # (bench/RESULTS.md, 'Figures moved from code comments'; 'agent loop', 2026-12-02). False: a
        # pull request per batch and an ack per commit (Puller.fetch), the path nats-py's fetch
        # takes.
        self.standing_pull = standing_pull
        self._unacked: Msg | None = None
        self.thread_bytes = THREAD_BYTES if thread_bytes is None else thread_bytes
        self.thread_events = thread_events
        # Every batch in a worker thread: projections that compute (an embedding model loads
        # in seconds and encodes for tens of ms per text) must not hold up the event loop.
        self.in_thread = in_thread
        self._acked_at = 0.0
        self.stats = ProjectorStats()
        self.busy_batches = 0  # batches sent to a thread: another connection held the lock
        # The domain event a writer of this process decided for a delivery (its sequence and
        # payload), applied as it is instead of decoded again; and how many were.
        self.own_event = own_event
        self.reused_events = 0
        self._stopping = asyncio.Event()
        # Set once its durable consumer exists (what tells verify() that this copy is
        # projected by such a worker), and stays set.
        self.bound = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._committed = 0
        self._damage: str | None = None  # why the read model must be replaced, once known
        self._batch_done: asyncio.Event | None = None  # set while a fetched batch is in hand
        self._applying = False  # a batch's transaction may be open (or a thread has the store)
        # Own events (apply_own, hold_own) are applied in a transaction left open, committed
        # in groups (see own_writes.OwnGroup): _durable is the last committed sequence,
        # _committed the last applied (what the open transaction adds).
        self.own = OwnGroup(self)
        self._durable = 0
        self._waiting_for = 0  # the last sequence of a batch waiting for a hold to end
        self._closed = False
        # The client's connection the copy was last checked against the log on: after a
        # reconnection it is checked again (see check_log).
        self._checked_on: int | None = None
        # Set once the copy was found to stand on the log (or replaced because it did not).
        self.checked = asyncio.Event()
        # Why it stopped: a copy ahead of the log that it may not replace (see check_log).
        self.refused: ReadModelAheadError | None = None

    @classmethod
    def open(
        cls,
        log: EventLog,
        copy: ReadModelCopy,
        projections: Sequence[str] = PROJECTOR_PROJECTIONS,
        **options: Any,
    ) -> ProjectorWorker:
        """A projector of ``projections`` (registry names) for the read-model copy ``copy``,
        holding their locks until :meth:`close` (or until this process dies). A projection
        whose rows another version of it wrote starts over from the log. ``rows`` (an option):
        where it records positions on a partitioned stream; one partition of several makes it
        that partition's projector.

        Raises:
            ProjectorRunningError: another projector runs one of them for this copy.
            UnavailableError: the database cannot be opened.
        """
        rows: TrackingRows | None = options.pop("rows", None)
        partition = None if rows is None else only_partition(rows)
        names = (
            projections
            if partition is None
            else [f"{n}{PARTITION_ROW}{partition}" for n in projections]
        )
        lock = options.pop("lock", None) or claim_copy(copy, names)
        options.setdefault("reclaim", lambda: claim_copy(copy, names))
        encoder = options.pop("encoder", None)  # the vectors projection's model
        try:
            # Moves a damaged one aside.
            store = copy.store(projections, long_lived=True, encoder=encoder)
            if rows is not None:
                try:
                    store.track(rows)
                except BaseException:
                    store.close()
                    raise
        except BaseException:
            lock.release()
            raise
        if encoder is not None:
            options.setdefault("in_thread", True)
        return cls(log, store, lock=lock, **options)

    @property
    def copy_id(self) -> str:
        """The id of the read-model copy this projector writes."""
        return self.store.copy_id()

    @property
    def filter_subject(self) -> str:
        """What its consumer delivers: every event; only Agent Memory events to a projector of
        ``vectors`` alone (the indexer), whose readers wait for their profile's last event,
        not for the stream's (see
        :meth:`memstream.read_your_writes.ReadYourWrites.wait_for_profile`); one partition's
        events to a projector of that partition."""
        partition = only_partition(self.store.rows)
        if partition is not None:
            return partition_filter(self.log.subject_prefix, partition)
        return consumed_subjects(self.log.subject_prefix, self.store.projections)

    def start_position(self) -> int:
        """First stream sequence not yet applied by every projection."""
        return min(self.store.positions().values()) + 1

    async def _bind(self) -> Puller:
        js = self.log.js
        start = self.start_position()
        try:
            info = await js.consumer_info(self.log.stream, self.durable)
            floor = info.ack_floor.stream_seq if info.ack_floor else 0
            behind = start - 1 - floor
            # Kept when it only lags the read model a little (an ack lost when a process died
            # after its commit; events of other subjects after its last one): what it delivers
            # again is passed over by the positions, which costs less than making a consumer
            # anew (an operation of the stream's leader, slow while a cluster has a node down).
            # Made anew when it is ahead (the read model was dropped or replaced), far behind,
            # or has deliveries in flight (they would come again only after the ack wait).
            if info.num_ack_pending or behind < 0 or behind > REUSE_BEHIND:
                await js.delete_consumer(self.log.stream, self.durable)
                raise nats.js.errors.NotFoundError
        except nats.js.errors.NotFoundError:
            await js.add_consumer(
                self.log.stream,
                api.ConsumerConfig(
                    durable_name=self.durable,
                    deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
                    opt_start_seq=start,
                    ack_policy=api.AckPolicy.ALL,
                    ack_wait=60.0,
                    max_ack_pending=-1,
                    filter_subject=await self.log.stored(self.filter_subject),
                ),
            )
        return await Puller.bind(self.log.client, self.log.stream, self.durable)

    def start(self) -> None:
        """Run in the background of the current event loop."""
        self._task = asyncio.create_task(self.run(), name=f"memstream-{self.durable}")

    async def stop(self, drain: float = STOP_DRAIN_SECONDS) -> None:
        """Stop consuming: a batch already received is committed first (within ``drain``
        seconds), so what this process holds is projected before it goes. Safe at any await
        point: an abandoned batch rolls back, and an unacknowledged batch is redelivered and
        skipped by its tracking row."""
        self._stopping.set()
        self.flush()  # (or, while a writer's events are on their way, once they are kept)
        if self.demand is not None:
            self.demand.event.set()  # cut a lingering batch short
        if self._task is not None:
            batch = self._batch_done
            if batch is not None and drain > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(batch.wait()), drain)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._damage is not None:
            # A short-lived process (a CLI command) leaves the file moved aside, for the next
            # projector to rebuild, instead of damaged.
            self._renew_read_model()

    @property
    def running(self) -> bool:
        """Whether it consumes (started, not stopped): it then reports each commit."""
        task = self._task
        return task is not None and not task.done() and not self._stopping.is_set()

    def idle_store(self) -> ReadModelStore | None:
        """The projector's store while it is between batches, for reads in this process on
        this thread (a backend may read through it: its caches are warm): ``None`` while a
        batch is applied, after damage, or once closed."""
        if self._applying or self._closed or self._damage is not None:
            return None
        return self.store

    @property
    def committed(self) -> int:
        """The last stream sequence every projection of this projector has applied: committed,
        or own events in its open transaction (see :meth:`hold_own`)."""
        return self._committed

    @property
    def own_batches(self) -> int:
        """Batches applied for a reader here (:meth:`apply_own`), for tests and status."""
        return self.own.batches

    def apply_own(self, entries: Sequence[LogEntry]) -> bool:
        """Apply events this process wrote for a reader here that waits for them
        (:meth:`OwnGroup.apply <memstream.workers.own_writes.OwnGroup.apply>`); True if done."""
        return self.own.apply(entries)

    def hold_own(self, entries: Sequence[LogEntry]) -> HeldOwn | None:
        """Apply events this process is writing, while their acknowledgement is on its way
        (:meth:`OwnGroup.hold <memstream.workers.own_writes.OwnGroup.hold>`)."""
        return self.own.hold(entries)

    def flush(self) -> bool:
        """Commit the open transaction of own events (a no-op without one); False if that
        failed (it is then rolled back: the events come again with their deliveries)."""
        return self.own.flush()

    def readable(self, projection: str, seq: int) -> bool:
        """Whether reads here through :meth:`idle_store` see ``projection`` up to ``seq``
        although it is not committed yet (own events in the open transaction)."""
        return self.own.readable(projection, seq)

    # -- what the own-events group needs (own_writes.GroupHost) --------------------------------

    @property
    def durable_seq(self) -> int:
        return self._durable

    def accepts_own(self, entries: Sequence[LogEntry]) -> bool:
        return not (
            not self.running
            or self.idle_store() is None  # a batch is being applied, or damage was found
            or self._waiting_for > self._committed  # a batch holds events not yet applied
            or self.in_thread
            or (self.thread_bytes and sum(len(e.payload) for e in entries) >= self.thread_bytes)
            or self.store.replaced()
        )

    def lend(self, lendable: bool) -> None:
        self._applying = not lendable

    def own_applied(self, seq: int) -> None:
        self._committed = seq

    def own_committed(self, seq: int) -> None:
        self._committed = self._durable = seq
        if self.on_commit:
            self.on_commit(seq)

    def own_rolled_back(self) -> None:
        self._committed = self._durable

    async def _wait_for_hold(self, last: int) -> None:
        """Before applying a batch up to sequence ``last``: wait while a writer's own events
        are held open (their transaction is on the store's connection), unless their commit
        made the batch's events applied already (their deliveries). Meanwhile no further
        events are held, so the batch is not kept waiting by one writer's hold after another.
        """
        if self.own.held is not None and last > self._committed:
            self._waiting_for = max(self._waiting_for, last)
        await self.own.wait_for_hold(lambda: last <= self._committed)

    def report_damage(self, reason: str, identity: Hashable | None) -> None:
        """A reader in this process met damage in the read-model copy ``identity``: replace it
        and rebuild it (within a fetch timeout, or at :meth:`stop`). A report about a copy this
        projector has replaced already is ignored."""
        store = self.store
        if store.renewable and store.identity == identity:
            self._damage = reason

    def _note_damage(self, error: BaseException) -> bool:
        """Remember ``error`` if it says the read model is damaged and can be replaced."""
        if not isinstance(error, ReadModelDamagedError) or not self.store.renewable:
            return False
        self._damage = error.reason
        return True

    def _renew_read_model(self) -> bool:
        """Move a damaged read model aside and open a fresh one, or open the copy another
        process put in place of ours (e.g. ``projections rebuild``). False when that failed
        (logged with what to do); the caller tries again later."""
        store = self.store
        damage = self._damage
        if not store.renewable or (damage is None and not store.replaced()):
            return True
        self._closed = True
        try:
            store.renew(damage)
        except MemstreamError as error:
            logger.error("projector %s: %s", self.durable, error)
            return False
        if damage is None:
            logger.info("projector %s: the read model was replaced; reopened it", self.durable)
        self._closed = False
        self._damage = None
        return True

    async def _follow_copy(self) -> None:
        """After the read model was replaced (a new file is a new copy, with a new id): consume
        under the new copy's name, and delete the old copy's consumer (nothing reads it now)."""
        if not self._named_by_copy:
            return
        durable = projector_consumer(
            self.store.copy_id(), self.store.projections, only_partition(self.store.rows)
        )
        if durable == self.durable:
            return
        old, self.durable = self.durable, durable
        logger.info("projector: read-model copy renamed its consumer %s -> %s", old, durable)
        with contextlib.suppress(Exception):  # best effort: forget-copy removes it otherwise
            await self.log.js.delete_consumer(self.log.stream, old)

    async def close(self) -> None:
        """Stop, close the database and give up the copy's lock."""
        await self.stop()
        self.own.abandon_held()
        self.flush()
        self._closed = True
        await asyncio.to_thread(self.store.close)  # may wait for background upkeep
        if self.lock is not None:
            self.lock.release()

    async def run(self) -> None:
        """Consume until :meth:`stop` (reconnecting and re-binding after NATS outages)."""
        listener = await self._listen_for_demand()
        try:
            await self._run()
        finally:
            if listener is not None:
                with contextlib.suppress(Exception):
                    await listener.unsubscribe()

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                # Positions are read below: not inside a writer's open transaction, and no
                # writer's events are held until the consumer is positioned.
                self._waiting_for = _NO_HOLDS
                await self._wait_for_hold(_NO_HOLDS)
                self.flush()
                if not self._renew_read_model():
                    await asyncio.sleep(RENEW_RETRY)
                    continue
                await self._follow_copy()
                if not await self.check_log():
                    continue  # replaced: check the new copy
                self._committed = self._durable = self.start_position() - 1
                if self.on_commit:
                    self.on_commit(self._committed)
                puller = await self._bind()
                self.bound.set()
                self._waiting_for = 0
                try:
                    await self._consume(puller)
                finally:
                    await puller.close()
            except ReadModelRewound as rewound:
                logger.info("projector %s: %s; re-binding", self.durable, rewound)
            except ProjectorRunningError as taken:
                logger.error("projector %s stops: %s", self.durable, taken)
                return
            except ReadModelAheadError as refused:
                # Said once; checked again now and then: a rebuild elsewhere mends it.
                if self.refused is None or str(self.refused) != str(refused):
                    logger.error("projector %s refuses to project: %s", self.durable, refused)
                self.refused = refused
                self.checked.set()
                await self._sleep_unless_stopping(REFUSED_RECHECK)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if self._stopping.is_set():
                    break
                if self._note_damage(error):
                    continue
                logger.warning("projector %s lost NATS; retrying", self.durable, exc_info=True)
                await asyncio.sleep(0.25)

    async def check_log(self) -> bool:
        """Check the copy against the log (:func:`~memstream.workers.log.log_position.check_copy`):
        True when it stands on it. A copy ahead of the log (the log lost or replaced its tail)
        that this projector can replace (a SQLite file) is marked damaged, to be moved aside
        and rebuilt from the log: False.

        Raises:
            ReadModelAheadError: the copy is ahead of the log and shared (PostgreSQL): it is
                refused, with the range and the command that rebuilds it.
            UnavailableError: the log cannot be read.
        """
        connection = _connection_number(self.log)
        gap = await check_copy(self.log, self.store.marks())
        if gap is None:
            if self.refused is not None:
                logger.info("projector %s: the copy stands on the log again", self.durable)
            self.refused = None
            self._checked_on = connection
            self.checked.set()
            return True
        if self.store.renewable:
            self._damage = gap.describe()  # moved aside with one warning that names the range
            return False
        raise ReadModelAheadError(gap.refusal(f"copy {self.store.copy_id()}"))

    def _reconnected(self) -> bool:
        """Whether the client reconnected since the copy was last checked against the log."""
        return self._checked_on is not None and _connection_number(self.log) != self._checked_on

    async def _sleep_unless_stopping(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _listen_for_demand(self) -> Subscription | None:
        """Hear readers in other processes (see :class:`Demand`), when this projector lingers."""
        demand = self.demand
        if demand is None or self.linger <= 0:
            return None

        partition = only_partition(self.store.rows)

        async def heard(msg: Msg) -> None:
            # A partition's projector hears what is awaited of its own partition only: a
            # reader of other partitions must not cut its lingering short.
            seq = wanted_by(msg.data, partition)
            if seq:
                demand.want(seq)
                if self.own.open and seq > self._durable:
                    self.flush()  # a reader elsewhere waits for own events kept open here

        try:
            return await self.log.client.subscribe(demand_subject(self.log.stream), cb=heard)
        except Exception:
            # Readers elsewhere then wait up to the linger (they poll the tracking rows).
            logger.warning(
                "projector %s cannot hear readers elsewhere", self.durable, exc_info=True
            )
            return None

    async def _consume(self, puller: Puller) -> None:
        fetch = puller.pull if self.standing_pull else puller.fetch
        try:
            await self._consume_from(fetch)
        finally:
            await self._ack_pending()

    def _own(self, seq: int, msg: Msg) -> object | None:
        """The domain event of an own write delivered at ``seq`` (see :attr:`own_event`)."""
        if self.own_event is None:
            return None
        event = self.own_event(seq, msg.data)
        if event is not None:
            self.reused_events += 1
        return event

    async def _check_no_gap(self, first: int) -> None:
        """Make sure the consumer skipped no event of ours before ``first``: deliveries in
        flight when its leader moved to another server come again only after the ack wait,
        and acknowledging a later one (AckPolicy.ALL) would acknowledge them unapplied. When it
        did, the consumer is made anew at the first event not applied.

        Raises:
            ReadModelRewound: it skipped some (this projector binds again).
        """
        expected = self._committed + 1
        if first <= expected:
            return
        entries, _ = await self.log.read_batch(self.filter_subject, expected, batch=1)
        # A replica holding nothing of ours from ``expected`` on, though ``first`` is ours,
        # is behind the leader (direct gets are answered by any replica): the leader tells.
        found = (
            entries[0].seq if entries else await self.log.next_seq(self.filter_subject, expected)
        )
        if found is None or found >= first:
            return  # nothing of ours in between (other subjects, or erased events)
        logger.warning(
            "projector %s: its consumer delivered %d before %d (deliveries lost when its "
            "leader moved?); making it anew from %d",
            self.durable,
            first,
            found,
            expected,
        )
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await self.log.js.delete_consumer(self.log.stream, self.durable)
        raise ReadModelRewound(f"consumer skipped events from {found}")

    async def _ack_pending(self) -> None:
        """Acknowledge the last committed message, if that is still to be done."""
        unacked, self._unacked = self._unacked, None
        if unacked is not None:
            self._acked_at = time.monotonic()
            with contextlib.suppress(Exception):  # not acknowledged: redelivered, then skipped
                await unacked.ack()  # AckPolicy.ALL: acknowledges everything before it too

    async def _consume_from(self, fetch: Any) -> None:
        while not self._stopping.is_set():
            if self._damage is not None:
                raise ReadModelRewound(f"read model damaged ({self._damage})")
            if self._reconnected():
                raise ReadModelRewound("NATS reconnected: checking the copy against the log")
            try:
                msgs: list[Msg] = await fetch(self.batch_size, timeout=0.5)
            except (TimeoutError, nats.errors.TimeoutError):
                await self._ack_pending()
                continue
            if not msgs:
                continue
            await self._check_no_gap(stream_sequence(msgs[0]))
            self._batch_done = done = asyncio.Event()
            # No writer's events are held from now until the batch is applied, unless their
            # commit covers it (hold_own).
            self._waiting_for = stream_sequence(msgs[-1])
            try:
                if len(msgs) < self.batch_size and self.linger > 0:
                    msgs += await self._linger(fetch, self.batch_size - len(msgs))
                    self._waiting_for = stream_sequence(msgs[-1])
                await self._wait_for_hold(self._waiting_for)
                self.flush()  # own events in the open transaction: committed, or dropped
                # A reader here may have had its own events applied meanwhile (apply_own).
                entries = [
                    LogEntry(seq, m.subject, m.data, dict(m.headers or {}), self._own(seq, m))
                    for m in msgs
                    if (seq := stream_sequence(m)) > self._committed
                ]
                self.stats.skipped += len(msgs) - len(entries)
                if entries:
                    started = time.perf_counter()
                    if tracing():
                        with batch_span(
                            self.durable,
                            [e.headers for e in entries],
                            entries[0].seq,
                            entries[-1].seq,
                        ):
                            seq = await self._apply_with_retry(entries)
                    else:
                        seq = await self._apply_with_retry(entries)
                    self.stats.timed(time.perf_counter() - started)
                    self._committed = self._durable = seq
                    if self.on_commit:
                        self.on_commit(seq)
                # Also when its events were applied already (for a reader here): a delivery
                # that is redelivered after a crash comes here again.
                purges = [
                    LogEntry(stream_sequence(m), m.subject, m.data, dict(m.headers or {}))
                    for m in msgs
                    if is_purge_record(m.subject)
                ]
                if purges:
                    await forget_erased_while_projecting(
                        self.log, self.store, purges, self._store_alone, self.durable
                    )
            finally:
                self._waiting_for = 0
                self._batch_done = None
                done.set()
            self._unacked = msgs[-1]
            if (
                not self.standing_pull
                or len(msgs) >= ACK_AT_ONCE
                or time.monotonic() - self._acked_at >= ACK_INTERVAL
            ):
                await self._ack_pending()

    @contextlib.asynccontextmanager
    async def _store_alone(self) -> AsyncIterator[ReadModelStore]:
        """The store to itself: no own events held or open, and lent to no reader, while the
        block runs (the open group is committed first, waiting at most FORGET_WAIT for a hold).

        Raises:
            TimeoutError: own events were held for longer.
        """
        deadline = time.monotonic() + FORGET_WAIT
        while not self.flush() or self.own.held is not None or self.own.open:
            if time.monotonic() >= deadline:
                raise TimeoutError("own events were held for too long")
            await asyncio.sleep(GROUP_SECONDS)
        self._applying = True  # nothing is held or applied here meanwhile
        try:
            yield self.store
        finally:
            self._applying = False

    async def _linger(self, fetch: Any, room: int) -> list[Msg]:
        """Gather more of a burst before committing, unless a reader is waiting.

        Committing events one by one costs a transaction (and an FTS5 segment) each, and
        fetching them one by one a pull request and a delivery each, all competing with the
        writers for the CPU: lingering turns a burst into one batch. A reader waiting for more
        than is committed, in this process or elsewhere (:class:`Demand`), cuts it short, so
        read-your-writes latency does not pay for it.
        """
        demand = self.demand
        if demand is None or demand.pressing(self._committed) or self._stopping.is_set():
            return []
        demand.event.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.linger):
                while not demand.pressing(self._committed) and not self._stopping.is_set():
                    await demand.event.wait()
                    demand.event.clear()
        if demand.pressing(self._committed) or self._stopping.is_set():
            return []  # a reader arrived: commit now (fetching more would cost it ~1 ms)
        try:
            more: list[Msg] = await fetch(room, timeout=0.001)
        except (TimeoutError, nats.errors.TimeoutError):
            return []
        return more

    async def _apply(self, entries: Sequence[LogEntry]) -> int:
        self._applying = True
        try:
            return await self._apply_batch(entries)
        finally:
            self._applying = False

    async def _apply_batch(self, entries: Sequence[LogEntry]) -> int:
        """Apply a batch (:meth:`ReadModelStore.steps`), letting the event loop run between
        events while no reader waits for the batch.

        A lingering projector's batch holds a few hundred events: applied at once, it would
        hold up a writer in this process for all of it (the tail of its append latency:
        bench/RESULTS.md, 'sequential append_message, each awaited', p99.9); applied in
        slices of :data:`APPLY_SLICE`, the writer waits for one slice at most. A waiting reader
        gets the rest of the batch at full speed.

        A projector made ``in_thread`` (the indexer: its model computes) applies every batch
        in a worker thread. Otherwise, a batch of a few big events (at most
        :data:`THREAD_EVENTS` holding at least
        :data:`THREAD_BYTES`, such as one ``append_messages`` of hundreds of messages), or of
        more events that hold :data:`THREAD_EVENT_BYTES` on average, is applied
        in a worker thread instead: the database driver (SQLite's) releases the GIL while it
        works, so the projection runs beside this process's writers on another core.
        """
        if self.in_thread:
            return await self._apply_in_thread(entries)
        size = sum(len(e.payload) for e in entries) if self.thread_bytes else 0
        if (
            self.thread_bytes
            and size >= self.thread_bytes
            and (len(entries) <= self.thread_events or size >= len(entries) * THREAD_EVENT_BYTES)
        ):
            return await self._apply_in_thread(entries)
        steps = self.store.steps(
            entries,
            self.stats,
            committed=self._committed,  # someone may have dropped it to rebuild it
            wait=False,
        )
        demand = self.demand
        slice_end = time.perf_counter() + APPLY_SLICE
        try:
            try:
                result = step(steps)
            except StoreBusy:
                # Another connection (a worker of another process, a thread) writes: wait for
                # its lock in a thread, not in SQLite's busy handler on the event loop.
                self.busy_batches += 1
                return await self._apply_in_thread(entries)
            while result is None:
                pausing = demand is not None and not demand.pressing(self._committed)
                if pausing and time.perf_counter() >= slice_end:
                    await asyncio.sleep(0)
                    slice_end = time.perf_counter() + APPLY_SLICE
                result = step(steps)
            return result
        finally:
            steps.close()  # rolls back a batch left unfinished (stopped in the middle)

    async def _apply_in_thread(self, entries: Sequence[LogEntry]) -> int:
        future = asyncio.ensure_future(
            asyncio.to_thread(self.store.apply, entries, self.stats, committed=self._committed)
        )
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            # The thread cannot be stopped half way: let its transaction end before anyone may
            # close the store.
            with contextlib.suppress(Exception):
                await future
            raise

    async def _apply_with_retry(self, entries: Sequence[LogEntry]) -> int:
        delay = FIRST_RETRY_DELAY
        while True:
            if self._damage is not None or self.store.replaced():  # one stat a batch
                raise ReadModelRewound("read model damaged or replaced")
            try:
                return await self._apply(entries)
            except ReadModelRewound:
                raise
            except Exception as error:
                if self._note_damage(error):
                    raise ReadModelRewound(f"read model damaged ({error})") from error
                self.stats.transient_failures += 1
                if delay <= FIRST_RETRY_DELAY:
                    # Usually transient (another process held the write lock past the busy
                    # timeout): one line; a batch that fails again is logged with its traceback.
                    logger.warning(
                        "projector %s: batch failed (%s: %s); retrying in %.2fs",
                        self.durable,
                        type(error).__name__,
                        error,
                        delay,
                    )
                else:
                    logger.exception(
                        "projector %s: batch failed again; retrying in %.2fs", self.durable, delay
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                self._hold_lock()

    def _hold_lock(self) -> None:
        """Take the copy's projector locks again if they were lost (a PostgreSQL server that
        restarted freed them with its connections): else a second projector could start.

        Raises:
            ProjectorRunningError: another projector took them meanwhile (this one stops).
        """
        lock = self.lock
        if lock is None or self._reclaim is None or lock.held:
            return
        try:
            fresh = self._reclaim()
        except ProjectorRunningError:
            raise
        except MemstreamError as error:  # the database is still away: tried after each failure
            logger.warning("projector %s cannot take its copy's locks yet: %s", self.durable, error)
            return
        logger.warning(
            "projector %s lost the locks of its read-model copy (its database restarted?); "
            "took them again",
            self.durable,
        )
        lock.release()
        self.lock = fresh


def _connection_number(log: EventLog) -> int:
    """How many times the log's client has reconnected (0 for a client that does not say)."""
    return int(getattr(log.client, "connection_number", 0))
