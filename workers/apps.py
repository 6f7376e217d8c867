"""FastStream worker apps: ``memstream worker projector`` as a ``NatsBroker`` service.

The app owns the process's NATS connection (the broker's, with reconnects), its life cycle and
its signal handling (``asyncio.run(app.run())`` stops on SIGINT/SIGTERM). The projection itself
is not a faststream subscriber: ``after_startup`` starts our :class:`ProjectorWorker` on the
broker's own nats-py client, an ordered fetch loop over a durable pull consumer, and
``on_shutdown`` stops it before the broker drains. faststream 0.7.8's batch ``PullSub`` keeps
fetching until the batch is full or its timeout passes, so a lone write would wait out that
timeout before it is projected: a floor under read-your-writes latency that our loop, which
applies whatever one fetch returned, does not have.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from faststream import FastStream
from faststream.nats import NatsBroker, NatsCredentials, NatsToken, NatsUserPassword
from faststream.security import BaseSecurity

from memstream.domain.errors import InvalidInputError
from memstream.projections.ports import CopyLock
from memstream.projections.read_models import open_read_models
from memstream.projections.registry import INDEXER_PROJECTIONS
from memstream.workers.extractor import ExtractorWorker
from memstream.workers.indexer import LazyEncoder
from memstream.workers.log.event_log import EventLog, nats_servers
from memstream.workers.partitioned import PartitionedProjector
from memstream.workers.position import Demand
from memstream.workers.projector import ProjectorWorker
from memstream.workers.runtime.nats_server import LIVENESS_PING_SECONDS, LIVENESS_PINGS
from memstream.workers.service import (
    WORKERS,
    WorkerConfig,
    offline_extractor,
    worker_projections,
)

logger = logging.getLogger(__name__)


def require_worker(name: str) -> str:
    """Return ``name`` if it is a worker this package can run.

    Raises:
        InvalidInputError: unknown worker name.
    """
    if name not in WORKERS:
        raise InvalidInputError(f"unknown worker {name!r}; known: {', '.join(WORKERS)}")
    return name


class ProjectorService:
    """The projector's life cycle inside a FastStream app."""

    def __init__(
        self, broker: NatsBroker, config: WorkerConfig, lock: CopyLock | None = None
    ) -> None:
        self.broker = broker
        self.config = config
        self.worker: ProjectorWorker | None = None
        self.partitioned: PartitionedProjector | None = None
        self._lock = lock  # the copy's projector lock, when the caller took it already

    def workers(self) -> tuple[ProjectorWorker | None, ...]:
        """The projectors running here (one per partition held, when partitioned)."""
        if self.partitioned is not None:
            return tuple(self.partitioned.workers.values())
        return (self.worker,)

    async def start(self) -> None:
        """Start projecting on the broker's (already connected) client."""
        client = await self.broker.connect()  # returns the broker's existing connection
        log = EventLog(
            client,
            self.config.stream,
            self.config.subject_prefix,
            replicas=self.config.stream_replicas,
            partitions=self.config.stream_partitions,
        )
        await log.ensure_stream()
        if self.config.partitioned:
            await self._start_partitioned(log)
            return
        indexer = set(self.config.projections) <= set(INDEXER_PROJECTIONS)
        self.worker = ProjectorWorker.open(
            log,
            open_read_models(self.config),
            self.config.projections,
            lock=self._lock,
            batch_size=self.config.batch_size,
            demand=Demand(),
            linger=self.config.linger,
            encoder=LazyEncoder(self.config.embedding_model) if indexer else None,
        )
        self._lock = None  # the worker owns it now
        self.worker.start()
        logger.info(
            "projector: stream %s -> %s (projections %s, copy %s, consumer %s, "
            "from sequence %d, lingering up to %g s)",
            self.config.stream,
            self.config.database,
            ",".join(self.config.projections),
            self.worker.copy_id,
            self.worker.durable,
            self.worker.start_position(),
            self.config.linger,
        )

    async def _start_partitioned(self, log: EventLog) -> None:
        self.partitioned = PartitionedProjector(
            log,
            open_read_models(self.config),
            self.config.projections,
            ttl=self.config.lease_ttl,
            batch_size=self.config.batch_size,
            demand=Demand(),
            linger=self.config.linger,
        )
        await self.partitioned.start()
        logger.info(
            "projector: stream %s -> %s (projections %s, by partition: %d partitions, "
            "member %s, leases of %g s)",
            self.config.stream,
            self.config.database,
            ",".join(self.config.projections),
            self.partitioned.count,
            self.partitioned.member,
            self.config.lease_ttl,
        )

    async def stop(self) -> None:
        """Stop projecting (an unacknowledged batch is redelivered and skipped on restart)."""
        if self.partitioned is not None:
            await self.partitioned.stop()
            self.partitioned = None
        if self.worker is not None:
            await self.worker.close()
            self.worker = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        logger.info("projector: stopped")


class ExtractorService:
    """The extractor's life cycle inside a FastStream app (it writes to the log only: no
    read-model lock)."""

    def __init__(
        self, broker: NatsBroker, config: WorkerConfig, extractor: Callable[[], Any]
    ) -> None:
        self.broker = broker
        self.config = config
        self.extractor = extractor
        self.worker: ExtractorWorker | None = None

    async def start(self) -> None:
        client = await self.broker.connect()
        log = EventLog(
            client,
            self.config.stream,
            self.config.subject_prefix,
            replicas=self.config.stream_replicas,
            partitions=self.config.stream_partitions,
        )
        await log.ensure_stream()
        self.worker = ExtractorWorker(log, self.extractor)
        self.worker.start()
        logger.info("extractor: stream %s, consumer %s", self.config.stream, self.worker.durable)

    async def stop(self) -> None:
        if self.worker is not None:
            await self.worker.close()
            self.worker = None
        logger.info("extractor: stopped")


def nats_security(
    *,
    user: str | None = None,
    password: str | None = None,
    token: str | None = None,
    creds: str | None = None,
) -> BaseSecurity | None:
    """The broker's authentication for memstream's NATS credential settings.

    Raises:
        InvalidInputError: a credentials file is given but the nkeys package is missing.
    """
    if creds:
        try:
            return NatsCredentials.from_file(creds)
        except ImportError as error:
            raise InvalidInputError(
                f"MEMSTREAM_NATS_CREDS {creds!r} needs the nkeys package: {error}"
            ) from error
    if token:
        return NatsToken(token)
    if user:
        return NatsUserPassword(user, password or "")
    return None


def create_app(
    config: WorkerConfig,
    name: str = "projector",
    *,
    security: BaseSecurity | None = None,
    lock: CopyLock | None = None,
    extractor: Callable[[], Any] = offline_extractor,
    metrics: tuple[int | None, str] = (None, "127.0.0.1"),
) -> FastStream:
    """A FastStream app that runs worker ``name`` against ``config`` until it is stopped.

    ``lock`` is the read-model copy's projector lock if the caller took it already (see
    :func:`~memstream.workers.projector.claim_copy`); otherwise the app takes it at start.

    Example:
        asyncio.run(create_app(WorkerConfig(url, "MEMSTREAM", db_path)).run())

    Raises:
        InvalidInputError: unknown worker name.
    """
    require_worker(name)
    broker = NatsBroker(
        nats_servers(config.nats_url),
        name=f"memstream-{name}",
        connect_timeout=2,
        allow_reconnect=True,
        max_reconnect_attempts=-1,  # a service waits for its log rather than dying with it
        reconnect_time_wait=1,
        ping_interval=LIVENESS_PING_SECONDS,  # a dead server is left within ~6 s
        max_outstanding_pings=LIVENESS_PINGS,
        security=security,
    )
    service: ProjectorService | ExtractorService
    if name == "extractor":
        service = ExtractorService(broker, config, extractor)
    else:
        config = replace(config, projections=worker_projections(name, config.projections))
        service = ProjectorService(broker, config, lock)
    after_startup: list[Callable[[], Any]] = [service.start]
    on_shutdown: list[Callable[[], Any]] = [service.stop]
    port, host = metrics
    if port is not None:
        following: list[asyncio.Task[None]] = []

        async def serve_metrics() -> None:
            from memstream.workers.observability.telemetry import telemetry

            served = telemetry()
            served.workers.watch(
                lambda: (
                    service.workers()
                    if isinstance(service, ProjectorService)
                    else (service.worker,)
                )
            )
            served.serve(port, host)
            following.append(asyncio.ensure_future(served.workers.follow_ends()))

        async def stop_following() -> None:
            for task in following:
                task.cancel()

        after_startup.append(serve_metrics)
        on_shutdown.insert(0, stop_following)
    return FastStream(broker, after_startup=after_startup, on_shutdown=on_shutdown)
