"""What every command shares: global options, settings, the connection and the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import typer

from memstream import Memstream, Settings
from memstream.cli import logs
from memstream.client import open_memstream

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GlobalOptions:
    """The root options; unset ones fall back to ``MEMSTREAM_*`` variables."""

    data_dir: Path | None = None
    nats_url: str | None = None
    stream: str | None = None
    namespace: str | None = None
    actor: str | None = None
    stream_replicas: int | None = None
    database_url: str | None = None
    log_format: str = "text"
    stream_partitions: int | None = None


def settings_of(ctx: typer.Context) -> Settings:
    """Settings from the environment, overridden by the root options of this invocation.

    Raises:
        InvalidInputError: a setting breaks a limit (e.g. the namespace name).
    """
    options = ctx.find_object(GlobalOptions) or GlobalOptions()
    return Settings.from_env(
        data_dir=options.data_dir,
        nats_url=options.nats_url,
        stream=options.stream,
        namespace=options.namespace,
        actor=options.actor,
        stream_replicas=options.stream_replicas,
        stream_partitions=options.stream_partitions,
        database_url=options.database_url,
    )


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run one command's coroutine on a fresh event loop."""
    return asyncio.run(main)


@contextlib.asynccontextmanager
async def connected(
    settings: Settings, *, workers: bool | None = None, check_log: bool = True
) -> AsyncIterator[Memstream]:
    """Connect for one command, and close (releasing an embedded server we own) afterwards.

    Uses the data dir's running embedded server if there is one; otherwise this process starts
    it for the duration of the command. ``workers=None`` runs the projector here exactly when
    this process owns the embedded server. ``check_log=False``: a read-model copy ahead of the
    log is opened, not refused (for the commands that report or mend it).

    Raises:
        UnavailableError: NATS or the read-model database cannot be reached.
    """
    ms = await open_memstream(settings, workers=workers, check_log=check_log)
    try:
        yield ms
    finally:
        await ms.close()


async def until_signal(work: Awaitable[None] | None = None) -> None:
    """Wait for ``work`` to finish, or for SIGINT/SIGTERM (then cancel ``work``)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    tasks: set[asyncio.Future[Any]] = {asyncio.ensure_future(stop.wait())}
    if work is not None:
        tasks.add(asyncio.ensure_future(work))
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            task.result()  # re-raise what ended the work
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


def configure_logging(ctx: typer.Context) -> None:
    """Log INFO and up to stderr, as ``--log-format`` says (text lines or JSON)."""
    options = ctx.find_object(GlobalOptions) or GlobalOptions()
    logs.configure_logging(options.log_format)


def serve_metrics(
    port: int | None, host: str, workers: Callable[[], Iterable[Any]]
) -> asyncio.Task[None] | None:
    """With a ``--metrics-port``: serve Prometheus metrics of this process and of
    ``workers()`` (asked at each scrape), and follow the log's end for their lag (the task to
    cancel at exit)."""
    from memstream.platform import serve_metrics as serve

    return serve(port, host, workers)
