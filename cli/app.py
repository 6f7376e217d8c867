"""The root of the ``memstream`` command: global options, command groups, one error wrapper."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from memstream import MemstreamError
from memstream.cli import (
    admin,
    audit,
    blocks,
    doctor,
    events,
    manager,
    mcp,
    memory,
    platform,
    projections,
    sessions,
    stats,
    status,
)
from memstream.cli.context import GlobalOptions
from memstream.cli.logs import check_log_format
from memstream.domain.redaction import redact


class _Root(TyperGroup):
    """Turns a user error (any ``MemstreamError``, a damaged read model included) into one
    ``error: ...`` line and exit 1.

    Every command runs inside the root group's ``invoke``, so this is the only handler.
    """

    def invoke(self, ctx: Any) -> Any:  # typer's vendored click.Context
        try:
            return super().invoke(ctx)
        except MemstreamError as error:
            # redact again: a URL with a password must not reach the terminal, whoever built
            # the message
            message = redact(" ".join(str(error).split())) or type(error).__name__
            typer.echo(f"error: {message}", err=True)
            raise typer.Exit(1) from None


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as installed

        try:
            number = installed("memstream")
        except PackageNotFoundError:  # a source tree run without installing
            number = "unknown"
        typer.echo(f"memstream {number}")
        raise typer.Exit()


app = typer.Typer(
    name="memstream",
    cls=_Root,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    help="memstream: an event-sourced memory platform on NATS JetStream.",
)


@app.callback()
def root(
    ctx: typer.Context,
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Data dir (env MEMSTREAM_DATA_DIR; default ./.memstream)."),
    ] = None,
    nats_url: Annotated[
        str | None,
        typer.Option(
            "--nats-url", help="NATS URL (env MEMSTREAM_NATS_URL; default: embedded server)."
        ),
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="PostgreSQL read models, a postgresql:// URL (env MEMSTREAM_DATABASE_URL; "
            "default: SQLite in the data dir).",
        ),
    ] = None,
    stream: Annotated[
        str | None,
        typer.Option("--stream", help="Stream name (env MEMSTREAM_STREAM; default MEMSTREAM)."),
    ] = None,
    stream_replicas: Annotated[
        int | None,
        typer.Option(
            "--stream-replicas",
            help="Replicas of the stream on a JetStream cluster, 1-5 (env "
            "MEMSTREAM_STREAM_REPLICAS; default 1).",
        ),
    ] = None,
    stream_partitions: Annotated[
        int | None,
        typer.Option(
            "--stream-partitions",
            help="Partitions of the stream when memstream creates it, 0-1024 (env "
            "MEMSTREAM_STREAM_PARTITIONS; default 0: none). An existing stream keeps its own.",
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", help="Namespace (env MEMSTREAM_NAMESPACE; default: default)."),
    ] = None,
    actor: Annotated[
        str | None,
        typer.Option(
            "--actor",
            help="Who the events of this command are recorded as caused by (env "
            "MEMSTREAM_ACTOR; default: user@host).",
        ),
    ] = None,
    log_format: Annotated[
        str,
        typer.Option(
            "--log-format",
            envvar="MEMSTREAM_LOG_FORMAT",
            help="Logs of up, worker and mcp: text lines, or json (one object per line).",
        ),
    ] = "text",
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_show_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """memstream: an event-sourced memory platform on NATS JetStream.

    Example: memstream --data-dir /tmp/ms up --demo
    """
    ctx.obj = GlobalOptions(
        data_dir,
        nats_url,
        stream,
        namespace,
        actor,
        stream_replicas,
        database_url,
        check_log_format(log_format),
        stream_partitions,
    )


app.command("up")(platform.up)
app.command("worker")(platform.worker)
app.command("status")(status.status)
app.command("doctor")(doctor.doctor)
app.command("append")(sessions.append)
app.command("mcp")(mcp.mcp)
app.command("stats")(stats.stats)
for name, command in (
    ("create", manager.create),
    ("rename", manager.rename),
    ("fork", manager.fork),
    ("compact", manager.compact),
    ("split", manager.split),
    ("delete", manager.delete),
    ("registered", manager.registered),
):
    sessions.app.command(name)(command)
app.add_typer(sessions.app, name="sessions")
app.add_typer(manager.usage_app, name="usage")
app.add_typer(blocks.app, name="context")
app.add_typer(blocks.prompt_app, name="prompt")
app.add_typer(events.app, name="events")
app.add_typer(audit.app, name="audit")
app.add_typer(projections.app, name="projections")
app.add_typer(memory.app, name="memory")
app.add_typer(admin.app, name="admin")


def main() -> None:
    """Console-script entry point."""
    app()
