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
from memstream.platform import DEFAULT_LINGER, REGISTRY, run_worker

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
        runtime = ms.core.runtime
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
            if ms.core.workers.projector is not None
            else "in the process that owns the data dir",
        )
        if demo:
            show_demo(await run_demo(ms))
            return
        following = serve_metrics(
            *metrics,
            lambda: (ms.core.workers.projector, ms.core.workers.indexer, ms.core.workers.extractor),
        )
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
    settings = settings_of(ctx)

    def started(line: str) -> None:
        # Once FastStream is imported and the options checked: its logger goes our way too.
        configure_logging(ctx)
        note(line)

    run_worker(
        settings,
        name,
        projections=projections,
        partitions=partitions,
        linger=linger,
        lease_ttl=lease_ttl,
        metrics=(metrics_port, metrics_host),
        started=started,
    )
