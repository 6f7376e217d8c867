"""The workers a client runs in its own process: the projector, the indexer, the analytics
worker and the extractor (the embedded default, or ``connect(workers=True)``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from functools import partial
from typing import Any

from memstream.domain.errors import MemstreamError, ProjectionLagError, UnavailableError
from memstream.home_loop import home_loop_methods
from memstream.llm_extractor import extractor_from_settings
from memstream.projections.ports import ReadModelCopy
from memstream.projections.registry import (
    ANALYTICS_PROJECTIONS,
    INDEXER_PROJECTIONS,
    PROJECTOR_PROJECTIONS,
)
from memstream.projections.tracking import TrackingRows
from memstream.read_your_writes import ReadYourWrites
from memstream.settings import Settings
from memstream.workers.extractor import ExtractorWorker
from memstream.workers.indexer import LazyEncoder
from memstream.workers.log.event_log import EventLog
from memstream.workers.own_writes import OwnWrites
from memstream.workers.projector import DEFAULT_LINGER, ProjectorWorker
from memstream.workers.runtime.embedded import EmbeddedRuntime

logger = logging.getLogger(__name__)

# How long the in-process projector gathers a burst of writes before committing it.
PROJECTOR_LINGER = DEFAULT_LINGER
# How long opening a client with workers waits for their durable consumers.
WORKERS_BOUND_SECONDS = 5.0
# The analytics worker gathers up to this long per transaction: nothing but ``stats`` and
# ``verify`` reads its volumes, and a reader of them (here, or elsewhere through its nudge) cuts
# the lingering short. A burst of writes then pays for its volumes once a second, not 20 times
# (each transaction of a second writer also makes the projector read its positions again).
ANALYTICS_LINGER = 1.0
# How long a clean close waits for its own projector to project this client's writes.
CLOSE_DRAIN_SECONDS = 5.0


@home_loop_methods(lambda part: part.loop)
class LocalWorkers:
    """The workers of this process, reporting their commits to the client's
    read-your-writes (``ryw``) and taking its own writes as decided (``own``)."""

    def __init__(
        self,
        settings: Settings,
        log: EventLog,
        copy: ReadModelCopy,
        runtime: EmbeddedRuntime | None,
        ryw: ReadYourWrites,
        own: OwnWrites,
        encoder: LazyEncoder,
    ) -> None:
        # The loop it was made on: a call made on another runs there (see home_loop).
        self.loop = asyncio.get_running_loop()
        self.settings = settings
        self.log = log
        self.copy = copy
        self.runtime = runtime
        self.ryw = ryw
        self.own = own
        self.encoder = encoder
        self.projector: ProjectorWorker | None = None
        self.indexer: ProjectorWorker | None = None
        self.analytics: ProjectorWorker | None = None
        self.extractor: ExtractorWorker | None = None
        self._watchdog: asyncio.Task[None] | None = None

    def pushed(self, projection: str) -> bool:
        """Whether a projector of this process reports ``projection``'s commits to the readers
        here."""
        for projector in (self.projector, self.indexer, self.analytics):
            if (
                projector is not None
                and projector.running
                and projection in projector.store.projections
            ):
                return True
        return False

    def local(self) -> bool:
        """Whether the projector runs in this process."""
        return self.projector is not None

    def _embed(self) -> Any:
        """The model as the extractor's prototype classifier calls it (loaded now if need be)."""
        from memstream.workers.embeddings import as_embed

        return as_embed(self.encoder.embedder())

    def start(self) -> None:
        """Run the workers in this process: the projector, the indexer (its model is loaded
        when the first text to embed arrives) and the extractor."""
        if self.projector is not None:
            return
        ryw = self.ryw
        partitions = ryw.partitions
        self.projector = ProjectorWorker.open(
            self.log,
            self.copy,
            PROJECTOR_PROJECTIONS,
            on_commit=ryw.projected,
            demand=ryw.demand,
            linger=PROJECTOR_LINGER,
            own_event=self.own.own_event,
            # Of a partitioned stream: every partition, each tracked (see TrackingRows).
            rows=TrackingRows(partitions, frozenset(range(partitions))) if partitions else None,
        )
        self.own.projector = self.projector
        self.projector.start()
        try:
            self.indexer = ProjectorWorker.open(
                self.log,
                self.copy,
                INDEXER_PROJECTIONS,
                encoder=self.encoder,
                on_commit=partial(ryw.advance, INDEXER_PROJECTIONS),
                batch_size=256,
            )
        except MemstreamError as error:  # e.g. an indexer runs for this copy elsewhere
            logger.warning("not indexing %s here: %s", self.settings.data_dir, error)
        else:
            self.indexer.start()
        try:
            self.analytics = ProjectorWorker.open(
                self.log,
                self.copy,
                ANALYTICS_PROJECTIONS,
                on_commit=partial(ryw.advance, ANALYTICS_PROJECTIONS),
                batch_size=1000,
                demand=ryw.analytics_demand,  # readers of sessions never wait for it
                linger=ANALYTICS_LINGER,
            )
        except MemstreamError as error:  # e.g. an analytics worker runs for this copy elsewhere
            logger.warning("not counting analytics of %s here: %s", self.settings.data_dir, error)
        else:
            self.analytics.start()
        self.extractor = ExtractorWorker(
            self.log, extractor_from_settings(self.settings), embed=self._embed
        )
        self.extractor.start()

    async def bound(self, timeout: float = WORKERS_BOUND_SECONDS) -> None:
        """Wait (at most ``timeout``) until the projector and the analytics worker of this
        process have their durable consumers: from then on the copy is known to be projected
        by them (``projections verify`` counts analytics for it). Without NATS they keep
        trying in the background; this returns at the timeout."""
        workers = [w for w in (self.projector, self.analytics) if w is not None]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(worker.bound.wait() for worker in workers)), timeout
            )

    def watch_ownership(self, run_workers: bool, interval: float = 0.5) -> None:
        """As a guest of another process's embedded server, take it over when that owner
        exits: restart the server from the same store on the same port (the NATS client
        reconnects by itself) and, if ``run_workers``, run the workers here from then on."""
        runtime = self.runtime
        if runtime is None or runtime.owner or self._watchdog is not None:
            return

        async def watch() -> None:
            while True:
                try:
                    if await asyncio.to_thread(runtime.try_take_over):
                        break
                except Exception as error:  # e.g. the server did not start: keep watching
                    logger.warning("cannot take over the embedded NATS server: %s", error)
                await asyncio.sleep(interval)
            logger.info("took over the embedded NATS server of %s", runtime.data_dir)
            if run_workers:
                try:
                    self.start()
                except MemstreamError as error:  # e.g. a projector runs for this copy already
                    logger.warning("not projecting %s here: %s", runtime.data_dir, error)

        self._watchdog = asyncio.create_task(watch(), name="memstream-ownership")

    async def _project_own_writes(self) -> None:
        """Before the projector of this process stops: let it project this client's writes, so
        that the next process reads them at once (bounded; a later projector would anyway)."""
        ryw = self.ryw
        timeout = min(self.settings.read_timeout, CLOSE_DRAIN_SECONDS)
        for name, watch in ryw.positions.items():
            if name in ANALYTICS_PROJECTIONS:
                continue  # volumes: the next analytics worker of the copy counts what is left
            last = ryw.last_profile_seq if name in INDEXER_PROJECTIONS else ryw.last_write_seq
            try:
                await watch.wait_for(last, timeout)
            except (ProjectionLagError, UnavailableError):  # lagging, or its database away
                logger.warning(
                    "closing before projection %s reached this client's last write %d; "
                    "the next projector of %s will project it",
                    name,
                    ryw.last_write_seq,
                    self.settings.data_dir,
                )
                return

    async def close(self) -> None:
        """Stop watching the embedded server's owner, and stop the workers (the projector after
        it projected this client's writes)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            # A take-over whose projector failed to start must not keep us from releasing.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watchdog
            self._watchdog = None
        if self.projector is None:
            return
        await self._project_own_writes()
        if self.extractor is not None:
            await self.extractor.close()
            self.extractor = None
        if self.indexer is not None:
            await self.indexer.close()
            self.indexer = None
        if self.analytics is not None:
            await self.analytics.close()
            self.analytics = None
        await self.projector.close()
        self.projector = None
        self.own.projector = None


__all__ = ["LocalWorkers"]
