"""Read-your-writes: wait until a read model has processed a given stream sequence."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from memstream.domain.errors import ProjectionLagError

POLL_MIN = 0.0005
POLL_MAX = 0.01


class PositionWatch:
    """Tracks how far a projection got; waiters are woken by the in-process projector's commits
    or, when the projector runs elsewhere, by polling its tracking row."""

    def __init__(self, projection: str, read_position: Callable[[], int]) -> None:
        self.projection = projection
        self._read_position = read_position
        self._position = 0
        self._changed = asyncio.Event()
        self._waiters = 0
        self.demand = asyncio.Event()  # set while someone waits for a position

    @property
    def position(self) -> int:
        return self._position

    @property
    def waiting(self) -> bool:
        """True while a reader in this process waits for the projection to advance."""
        return self._waiters > 0

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
        self._waiters += 1
        self.demand.set()
        try:
            await self._wait(seq, timeout)
        finally:
            self._waiters -= 1
            if not self._waiters:
                self.demand.clear()

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
