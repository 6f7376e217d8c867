"""Read-your-writes: wait until a read model has processed a given stream sequence."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from memstream.domain.errors import ProjectionLagError

POLL_MIN = 0.0005
POLL_MAX = 0.01


class Demand:
    """Whether any reader in this process is waiting for a projection (shared by the watches
    of one projector, so that a waiting reader cuts the projector's lingering short)."""

    def __init__(self) -> None:
        self.waiters = 0
        self.event = asyncio.Event()  # set while someone waits

    def enter(self) -> None:
        self.waiters += 1
        self.event.set()

    def leave(self) -> None:
        self.waiters -= 1
        if not self.waiters:
            self.event.clear()


class PositionWatch:
    """Tracks how far a projection got; waiters are woken by the in-process projector's commits
    or, when the projector runs elsewhere, by polling its tracking row."""

    def __init__(
        self, projection: str, read_position: Callable[[], int], demand: Demand | None = None
    ) -> None:
        self.projection = projection
        self._read_position = read_position
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

    async def _wait(self, seq: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        delay = POLL_MIN
        while seq > self._position:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProjectionLagError(self.projection, seq, self._position, timeout)
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), min(remaining, delay))
            except TimeoutError:
                self.advance(self._read_position())
                delay = min(delay * 2, POLL_MAX)
