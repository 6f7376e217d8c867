"""Run a worker as a long-lived service (``memstream worker NAME``, failure tests)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memstream.domain.errors import InvalidInputError
from memstream.projections.read_models import open_read_models
from memstream.projections.registry import (
    ANALYTICS_PROJECTIONS,
    INDEXER_PROJECTIONS,
    PROJECTOR_PROJECTIONS,
)
from memstream.workers.extractor import ExtractorWorker
from memstream.workers.indexer import LazyEncoder
from memstream.workers.log.event_log import EventLog, connect_nats
from memstream.workers.position import Demand
from memstream.workers.projector import DEFAULT_LINGER, ProjectorWorker

logger = logging.getLogger(__name__)

# projector: every read model but vectors; indexer: the vectors (an embedding model);
# extractor: memories from ingests (into the log; no read model).
WORKERS = ("projector", "indexer", "analytics", "extractor")


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """What a worker process needs: where the log is and where its read models live."""

    nats_url: str
    stream: str
    database: Path
    batch_size: int = 500
    linger: float = DEFAULT_LINGER  # see ProjectorWorker._linger; 0 commits every fetch at once
    database_url: str | None = None  # where the read models live instead of ``database``
    projections: tuple[str, ...] = PROJECTOR_PROJECTIONS  # the registry's names a projector runs
    embedding_model: str | None = None  # the indexer's (None: the bundled all-MiniLM-L6-v2)
    subject_prefix: str = "ms"  # the first token of the stream's subjects (``<prefix>.>``)
    stream_replicas: int = 1  # servers holding the stream if this worker creates it
    stream_partitions: int = 0  # its partitions, if this worker creates it
    # A projector that shares the stream's partitions with the copy's other projectors (leases).
    partitioned: bool = False
    lease_ttl: float = 6.0  # seconds a dead member's partitions wait before they are taken over

    @property
    def database_path(self) -> Path:
        """``database`` (:class:`~memstream.projections.ports.ReadModelSettings`)."""
        return self.database


def worker_projections(name: str, projections: tuple[str, ...]) -> tuple[str, ...]:
    """The projections worker ``name`` runs: the indexer's and the analytics worker's are
    fixed, a projector's chosen."""
    if name == "indexer":
        return INDEXER_PROJECTIONS
    if name == "analytics":
        return ANALYTICS_PROJECTIONS
    return projections


def offline_extractor() -> Any:
    """The default extractor (its rules are compiled when the first extraction needs them)."""
    from memstream.domain.extraction.offline import OfflineExtractor

    return OfflineExtractor()


async def run_worker(
    name: str,
    config: WorkerConfig,
    stop: asyncio.Event,
    extractor: Callable[[], Any] = offline_extractor,
) -> None:
    """Run worker ``name`` until ``stop`` is set.

    Raises:
        InvalidInputError: unknown worker name.
    """
    if name not in WORKERS:
        raise InvalidInputError(f"unknown worker {name!r}; known: {', '.join(WORKERS)}")
    client = await connect_nats(config.nats_url, name=f"memstream-{name}")
    try:
        log = EventLog(
            client,
            config.stream,
            config.subject_prefix,
            replicas=config.stream_replicas,
            partitions=config.stream_partitions,
        )
        await log.ensure_stream()
        worker: ProjectorWorker | ExtractorWorker
        if name == "extractor":
            worker = ExtractorWorker(log, extractor)
        else:
            worker = ProjectorWorker.open(
                log,
                open_read_models(config),
                worker_projections(name, config.projections),
                batch_size=config.batch_size,
                demand=Demand(),
                linger=config.linger,
                encoder=LazyEncoder(config.embedding_model) if name == "indexer" else None,
            )
        worker.start()
        try:
            await stop.wait()
        finally:
            await worker.close()
    finally:
        with contextlib.suppress(Exception):  # NATS may be gone already
            await client.flush(timeout=2)
        await client.close()
