"""Read-your-writes: what a client's reads wait for, and the waiting.

Every read waits until the read model it reads has this client's last write and everything the
log held when this client connected (:attr:`ReadYourWrites.read_floor`); on a partitioned
stream, each partition for its own part. The projectors of this process report their commits
(:meth:`ReadYourWrites.advance`); readers of a projector in another process poll its tracking
rows and tell it they wait (its lingering is cut short).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from functools import partial

from nats.aio.client import Client

from memstream.home_loop import home_loop_methods
from memstream.projections.registry import (
    ANALYTICS_PROJECTIONS,
    PARTITIONABLE,
    PROJECTIONS,
    PROJECTOR_PROJECTIONS,
)
from memstream.read_side import ReadSide
from memstream.settings import Settings
from memstream.workers.log.event_log import EventLog
from memstream.workers.log.subjects import demand_subject, partition_of, subject_for
from memstream.workers.own_writes import OwnWrites
from memstream.workers.position import Demand, JointDemand, PositionWatch, encode_demand


@home_loop_methods(lambda part: part.loop)
class ReadYourWrites:
    """The positions a client's reads wait for (see the module's docstring).

    ``pushed(projection)``: whether a projector of this process reports ``projection``'s
    commits (else its tracking rows are polled); ``local()``: whether the projector runs here
    (then no other process need be told that a reader waits).
    """

    def __init__(
        self,
        settings: Settings,
        nats: Client,
        log: EventLog,
        reads: ReadSide,
        own: OwnWrites,
        pushed: Callable[[str], bool],
        local: Callable[[], bool],
    ) -> None:
        # The loop it was made on: a call made on another runs there (see home_loop).
        self.loop = asyncio.get_running_loop()
        self.settings = settings
        self.nats = nats
        self.log = log
        self.reads = reads
        self.own = own
        self._pushed = pushed
        self._local = local
        self.demand = Demand()
        # The analytics worker's: only readers of volumes cut its (long) lingering short. They
        # press the projector too: a purge or status elsewhere reads this copy's progress from
        # its consumers' acknowledgements, which the projector sends as it commits.
        self.analytics_demand = JointDemand(self.demand)
        self.positions = self._watch_positions()
        reads.on_replaced.append(self._rewatch)
        self.last_write_seq = 0
        self.last_profile_seq = 0  # this client's last Agent Memory write
        # The log's end when this client connected: reads see at least that much (what earlier
        # processes wrote), as well as this client's own writes.
        self.connected_seq = 0
        # On a partitioned stream (see TrackingRows): how many partitions, each partition's
        # last event when this client connected, and this client's last write to each.
        self.partitions = 0
        self.connected_partitions: dict[int, int] = {}
        self.own_partitions: dict[int, int] = {}

    def _watch_positions(self) -> dict[str, PositionWatch]:
        return {
            name: PositionWatch(
                name,
                partial(self.reads.tracked_seq, name),
                self.analytics_demand if name in ANALYTICS_PROJECTIONS else self.demand,
                self._nudge,
                pushed=partial(self._pushed, name),
                read_partitions=partial(self.reads.tracked_partitions, name),
            )
            for name in PROJECTIONS
        }

    def _rewatch(self) -> None:
        self.positions = self._watch_positions()  # a new file starts again from 0

    def stored(self, subject: str) -> str:
        """``subject`` as the stream stores it (with its partition, on a partitioned stream)."""
        if not self.partitions:
            return subject
        return f"{subject}.{partition_of(subject, self.partitions)}"

    def wrote(self, subject: str, seq: int) -> None:
        """Remember this client's write to ``subject`` at ``seq``, for its reads to wait for."""
        if seq > self.last_write_seq:
            self.last_write_seq = seq
        if self.partitions:
            partition = partition_of(subject, self.partitions)
            if seq > self.own_partitions.get(partition, 0):
                self.own_partitions[partition] = seq

    def wrote_profile(self, seq: int) -> None:
        self.last_profile_seq = max(self.last_profile_seq, seq)

    @property
    def read_floor(self) -> int:
        """The stream sequence every read waits for: this client's last write, or the log's end
        when it connected if that is later."""
        return max(self.last_write_seq, self.connected_seq)

    def partition_targets(self) -> dict[int, int]:
        """What a read waits for in each partition of a partitioned stream: the partition's
        last event when this client connected or this client's last write to it, whichever
        is later (read-your-writes and the log as of connect)."""
        targets: dict[int, int] = {}
        for partition in range(self.partitions):
            target = max(
                self.connected_partitions.get(partition, 0),
                self.own_partitions.get(partition, 0),
            )
            if target:
                targets[partition] = target
        return targets

    async def _partition_targets_upto(self, seq: int) -> dict[int, int]:
        """What a wait for everything up to ``seq`` waits for in each partition: its last
        event up to ``seq``, or ``seq`` itself where the partition has later events (its row
        passes ``seq`` only once every event of it up to ``seq`` is applied). Each partition's
        end is asked of the log, unless the ends at connect cover ``seq``."""
        if seq <= self.connected_seq:
            ends = self.connected_partitions
        else:
            ends = await self.log.partition_ends()
        return {partition: min(end, seq) for partition, end in ends.items() if end}

    async def wait_for(self, projection: str, seq: int | None = None) -> None:
        """Wait until ``projection`` has committed this client's last write (or ``seq``) and
        everything the log held when this client connected.

        Raises:
            ProjectionLagError: not reached within the read timeout.
            ReadModelDamagedError: the read model is damaged (and being rebuilt, when this
                process runs the projector).
        """
        await self._wait(projection, seq, uncommitted=False)

    async def wait_to_read(
        self, projection: str, seq: int | None = None, *, subject: str | None = None
    ) -> None:
        """:meth:`wait_for`, for a read through this client's read models that follows at
        once: it may see its client's own writes before they are committed (in the open
        transaction of the projector here, which it then reads through). ``subject``: the read
        concerns only the rows of that aggregate (on a partitioned stream it waits for that
        aggregate's partition alone).
        """
        await self._wait(projection, seq, uncommitted=True, subject=subject)

    async def _wait(
        self, projection: str, seq: int | None, *, uncommitted: bool, subject: str | None = None
    ) -> None:
        self.reads.reopen_if_replaced()
        own = self.own
        own.read_since_write = True
        target = self.read_floor if seq is None else max(seq, self.connected_seq)
        watch = self.positions[projection]
        if target > watch.position and own.before_read(
            projection, target, uncommitted=uncommitted, lent=self.reads.read_models.lent
        ):
            return  # read through the projector's transaction, which has them
        if self.partitions and projection in PARTITIONABLE and target > watch.position:
            # Partitions are projected apart: each must reach its own target (one without
            # new events never holds a read up), unless this process projects them all.
            if seq is None:
                targets = self.partition_targets()
            else:
                targets = await self._partition_targets_upto(target)
            if subject is not None:
                partition = partition_of(subject, self.partitions)
                targets = {p: t for p, t in targets.items() if p == partition}
            await watch.wait_for_partitions(targets, target, self.settings.read_timeout)
            return
        await watch.wait_for(target, self.settings.read_timeout)

    async def sync(self, projection: str) -> None:
        """Wait until ``projection`` has every event committed before this call (not only this
        client's): what a fresh process such as a CLI command needs before it reads.

        Raises:
            ProjectionLagError: not reached within the read timeout (no projector running?).
        """
        if self.partitions and projection in PARTITIONABLE:
            for partition, end in (await self.log.partition_ends()).items():
                if end > self.connected_partitions.get(partition, 0):
                    self.connected_partitions[partition] = end
        await self.wait_for(projection, max(self.last_write_seq, await self.log.stream_last_seq()))

    async def wait_for_profile(
        self,
        namespace: str,
        profile: str,
        seq: int | None = None,
        timeout: float | None = None,
    ) -> None:
        """Wait until the ``vectors`` projection has the profile's events up to ``seq`` (or
        all of them: its subject's last one now), within ``timeout`` (default: the read
        timeout). The indexer sees Agent Memory events only, so its position is never the
        stream's end.

        Raises:
            ProjectionLagError: not reached within the read timeout.
        """
        self.reads.reopen_if_replaced()
        if seq is None:
            subject = subject_for(self.log.subject_prefix, namespace, "profile", profile)
            seq = await self.log.last_seq(subject)
        await self.positions["vectors"].wait_for(seq, timeout or self.settings.read_timeout)

    async def _nudge(self, seq: int, partitions: Mapping[int, int] | None = None) -> None:
        """Tell the projectors of other processes that a reader here waits for ``seq`` (in
        each of ``partitions``, their targets), so that they stop lingering; the projector in
        this process sees its readers without this."""
        if self._local():
            return
        signal = encode_demand(seq, partitions)
        with contextlib.suppress(Exception):  # best effort: the reader polls regardless
            await self.nats.publish(demand_subject(self.log.stream), signal)

    def advance(self, projections: tuple[str, ...], seq: int) -> None:
        """A projector of this process committed ``projections`` up to ``seq`` (the lowest
        position over them)."""
        for name in projections:
            self.positions[name].advance(seq)

    def projected(self, seq: int) -> None:
        """The projector of this process committed up to ``seq``."""
        self.advance(PROJECTOR_PROJECTIONS, seq)
        self.own.projected(seq)


__all__ = ["ReadYourWrites"]
