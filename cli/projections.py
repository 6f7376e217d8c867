"""``memstream projections ...``: list read models, rebuild them from the log, verify them."""

from __future__ import annotations

from typing import Annotated

import typer

from memstream import admin
from memstream.admin import (
    MODEL_FREE_PROJECTIONS,
    PROJECTIONS,
    ProjectionStatus,
    Verification,
    parse_as_of,
)
from memstream.cli.context import connected, run, settings_of
from memstream.cli.output import (
    emit_json,
    note,
    progress_bar,
    show_projections,
    show_verify,
    verify_json,
)
from memstream.domain.errors import InvalidInputError, MemstreamError, ReadModelAheadError
from memstream.domain.redaction import redact

app = typer.Typer(no_args_is_help=True, help="Read models: positions, rebuilds, checksums.")

NamesArg = Annotated[
    list[str] | None,
    typer.Argument(help="Projection names (default: all).", show_default=False),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
# Exit statuses of ``verify``, for schedulers.
VERIFY_DIFFERS = 1
VERIFY_FAILED = 2


@app.command("list")
def list_projections(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List the projections, the stream sequence each has applied, and its lag.

    Example: memstream projections list --json
    """
    settings = settings_of(ctx)

    async def main() -> list[ProjectionStatus]:
        async with connected(settings, workers=False) as ms:
            return await admin.projections(ms)

    statuses = run(main())
    if as_json:
        emit_json([{"name": s.name, "tracked_seq": s.tracked_seq, "lag": s.lag} for s in statuses])
    else:
        show_projections(statuses)


@app.command("rebuild")
def rebuild_projections(
    ctx: typer.Context,
    names: NamesArg = None,
    into: Annotated[
        str | None,
        typer.Option(
            "--into",
            help="Build another read-model copy instead of this one, from the log: a "
            "postgresql:// URL (or libpq key=value string), a SQLite file or a data dir. "
            "Moves read models from SQLite to PostgreSQL or back.",
            show_default=False,
        ),
    ] = None,
    as_of: Annotated[
        str | None,
        typer.Option(
            "--as-of",
            help="Build the read models as they were at this stream sequence or ISO 8601 "
            "time (UTC unless it names a zone); needs --into.",
            show_default=False,
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Drop projections and replay the whole log into them.

    Shows a progress bar. A projector running elsewhere notices the rewind and carries on from
    the rebuilt position. A damaged or foreign read-model file is checked whole first, moved
    aside (memstream.db.corrupt-TIME) and every projection rebuilt into a fresh one. With
    --into, the live read models are left alone and the named copy is built; point
    MEMSTREAM_DATABASE_URL (or the data dir) at it and its projector carries on from there.

    With --as-of and --into, the copy holds the read models as they were then (every projection
    but vectors): an audit of a past state, or a restore point.

    Example: memstream projections rebuild --into postgresql://memstream@db.internal/memstream
    """
    settings = settings_of(ctx)
    when = None if as_of is None else parse_as_of(as_of)
    if when is not None and into is None:
        raise InvalidInputError(
            "--as-of builds another copy: name it with --into (the live read models stay current)"
        )
    copy = admin.read_model_copy(settings, into)
    # Before connecting, which opens the copy to read it and fails on a damaged one.
    moved = admin.repair(copy) if copy.exists() else None
    if moved is not None:
        names = None  # a fresh file: every projection is rebuilt

    async def main() -> int:
        async with connected(settings, workers=False, check_log=False) as ms:
            with progress_bar("rebuilding") as progress:
                return await admin.rebuild(ms, copy, names, as_of=when, progress=progress)

    reached = run(main())
    if as_json:
        emit_json(
            {
                "projections": list(names)
                if names
                else list(PROJECTIONS if when is None else MODEL_FREE_PROJECTIONS),
                "into": copy.location,
                "sequence": reached,
                "moved_aside": None if moved is None else str(moved),
            }
        )
        return
    where = "" if into is None else f" into {copy.location}"
    typer.echo(
        f"rebuilt {', '.join(names) if names else 'all projections'}{where} "
        f"up to sequence {reached}"
    )


@app.command("verify")
def verify_projections(
    ctx: typer.Context,
    names: NamesArg = None,
    as_of: Annotated[
        int | None,
        typer.Option("--as-of", help="Build the state at this stream sequence instead."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Compare checksums of the live read models with a scratch rebuild.

    By default the projector's projections, and analytics where this copy has it (name
    vectors to embed every text again and compare which items have vectors of which model).
    With --as-of SEQ the scratch state is built at SEQ; it is compared only with a live model
    that is at SEQ too. Exit status, for a
    scheduler: 0 every checksum matches, 1 a checksum differs or the read model is ahead of the
    log (it holds events the log lost), 2 the check could not run (NATS or the database
    unavailable, a damaged read model, the live model not caught up in time).

    Example: memstream projections verify sessions --as-of 120
    """
    settings = settings_of(ctx)

    async def main() -> Verification:
        async with connected(settings, check_log=False) as ms:
            with progress_bar("verifying") as progress:
                return await admin.verify(ms, names, as_of=as_of, progress=progress)

    try:
        verification = run(main())
    except ReadModelAheadError as ahead:  # the copy differs from the log
        note(f"error: {redact(' '.join(str(ahead).split()))}")
        raise typer.Exit(VERIFY_DIFFERS) from None
    except InvalidInputError:
        raise
    except MemstreamError as error:
        note(f"error: could not verify: {redact(' '.join(str(error).split()))}")
        raise typer.Exit(VERIFY_FAILED) from None
    results, comparable = verification.results, verification.comparable
    if as_json:
        emit_json(verify_json(results, comparable))
    else:
        show_verify(results, comparable)
    different = verification.different
    if different:
        note(f"error: checksums differ for {', '.join(different)}")
        raise typer.Exit(VERIFY_DIFFERS)


@app.command("forget-copy")
def forget_copy_command(
    ctx: typer.Context,
    copy: Annotated[
        str, typer.Argument(help="The copy id, as `memstream status` lists it.", show_default=False)
    ],
    as_json: JsonFlag = False,
) -> None:
    """Delete the durable consumers of a read-model copy that no longer exists.

    Each read-model copy (a data dir, a host, a database) keeps its own durable consumers on
    the stream, which keep its place in the log. When a copy is gone for good, forget it so the
    server stops keeping that place. This data dir's own copy is refused.

    Example: memstream projections forget-copy 3f2a9c01b7de
    """
    settings = settings_of(ctx)

    async def main() -> list[str]:
        async with connected(settings, workers=False) as ms:
            return await admin.forget_copy(ms, copy)

    names = run(main())
    if as_json:
        emit_json({"copy_id": copy, "deleted_consumers": names})
    else:
        typer.echo(f"forgot read-model copy {copy}: deleted consumers {', '.join(names)}")
