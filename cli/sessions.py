"""``memstream sessions ...`` and ``memstream append``: read and write session message trees."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import typer

from memstream import InvalidInputError, ProjectionLagError, admin
from memstream.cli.as_of import AsOfOption, reading
from memstream.cli.context import connected, run, settings_of
from memstream.cli.output import (
    emit_json,
    note,
    show_fields,
    show_history,
    show_hits,
    show_sessions,
)
from memstream.domain.limits import (
    SEARCH_LIMIT_MAX,
    check_int,
    check_session_id,
    search_query,
    storable,
)
from memstream.domain.session import OMITTED

app = typer.Typer(no_args_is_help=True, help="Read and write sessions (trees of messages).")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
SessionArg = Annotated[str, typer.Argument(help="Session id.", show_default=False)]


LimitOpt = Annotated[
    int | None,
    typer.Option("--limit", min=0, help="Show at most this many.", show_default=False),
]
OffsetOpt = Annotated[int, typer.Option("--offset", min=0, help="Skip this many first.")]


def _page(items: list[Any], limit: int | None, offset: int) -> list[Any]:
    return items[offset:] if limit is None else items[offset : offset + limit]


@app.command("list")
def list_sessions(
    ctx: typer.Context,
    limit: LimitOpt = None,
    offset: OffsetOpt = 0,
    as_of: AsOfOption = None,
    as_json: JsonFlag = False,
) -> None:
    """List the namespace's sessions that have had messages, with counts and times (a page
    of --limit after --offset, in the listing's order).

    Example: memstream sessions list --limit 20 --offset 40 --json
    """
    settings = settings_of(ctx)

    async def main() -> list[dict[str, Any]]:
        async with reading(settings, as_of, "sessions") as reads:
            return reads.sessions.sessions(reads.namespace)

    sessions = _page(run(main()), limit, offset)
    if as_json:
        emit_json(sessions)
    else:
        show_sessions(sessions)


@app.command("show")
def show(ctx: typer.Context, session: SessionArg, as_json: JsonFlag = False) -> None:
    """Show one session: counts of messages, branch tips and compactions, the latest leaf and
    its path length, first and last message time, context block labels, loaded skills and
    whether its system prompt is frozen.

    Example: memstream sessions show chat-1
    """
    settings = settings_of(ctx)
    check_session_id(session)

    async def main() -> dict[str, Any]:
        async with connected(settings) as ms:
            return await admin.session_overview(ms, session)

    details = run(main())
    if as_json:
        emit_json(details)
    else:
        show_fields(details)


@app.command("history")
def history(
    ctx: typer.Context,
    session: SessionArg,
    leaf: Annotated[
        str | None, typer.Option("--leaf", help="Message id to end at (default: latest leaf).")
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", min=0, help="Show the last N messages of the path.", show_default=False
        ),
    ] = None,
    offset: Annotated[
        int,
        typer.Option("--offset", min=0, help="Skip this many of the newest first (paging back)."),
    ] = 0,
    as_of: AsOfOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Show a session's messages from the root to a leaf.

    The latest leaf unless --leaf is given; compaction overlays are applied. --limit N shows
    the last N (as get_history(limit=N)); --offset M moves that window M messages back.
    --as-of shows the path as it was then.

    Example: memstream sessions history chat-1 --as-of 2026-01-01T00:00
    """
    settings = settings_of(ctx)

    async def main() -> list[Any]:
        async with reading(settings, as_of, "sessions") as reads:
            if reads.ms is not None:
                return list(await reads.ms.session(session).get_history(leaf))
            if leaf is not None and not storable(leaf):
                return []
            return list(reads.sessions.history(reads.namespace, session, leaf))

    messages = run(main())
    end = len(messages) - offset
    messages = messages[max(0, end - limit if limit is not None else 0) : max(0, end)]
    if as_json:
        emit_json(messages)
    else:
        show_history(session, messages, leaf)


@app.command("search")
def search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help='Web-search syntax: words, "phrases", OR, -not.')],
    session: Annotated[
        str | None, typer.Option("--session", help="Search only this session (default: all).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many hits.")] = 20,
    as_of: AsOfOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Full-text search over session messages, best match first.

    Example: memstream sessions search "tram OR ferry" --session demo --limit 5
    """
    settings = settings_of(ctx)
    check_int("limit", limit, minimum=1, maximum=SEARCH_LIMIT_MAX)
    text = search_query(query)  # None: matches nothing (over 4 KiB)

    async def main(text: str) -> list[dict[str, Any]]:
        async with reading(settings, as_of, "sessions") as reads:
            if session is not None and reads.ms is not None:
                hits = await reads.ms.session(session).search(text, limit)
                return [{"session_id": session, **hit} for hit in hits]
            if session is not None:
                check_session_id(session)
                found = reads.sessions.search(reads.namespace, session, text, limit)
                fields = ("id", "role", "content", "created_at")
                return [{"session_id": session, **{k: hit[k] for k in fields}} for hit in found]
            return reads.sessions.search(reads.namespace, None, text, limit)

    hits = [] if text is None else run(main(text))
    if as_json:
        emit_json(hits)
    else:
        show_hits(query, hits)


def append(
    ctx: typer.Context,
    session: SessionArg,
    text: Annotated[str, typer.Option("--text", help="The message text.", show_default=False)],
    role: Annotated[str, typer.Option("--role", help="user, assistant, system, tool...")] = "user",
    message_id: Annotated[
        str | None, typer.Option("--id", help="Message id (default: a new random id).")
    ] = None,
    parent: Annotated[
        str | None, typer.Option("--parent", help="Append under this message (a branch).")
    ] = None,
    root: Annotated[bool, typer.Option("--root", help="Start a new root (no parent).")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Append a text message to a session.

    The message goes under the latest leaf unless --parent or --root says otherwise. Returns
    once the message is readable. An id that already exists is a no-op.

    Example: memstream append chat-1 --role user --text "Hi there" --id m1
    """
    settings = settings_of(ctx)
    if parent is not None and root:
        raise InvalidInputError("give --parent or --root, not both")
    parent_id = None if root else (parent if parent is not None else OMITTED)
    message = {
        "id": uuid.uuid4().hex if message_id is None else message_id,
        "role": role,
        "parts": [{"type": "text", "text": text}],
    }

    async def main() -> int:
        async with connected(settings) as ms:
            seq = await ms.session(session).append_message(message, parent_id)
            try:
                await ms.wait_for("sessions", seq)
            except ProjectionLagError as error:  # stored; only not readable yet
                note(f"warning: appended, but not readable yet ({error}); is a projector running?")
            return seq

    seq = run(main())
    if as_json:
        emit_json({"session_id": session, "id": message["id"], "seq": seq})
    else:
        typer.echo(f"appended {message['id']} to session {session!r} at stream sequence {seq}")


app.command("append")(append)
