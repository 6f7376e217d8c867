"""Read-your-writes: wait until a read model has processed a given stream sequence."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping

from memstream.domain.errors import ProjectionLagError

POLL_MIN = 0.0005
POLL_MAX = 0.01
# How often a reader that polls positions (verify, purge) tells lingering projectors again
# what it waits for: a signal may be lost.
NUDGE_SECONDS = 0.5
# A demand signal longer than this is not read (1,024 partitions' targets fit in ~25 KiB).
DEMAND_MAX_BYTES = 64 * 1024

# What a reader waits for, as it tells projectors elsewhere over NATS: ``nudge(seq)``, or on a
# partitioned stream ``nudge(seq, targets)`` with each partition's own target.
Nudge = Callable[[int, Mapping[int, int] | None], Awaitable[None]]


def encode_demand(seq: int, partitions: Mapping[int, int] | None = None) -> bytes:
    """The demand signal of a reader waiting for ``seq``: ``b"<seq>"``, followed on a
    partitioned stream by the partitions it waits for with their targets
    (``b"<seq> <p>:<target>,<p>:<target>"``)."""
    if not partitions:
        return str(seq).encode()
    targets = ",".join(f"{p}:{t}" for p, t in sorted(partitions.items()))
    return f"{seq} {targets}".encode()


def wanted_by(data: bytes, partition: int | None) -> int | None:
    """The sequence a demand signal asks of the projector of ``partition`` (``None``: of the
    whole stream or of every partition): the signal's sequence, or where the signal names
    partitions, that partition's target (0 when it names others only: nothing of this
    partition is awaited). ``None`` for a signal that is not one (it is ignored).
    """
    if len(data) > DEMAND_MAX_BYTES:
        return None
    try:
        text = data.decode("ascii")
        head, separator, tail = text.partition(" ")
        seq = int(head)
        targets: dict[int, int] = {}
        if separator:
            for item in tail.split(","):
                p, colon, t = item.partition(":")
                if not colon:
                    return None
                targets[int(p)] = int(t)
    except ValueError:  # UnicodeDecodeError included
        return None
    if seq < 0 or any(p < 0 or t < 0 for p, t in targets.items()):
        return None
    if partition is None or not separator:
        return seq
    return targets.get(partition, 0)


class Demand:
    """Which readers wait for a projector, so that they cut its lingering short.

    Readers in the projector's process count themselves in (:meth:`enter`/:meth:`leave`);
    readers elsewhere (a guest process, a client of a separate worker) send the sequence they
    wait for over NATS, which the projector passes to :meth:`want`. :attr:`event` is set on
    each of these, to wake a lingering projector.
    """

    def __init__(self) -> None:
        self.waiters = 0
        self.wanted = 0  # the highest sequence a reader elsewhere asked for
        self.event = asyncio.Event()

    def enter(self) -> None:
        self.waiters += 1
        self.event.set()

    def leave(self) -> None:
        self.waiters -= 1

    def want(self, seq: int) -> None:
        if seq > self.wanted:
            self.wanted = seq
        self.event.set()

    def pressing(self, committed: int) -> bool:
        """Whether a reader waits for more than ``committed`` (the projector should commit)."""
        return self.waiters > 0 or self.wanted > committed


class JointDemand(Demand):
    """A demand whose readers are also readers of ``others``: waiting here cuts their
    lingering short too."""

    def __init__(self, *others: Demand) -> None:
        super().__init__()
        self.others = others

    def enter(self) -> None:
        super().enter()
        for other in self.others:
            other.enter()

    def leave(self) -> None:
        super().leave()
        for other in self.others:
            other.leave()


class PositionWatch:
    """Tracks how far a projection got; waiters are woken by the in-process projector's commits
    or, when the projector runs elsewhere, by polling its tracking row. ``nudge(seq, targets)``
    tells a projector elsewhere that a reader waits for ``seq`` (on a partitioned stream, for
    each partition's target: see :func:`encode_demand`); it is repeated at every poll (it may be
    lost, or reach a projector that was not listening yet)."""

    def __init__(
        self,
        projection: str,
        read_position: Callable[[], int],
        demand: Demand | None = None,
        nudge: Nudge | None = None,
        pushed: Callable[[], bool] | None = None,
        read_partitions: Callable[[], dict[int, int]] | None = None,
    ) -> None:
        self.projection = projection
        self._read_position = read_position
        self._read_partitions = read_partitions
        self._nudge = nudge
        # True while a projector in this process reports each commit (advance): waiting then
        # needs no nudge, and reads the tracking row only every POLL_MAX.
        self._pushed = pushed
        self._position = 0
        self._changed = asyncio.Event()
        self.demand = demand or Demand()

    @property
    def position(self) -> int:
        return self._position

    def advance(self, seq: int) -> None:
        """Called by the projector after a commit."""
        if seq > self._position:
            self._position = seq
            self._changed.set()
            self._changed = asyncio.Event()

    async def wait_for(self, seq: int, timeout: float) -> None:
        """Return once the projection reached ``seq``.

        Raises:
            ProjectionLagError: not reached within ``timeout`` seconds.
        """
        if seq <= self._position:
            return
        self.advance(self._read_position())
        if seq <= self._position:
            return
        self.demand.enter()
        try:
            await self._wait(seq, timeout)
        finally:
            self.demand.leave()

    async def wait_for_partitions(self, targets: dict[int, int], seq: int, timeout: float) -> None:
        """Return once each partition of a partitioned projection reached its target
        (``targets``), or the whole projection reached ``seq`` (a projector of every partition
        reports that: its partitions advance together).

        Raises:
            ProjectionLagError: not reached within ``timeout`` seconds.
        """
        if seq <= self._position or not targets:
            return
        self.demand.enter()
        try:
            deadline = time.monotonic() + timeout
            delay = POLL_MIN
            while True:
                positions = self._read_partitions() if self._read_partitions else {}
                if positions:
                    behind = {p: t for p, t in targets.items() if positions.get(p, 0) < t}
                    if not behind:
                        return
                    self.advance(min(positions.values()))
                else:  # not tracked by partition (yet): the projection's own row
                    self.advance(self._read_position())
                    behind = targets
                if seq <= self._position:
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    partition = min(behind)  # (its numbers: the first one behind)
                    raise ProjectionLagError(
                        self.projection,
                        behind[partition],
                        positions.get(partition, self._position),
                        timeout,
                    )
                if self._nudge is not None:
                    await self._nudge(max(behind.values()), behind)
                changed = self._changed
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(remaining, delay)):
                        await changed.wait()
                delay = min(delay * 2, POLL_MAX)
        finally:
            self.demand.leave()

    async def _wait(self, seq: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        delay = POLL_MIN
        while seq > self._position:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProjectionLagError(self.projection, seq, self._position, timeout)
            pushed = self._pushed is not None and self._pushed()
            if self._nudge is not None and not pushed:
                await self._nudge(seq, None)
            changed = self._changed
            try:
                # asyncio.timeout, not wait_for: no task per wait (this is on every read). A
                # pushed position is still read now and then (a rebuild elsewhere moves it too).
                async with asyncio.timeout(min(remaining, POLL_MAX if pushed else delay)):
                    await changed.wait()
            except TimeoutError:
                self.advance(self._read_position())
                delay = min(delay * 2, POLL_MAX)
