"""``memstream audit ...``: every event that shaped one thing, with who, when and why."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from memstream import InvalidInputError, NotFoundError, admin
from memstream.admin import AuditEvent
from memstream.cli.context import connected, run, settings_of
from memstream.cli.output import emit_json, stdout
from memstream.domain.limits import check_session_id

app = typer.Typer(
    no_args_is_help=True,
    help="Audit trails: the events behind a session or a memory.\n\n"
    "Example: memstream audit session chat-1 --json",
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON (the export's objects).")]


@app.command("session")
def audit_session(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="Session id.", show_default=False)],
    as_json: JsonFlag = False,
) -> None:
    """Every event that shaped a session, oldest first: its messages, overlays, prompt and
    skills, its registration, and its built-in context blocks, each with its sequence, time,
    type, actor, command id and causation.

    Example: memstream audit session chat-1 --json
    """
    settings = settings_of(ctx)
    check_session_id(session)

    async def main() -> list[AuditEvent]:
        async with connected(settings) as ms:
            return await admin.session_trail(ms, session)

    trail = run(main())
    if not trail:
        raise NotFoundError(f"no events of session {session!r} in namespace {settings.namespace!r}")
    _show(trail, as_json)


@app.command("memory")
def audit_memory(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument(help="Memory id.", show_default=False)],
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile", help="Its profile (faster: only that profile's events are read)."
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Every event that shaped a memory, oldest first: the text remembered or the ingest it
    came from, its extraction, a supersession, its deletion, its session forgotten or its
    profile deleted. A deleted memory is found too: the log keeps it.

    Example: memstream audit memory 3f2a... --profile alice --json
    """
    settings = settings_of(ctx)
    if not memory_id or len(memory_id) > 256:
        raise InvalidInputError(f"memory id must be 1-256 characters, not {len(memory_id)}")

    async def main() -> list[AuditEvent]:
        async with connected(settings, workers=False) as ms:
            return await admin.memory_trail(ms, memory_id, profile)

    trail = run(main())
    if not trail:
        raise NotFoundError(
            f"no events of memory {memory_id!r} in namespace {settings.namespace!r}"
        )
    _show(trail, as_json)


def _show(trail: list[AuditEvent], as_json: bool) -> None:
    if as_json:
        emit_json([event.as_json() for event in trail])
        return
    table = Table("seq", "time", "type", "actor", "command", "caused by")
    for event in trail:
        table.add_row(*_row(event))
    stdout().print(table)


def _row(event: AuditEvent) -> list[Any]:
    headers = event.headers
    command = headers.get("command_id", "")
    causation = headers.get("causation_id", "")
    return [
        str(event.seq),
        event.time.isoformat(timespec="seconds"),
        event.type,
        headers.get("actor", ""),
        command,
        "" if causation == command else causation,
    ]
