"""``memstream status``: the stream, its consumers, projection lag and dead letters."""

from __future__ import annotations

from typing import Annotated

import typer

from memstream import admin
from memstream.admin import PlatformStatus
from memstream.cli.context import connected, run, settings_of
from memstream.cli.output import emit_json, note, show_status
from memstream.domain.limits import check_int


def status(
    ctx: typer.Context,
    dead_letters: Annotated[
        int, typer.Option("--dead-letters", help="How many of the latest dead letters to list.")
    ] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Show the stream, its consumers, projection lag and dead letters.

    The stream's messages, bytes and sequences; each consumer's pending and unacknowledged
    messages; each projection's tracked sequence and lag; the count and latest dead letters;
    the log servers' fsync policy and the stream's replicas. Exits 1 when the read model is
    ahead of the log, a server acknowledges before fsync, or a replica is offline.

    Example: memstream status --json
    """
    settings = settings_of(ctx)
    check_int("--dead-letters", dead_letters, minimum=0, maximum=10_000)

    async def main() -> PlatformStatus:
        async with connected(settings, workers=False, check_log=False) as ms:
            return await admin.status(ms, dead_letters=dead_letters)

    report = run(main())
    if as_json:
        emit_json(report.as_json())
    else:
        show_status(report)
    for problem in report.problems:
        note(f"error: {problem}")
    if report.problems:
        raise typer.Exit(1)
