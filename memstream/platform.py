"""Running memstream's processes from Python: a worker in a process of its own, the metrics
endpoint, and the owner-only files of a data dir. ``memstream worker`` and ``memstream up``
are these.

Example (what ``memstream worker projector --projections sessions`` does)::

    from memstream import Settings, platform

    platform.run_worker(Settings.from_env(), "projector", projections="sessions")
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from memstream.domain.errors import InvalidInputError
from memstream.llm_extractor import extractor_from_settings
from memstream.projections.read_models import open_read_models
from memstream.projections.registry import (
    PARTITIONABLE,
    PROJECTOR_PROJECTIONS,
    REGISTRY,
    ProjectionSpec,
    parse_projections,
)
from memstream.settings import Settings
from memstream.workers.projector import DEFAULT_LINGER, claim_copy
from memstream.workers.runtime.data_dir import (
    open_private,
    os_reason,
    prepare_data_dir,
    private_database,
)
from memstream.workers.runtime.embedded import EmbeddedRuntime
from memstream.workers.service import WorkerConfig, worker_projections

__all__ = [
    "DEFAULT_LINGER",
    "MAX_LINGER",
    "PROJECTOR_PROJECTIONS",
    "REGISTRY",
    "ProjectionSpec",
    "open_private",
    "os_reason",
    "run_worker",
    "serve_metrics",
]

MAX_LINGER = 10.0  # seconds; more would only make status show a lag longer


def run_worker(
    settings: Settings,
    name: str,
    *,
    projections: str | None = None,
    partitions: bool = False,
    linger: float = DEFAULT_LINGER,
    lease_ttl: float = 6.0,
    metrics: tuple[int | None, str] = (None, "127.0.0.1"),
    started: Callable[[str], None] | None = None,
) -> None:
    """Run the worker ``name`` (projector, indexer, analytics, extractor) as a FastStream app
    until SIGTERM or Ctrl-C, on ``settings``' NATS (else the data dir's embedded server, started
    here if none runs) and read models. ``projections``: a projector's, comma-separated;
    ``partitions``: share a partitioned stream's partitions with the other projectors of this
    copy (leases of ``lease_ttl`` s); ``metrics``: a Prometheus port and host; ``started`` is
    told one line about where it runs, once the options are checked and FastStream is imported
    (a caller may configure logging there), before the app is made.

    Raises:
        InvalidInputError: a bad option, or a read-model copy whose projector runs elsewhere
            (one copy has one projector), or a data dir another process owns.
    """
    # FastStream only for the command that runs a worker app: importing it is slow for every
    # other command (bench/RESULTS.md, 'Figures moved from code comments').
    from memstream.workers.apps import create_app, nats_security, require_worker

    require_worker(name)
    if name != "projector" and projections:
        raise InvalidInputError(f"--projections is for the projector; the {name} runs its own")
    selected = worker_projections(
        name, tuple(parse_projections("--projections", projections, PROJECTOR_PROJECTIONS))
    )
    if partitions and name != "projector":
        raise InvalidInputError(f"--partitions is for the projector; the {name} reads it whole")
    unfit = [p for p in selected if p not in PARTITIONABLE]
    if partitions and unfit:
        raise InvalidInputError(
            f"--partitions: projections {', '.join(unfit)} cannot be projected by partition "
            f"(only {', '.join(PARTITIONABLE)}): run them in a worker without --partitions"
        )
    if not 0.5 <= lease_ttl <= 300:
        raise InvalidInputError(f"--lease-ttl is {lease_ttl:g}; it must be 0.5 to 300 seconds")
    if not 0 <= linger <= MAX_LINGER:
        raise InvalidInputError(f"--linger is {linger:g}; it must be 0 to {MAX_LINGER:g} seconds")
    runtime: EmbeddedRuntime | None = None
    lock = None
    url = settings.nats_url
    if url is None:
        runtime = EmbeddedRuntime.acquire(settings.data_dir, sync=settings.nats_sync)
        if not runtime.owner:  # its owner runs the workers; a second projector would race it
            runtime.release()
            raise InvalidInputError(
                f"another process owns {settings.data_dir} ({runtime.url}) and runs its workers; "
                "set MEMSTREAM_NATS_URL to run workers apart from it"
            )
        url = runtime.url
    else:
        prepare_data_dir(settings.data_dir)
    try:
        # One read-model copy has one projector: refuse now, in one line, if one runs.
        # (By partition, each partition's projector takes its own locks.)
        if name != "extractor" and not partitions:  # the extractor writes to the log only
            lock = claim_copy(open_read_models(settings), selected)
        config = WorkerConfig(
            nats_url=url,
            stream=settings.stream,
            subject_prefix=settings.subject_prefix,
            stream_replicas=settings.stream_replicas,
            stream_partitions=settings.stream_partitions,
            database=(
                settings.database_path
                if settings.database_url is not None
                else private_database(settings.database_path)
            ),
            database_url=settings.database_url,
            linger=linger,
            projections=selected,
            embedding_model=settings.embedding_model,
            partitioned=partitions,
            lease_ttl=lease_ttl,
        )
        security = (
            nats_security(token=runtime.token)  # the embedded server takes its data dir's token
            if runtime is not None
            else nats_security(
                user=settings.nats_user,
                password=settings.nats_password,
                token=settings.nats_token,
                creds=settings.nats_creds,
            )
        )
        if started is not None:
            started(
                f"worker {name}: NATS {url}, stream {settings.stream}, database {config.database}"
            )
        app = create_app(
            config,
            name,
            security=security,
            lock=lock,
            extractor=extractor_from_settings(settings),
            metrics=metrics,
        )
        asyncio.run(app.run())
    finally:
        if lock is not None:
            lock.release()
        if runtime is not None:
            runtime.release()


def serve_metrics(
    port: int | None, host: str, workers: Callable[[], Iterable[Any]]
) -> asyncio.Task[None] | None:
    """With a ``port``: serve Prometheus metrics (``/metrics``) of this process and of
    ``workers()`` (asked at each scrape), and follow the log's end for their lag; returns the
    task to cancel at exit (call on a running loop)."""
    if port is None:
        return None
    from memstream.workers.observability.telemetry import telemetry

    metrics = telemetry()
    metrics.workers.watch(workers)
    metrics.serve(port, host)
    return asyncio.ensure_future(metrics.workers.follow_ends())
