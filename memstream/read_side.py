"""The read side of a client: the read-model copy it reads, and what it does when that copy is
damaged, replaced, or ahead of the log."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import NoReturn

from memstream.domain.errors import ReadModelAheadError, ReadModelDamagedError
from memstream.home_loop import home_loop_methods
from memstream.projections.ports import (
    REBUILD_HINT,
    ContextQueries,
    MemoryQueries,
    ReadModelCopy,
    ReadModels,
    ReadModelStore,
    SessionQueries,
)
from memstream.settings import Settings
from memstream.workers.log.event_log import EventLog
from memstream.workers.log.log_position import LogGap, check_copy
from memstream.workers.projector import ProjectorWorker
from memstream.workers.runtime.embedded import EmbeddedRuntime

logger = logging.getLogger(__name__)

# How often a client waits to see a copy ahead of the log rebuilt by its owner.
AHEAD_POLL_SECONDS = 0.2


@home_loop_methods(lambda part: part.loop)
class ReadSide:
    """The read models a client reads (:attr:`read_models`: one copy, SQLite or PostgreSQL).

    A read that meets damage has the projector of this process (``projector()``) replace the
    copy, or says which command does; a copy replaced meanwhile (by that projector, another
    process or a rebuild) is followed at the next read, and each of :attr:`on_replaced` is
    called then.
    """

    def __init__(
        self,
        settings: Settings,
        log: EventLog,
        copy: ReadModelCopy,
        runtime: EmbeddedRuntime | None,
        projector: Callable[[], ProjectorWorker | None],
        *,
        check: bool = False,
    ) -> None:
        # The loop it was made on: a call made on another runs there (see home_loop).
        self.loop = asyncio.get_running_loop()
        self.settings = settings
        self.log = log
        self.copy = copy
        self.runtime = runtime
        self._projector = projector
        # Called after the copy was replaced (what was restored from the old copy goes).
        self.on_replaced: list[Callable[[], None]] = []
        # The copy was ahead of the log when this client opened it (see check_against_log).
        self.found_ahead: LogGap | None = None
        self._read(self._open(check=check))

    def _read(self, read_models: ReadModels) -> None:
        self.read_models = read_models
        self.session_queries: SessionQueries = read_models.sessions
        self.context_queries: ContextQueries = read_models.context

    @property
    def memory_queries(self) -> MemoryQueries:
        return self.read_models.memory

    @property
    def copy_id(self) -> str:
        """The id of the read-model copy this client reads (kept inside it)."""
        return self.read_models.copy_id()

    def _idle_store(self) -> ReadModelStore | None:
        """The in-process projector's store while it is idle: reads may go through it (its
        caches are warm, where the reader's are dropped by each of the projector's commits)."""
        projector = self._projector()
        return None if projector is None else projector.idle_store()

    def _open(self, *, check: bool = False) -> ReadModels:
        return self.copy.reader(on_damage=self.damaged, lender=self._idle_store, check=check)

    def reopen_if_replaced(self) -> None:
        """Read the new file once a damaged read model was replaced (by the projector here or
        elsewhere, or a rebuild): one ``stat`` per read."""
        if not self.read_models.replaced():
            return
        old = self.read_models
        self._read(self._open())
        for replaced in self.on_replaced:
            replaced()
        old.close()
        logger.info("reading the replaced read model %s", self.copy.location)

    def tracked_seq(self, projection: str) -> int:
        # A waiting reader polls this: it follows the file the projector replaced meanwhile
        # (the old one would never advance again).
        self.reopen_if_replaced()
        try:
            return self.read_models.tracked_seq(projection)
        except ReadModelDamagedError as error:
            self.damaged(error)

    def tracked_partitions(self, projection: str) -> dict[int, int]:
        self.reopen_if_replaced()
        try:
            return self.read_models.tracked_partitions(projection)
        except ReadModelDamagedError as error:
            self.damaged(error)

    def damaged(self, error: ReadModelDamagedError) -> NoReturn:
        """A read met damage: have the projector of this process replace the copy, or say how."""
        path = self.copy.location
        if self.report_damage(error):
            raise ReadModelDamagedError(
                f"read model {path} is damaged ({error.reason}); this process moves it aside "
                "and rebuilds it from the log: retry in a moment",
                reason=error.reason,
            ) from error
        raise ReadModelDamagedError(
            f"read model {path} is damaged ({error.reason}); {REBUILD_HINT}", reason=error.reason
        ) from error

    def report_damage(self, error: ReadModelDamagedError) -> bool:
        """Tell the projector of this process (if any: True) that the read model is damaged."""
        projector = self._projector()
        if projector is None:
            return False
        projector.report_damage(error.reason, self.read_models.identity)
        return True

    async def check_against_log(self, *, healer: bool, refuse: bool = True) -> None:
        """Refuse to serve a read-model copy ahead of the log (the log lost or replaced its
        tail: :mod:`memstream.workers.log.log_position`). A SQLite copy is moved aside and rebuilt
        by the projector of the process that owns it: that is this one when ``healer``, else
        this waits (up to the read timeout) for the owner to do it. A shared copy (PostgreSQL)
        is never replaced by a client. What was found stays in :attr:`found_ahead`;
        ``refuse=False`` only finds it (for the commands that report or mend it).

        Raises:
            ReadModelAheadError: the copy is ahead of the log (and was not rebuilt in time).
        """
        gap = self.found_ahead = await check_copy(self.log, self.read_models.marks())
        if gap is None or not refuse:
            return
        location = self.copy.location
        if self.settings.database_url is not None:
            raise ReadModelAheadError(gap.refusal(location))
        if healer:
            return  # this process's projector checks it before it binds, and rebuilds it
        if self.runtime is None or self.runtime.owner:
            # No other process here runs its projector (a worker elsewhere may: it rebuilds it)
            raise ReadModelAheadError(gap.refusal(location))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.read_timeout
        while loop.time() < deadline:
            await asyncio.sleep(AHEAD_POLL_SECONDS)
            self.reopen_if_replaced()
            gap = await check_copy(self.log, self.read_models.marks())
            if gap is None:
                return
        raise ReadModelAheadError(gap.refusal(location))

    def close(self) -> None:
        self.read_models.close()


__all__ = ["ReadSide"]
