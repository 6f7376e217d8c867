"""``memstream up`` (the embedded platform in the foreground) and ``memstream worker NAME``."""

from __future__ import annotations

from typing import Annotated

import typer

from memstream import InvalidInputError, Settings
from memstream.cli.context import (
    configure_logging,
    connected,
    run,
    serve_metrics,
    settings_of,
    until_signal,
)
from memstream.cli.demo import run_demo
from memstream.cli.output import note, show_demo, show_platform
from memstream.domain.redaction import redact_url
from memstream.llm_extractor import extractor_from_settings
from memstream.projections.ports import (
    PARTITIONABLE,
    PROJECTOR_PROJECTIONS,
    REGISTRY,
    parse_projections,
)
from memstream.projections.read_models import open_read_models
from memstream.workers.data_dir import prepare_data_dir, private_database
from memstream.workers.embedded import EmbeddedRuntime
from memstream.workers.projector import DEFAULT_LINGER, claim_copy
from memstream.workers.service import WorkerConfig, worker_projections

MAX_LINGER = 10.0  # seconds; more would only make status show a lag longer
METRICS_PORT = typer.Option(
    "--metrics-port",
    min=0,
    max=65535,
    help="Serve Prometheus metrics on this port (/metrics): events applied, lag, batch "
    "latency, dead letters, command latency, conflicts.",
    show_default=False,
)
METRICS_HOST = typer.Option("--metrics-host", help="The address --metrics-port listens on.")


def up(
    ctx: typer.Context,
    demo: Annotated[
        bool,
        typer.Option("--demo", help="Write a short demo conversation, show it, and exit."),
    ] = False,
    metrics_port: Annotated[int | None, METRICS_PORT] = None,
    metrics_host: Annotated[str, METRICS_HOST] = "127.0.0.1",
) -> None:
    """Run the platform in the foreground until Ctrl-C or SIGTERM.

    Starts the embedded nats-server in the data dir and runs the projector in this process;
    other commands on the same data dir use both. With MEMSTREAM_NATS_URL it only runs the
    projector (so don't also run `memstream worker projector` for that data dir).

    Example: memstream up --demo
    """
    settings = settings_of(ctx)
    if not demo:
        configure_logging(ctx)
    run(_up(settings, demo=demo, metrics=(metrics_port, metrics_host)))


async def _up(settings: Settings, *, demo: bool, metrics: tuple[int | None, str]) -> None:
    # With a remote NATS this process is the projector; embedded, the owner of the data dir is.
    workers = True if settings.nats_url is not None else None
    async with connected(settings, workers=workers) as ms:
        runtime = ms.runtime
        owner = runtime is None or runtime.owner
        url = redact_url(runtime.url if runtime is not None else str(settings.nats_url))
        if not owner and not demo:
            raise InvalidInputError(f"memstream is already up in {settings.data_dir} ({url})")
        show_platform(
            url,
            str(settings.data_dir.resolve()),
            settings.stream,
            settings.namespace,
            "in this process"
            if ms.projector is not None
            else "in the process that owns the data dir",
        )
        if demo:
            show_demo(await run_demo(ms))
            return
        following = serve_metrics(*metrics, lambda: (ms.projector, ms.indexer, ms.extractor))
        note("memstream is up; press Ctrl-C to stop")
        try:
            await until_signal()
        finally:
            if following is not None:
                following.cancel()
        note("memstream is stopping")


def worker(
    ctx: typer.Context,
    name: Annotated[
        str,
        typer.Argument(
            help="The worker to run: projector (every read model but vectors and analytics), "
            "indexer (the vectors: an embedding model), analytics (daily volumes: memstream "
            "stats), extractor (memories from ingests).",
            show_default=False,
        ),
    ],
    linger: Annotated[
        float,
        typer.Option(
            help="Seconds a projector gathers writes per transaction unless a reader waits "
            "(0: commit what each fetch returns at once).",
        ),
    ] = DEFAULT_LINGER,
    projections: Annotated[
        str | None,
        typer.Option(
            "--projections",
            help="Comma-separated projections a projector runs (default: all but vectors and "
            "analytics, which the indexer and the analytics worker run): "
            + ", ".join(f"{spec.name} ({spec.holds})" for spec in REGISTRY)
            + ". Projectors of other projections of the same data dir may run beside it, each "
            "with its own consumer.",
            show_default=False,
        ),
    ] = None,
    partitions: Annotated[
        bool,
        typer.Option(
            "--partitions",
            help="Projector of a partitioned stream: share its partitions with the other "
            "projectors of this read-model copy (leases in a NATS KV bucket; a dead one's "
            "partitions are taken over within --lease-ttl).",
        ),
    ] = False,
    lease_ttl: Annotated[
        float,
        typer.Option(
            "--lease-ttl",
            help="Seconds a partition's lease lasts unless renewed (with --partitions).",
        ),
    ] = 6.0,
    metrics_port: Annotated[int | None, METRICS_PORT] = None,
    metrics_host: Annotated[str, METRICS_HOST] = "127.0.0.1",
) -> None:
    """Run a worker in its own process (a FastStream app) until SIGTERM or Ctrl-C.

    Connects to MEMSTREAM_NATS_URL, or else to the data dir's embedded server, started here if
    none runs. The read models go to the SQLite database in the data dir (one read-model copy:
    a second projector of a projection it runs is refused; run one per data dir, host or
    database, or one per set of projections).

    Example: MEMSTREAM_NATS_URL=nats://10.0.0.5:4222 memstream worker projector
    --projections sessions
    """
    # FastStream (~0.25 s to import) only for the command that runs a worker app.
    from memstream.workers.apps import create_app, nats_security, require_worker

    settings = settings_of(ctx)
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
        configure_logging(ctx)
        config = WorkerConfig(
            nats_url=url,
            stream=settings.stream,
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
        note(f"worker {name}: NATS {url}, stream {settings.stream}, database {config.database}")
        app = create_app(
            config,
            name,
            security=security,
            lock=lock,
            extractor=extractor_from_settings(settings),
            metrics=(metrics_port, metrics_host),
        )
        run(app.run())
    finally:
        if lock is not None:
            lock.release()
        if runtime is not None:
            runtime.release()
