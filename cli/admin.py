"""``memstream admin ...``: operations on the log itself (``purge``)."""

from __future__ import annotations

from typing import Annotated

import typer

from memstream import admin
from memstream.admin import COPIES_WAIT, PurgeReport, check_wait, parse_duration
from memstream.cli.context import connected, run, settings_of
from memstream.cli.output import emit_json, show_purge

app = typer.Typer(
    no_args_is_help=True,
    help="Administer the log: erase what was deleted.\n\n"
    "Example: memstream admin purge --older-than 30d --dry-run",
)


@app.command("purge")
def purge_command(
    ctx: typer.Context,
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            help="Grace period: erase what was deleted longer ago than this (e.g. 30d, 12h, "
            "1d12h, 0s).",
            show_default=False,
        ),
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be erased; change nothing.")
    ] = False,
    wait: Annotated[
        float,
        typer.Option(
            "--wait",
            help="Seconds to wait for every read-model copy's projectors to pass the last event "
            "to be erased (0-600); copies still behind are named.",
        ),
    ] = COPIES_WAIT,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Erase from the stream the events of sessions and profiles deleted longer ago than the
    grace period: each overwritten in nats-server's files (a message delete), then the subjects
    purged (a purge alone leaves the bytes in the server's files).

    A session deleted by a SessionManager goes with its registration and built-in blocks; a
    session written again after its deletion is skipped. The purge is recorded first, as a
    purge.events_purged event of the namespace that names stream sequences and counts only,
    so that every read model drops what it kept of them and `projections verify` still
    matches. Cached --as-of copies in this data dir are deleted (other data dirs' at their next
    --as-of read).

    Example: memstream admin purge --older-than 30d --dry-run
    """
    settings = settings_of(ctx)
    parse_duration(older_than)
    check_wait(wait)

    async def main() -> PurgeReport:
        async with connected(settings, workers=False) as ms:
            return await admin.purge(ms, older_than, dry_run=dry_run, wait=wait)

    report = run(main())
    if as_json:
        emit_json(report.as_json())
    else:
        show_purge(report)
