"""``memstream sessions create|rename|fork|compact|split|delete|registered`` and ``memstream
usage``: registered sessions, driven through the SessionManager (spec §10)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from memstream import (
    InvalidInputError,
    Memstream,
    NotFoundError,
    SessionManager,
    create_compact_function,
    summarizer_from_settings,
)
from memstream.cli.context import connected, run, settings_of
from memstream.cli.output import emit_json, note, show_fields, show_registered, show_usage
from memstream.cli.sessions import JsonFlag, SessionArg
from memstream.domain.limits import LIST_LIMIT_MAX, check_int, check_session_id

usage_app = typer.Typer(no_args_is_help=True, help="Token and cost counters of a session.")

NameArg = Annotated[str, typer.Argument(help="Session name.", show_default=False)]
Info = dict[str, Any]


def _show_info(info: Info, as_json: bool, table: Callable[[Info], None] = show_fields) -> None:
    if as_json:
        emit_json(info)
    else:
        table(info)


async def _registered(manager: SessionManager, session_id: str) -> Info:
    info = await manager.get(session_id)
    if info is None:
        raise NotFoundError(f"session {session_id!r} is not registered")
    return info


async def _known(ms: Memstream, manager: SessionManager, session_id: str) -> None:
    """Refuse a session that is neither registered nor has a message (a typo, most likely)."""
    if (
        await manager.get(session_id) is None
        and await ms.session(session_id).get_latest_leaf() is None
    ):
        raise NotFoundError(f"session {session_id!r} is not registered and has no messages")


def create(
    ctx: typer.Context,
    name: NameArg,
    model: Annotated[str | None, typer.Option("--model", help="The model it talks to.")] = None,
    source: Annotated[
        str | None, typer.Option("--source", help="Where it comes from (app, channel...).")
    ] = None,
    parent: Annotated[
        str | None, typer.Option("--parent", help="The session it continues.")
    ] = None,
    session_id: Annotated[
        str | None, typer.Option("--id", help="Its id (default: a new random UUID).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Register a new session with a name, and print it (id first).

    Example: memstream sessions create "Trip planning" --model gpt-4o-mini --source cli
    """
    settings = settings_of(ctx)

    async def main() -> Info:
        async with connected(settings) as ms:
            return await ms.session_manager().create(
                name, parent_session_id=parent, model=model, source=source, session_id=session_id
            )

    _show_info(run(main()), as_json)


def rename(
    ctx: typer.Context, session: SessionArg, name: NameArg, as_json: JsonFlag = False
) -> None:
    """Rename a registered session, and print it.

    Example: memstream sessions rename chat-1 "Lisbon trip"
    """
    settings = settings_of(ctx)
    check_session_id(session)

    async def main() -> Info:
        async with connected(settings) as ms:
            manager = ms.session_manager()
            await manager.rename(session, name)
            return await _registered(manager, session)

    _show_info(run(main()), as_json)


def fork(
    ctx: typer.Context,
    session: SessionArg,
    at_message: Annotated[
        str, typer.Argument(help="The last message the fork keeps.", show_default=False)
    ],
    name: NameArg,
    as_json: JsonFlag = False,
) -> None:
    """Register a new session holding the path from the root to a message of this one (the
    messages keep their ids; a compaction summary on the path becomes a message), and print it.

    Example: memstream sessions fork chat-1 m7 "Chat 1, other ending"
    """
    settings = settings_of(ctx)
    check_session_id(session)

    async def main() -> Info:
        async with connected(settings) as ms:
            if await ms.session(session).get_message(at_message) is None:
                raise NotFoundError(f"no message {at_message!r} in session {session!r}")
            return await ms.session_manager().fork(session, at_message, name)

    _show_info(run(main()), as_json)


def compact(
    ctx: typer.Context,
    session: SessionArg,
    leaf: Annotated[
        str | None,
        typer.Option("--leaf", help="Compact the path to this message (default: latest)."),
    ] = None,
    protect_head: Annotated[
        int, typer.Option("--protect-head", help="Messages at the start never summarised.")
    ] = 3,
    tail_tokens: Annotated[
        int, typer.Option("--tail-tokens", help="Tokens of recent messages never summarised.")
    ] = 20000,
    as_json: JsonFlag = False,
) -> None:
    """Summarise the middle of a session's path into a compaction overlay (the messages stay
    in the log), and print the overlay stored, or "nothing to compact".

    The summary comes from the model of MEMSTREAM_LLM_URL and MEMSTREAM_LLM_MODEL when both are
    set, else from the offline extractive summariser.

    Example: memstream sessions compact chat-1 --protect-head 2 --tail-tokens 4000
    """
    settings = settings_of(ctx)
    check_session_id(session)
    check_int("--protect-head", protect_head, minimum=0, maximum=2**31)
    check_int("--tail-tokens", tail_tokens, minimum=0, maximum=2**31)
    function = create_compact_function(
        summarizer_from_settings(settings), protect_head=protect_head, tail_token_budget=tail_tokens
    )
    errors: list[BaseException] = []

    async def main() -> Info | None:
        async with connected(settings) as ms:
            manager = ms.session_manager()
            await _known(ms, manager, session)
            target = manager.get_session(session)
            if leaf is not None and await target.get_message(leaf) is None:
                raise NotFoundError(f"no message {leaf!r} in session {session!r}")
            target.on_compaction(function).on_compaction_error(errors.append)
            result = await target.compact(leaf)
            if result is None:
                if errors:  # the summariser failed (a model that cannot be reached...)
                    raise errors[0]
                return None
            span = (result["from_message_id"], result["to_message_id"])
            stored: list[Info] = await target.get_compactions()
            # the newest overlay of that span: the one this compaction stored or grew
            return next(
                c for c in reversed(stored) if (c["from_message_id"], c["to_message_id"]) == span
            )

    overlay = run(main())
    if as_json:
        emit_json(None if overlay is None else {"session_id": session, **overlay})
    elif overlay is None:
        typer.echo(f"nothing to compact in session {session!r}")
    else:
        show_fields({"session_id": session, **overlay})


def split(
    ctx: typer.Context,
    session: SessionArg,
    summary: Annotated[
        str, typer.Argument(help="What the new session starts from.", show_default=False)
    ],
    name: Annotated[
        str | None, typer.Option("--name", help="The new session's name (default: the old one).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """End a registered session (end reason "compaction") and register a new one that starts
    from a summary of it; print the new session.

    Example: memstream sessions split chat-1 "We planned three days in Lisbon." --name "Chat 2"
    """
    settings = settings_of(ctx)
    check_session_id(session)

    async def main() -> Info:
        async with connected(settings) as ms:
            return await ms.session_manager().compact_and_split(session, summary, name)

    _show_info(run(main()), as_json)


def delete(
    ctx: typer.Context,
    session: SessionArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Delete without asking.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Delete a session: its messages, compaction overlays and search rows are cleared and its
    registration removed (the events stay in the log). Asks first unless --yes.

    Example: memstream sessions delete chat-1 --yes
    """
    settings = settings_of(ctx)
    check_session_id(session)
    if not yes:
        if not sys.stdin.isatty():
            raise InvalidInputError(
                f"not deleting session {session!r}: no terminal to confirm on; pass --yes"
            )
        if not typer.confirm(f"Delete session {session!r} and all its messages?", default=False):
            note("not deleted")
            raise typer.Exit(1)

    async def main() -> None:
        async with connected(settings) as ms:
            manager = ms.session_manager()
            await _known(ms, manager, session)
            await manager.delete(session)

    run(main())
    if as_json:
        emit_json({"session_id": session, "deleted": True})
        return
    typer.echo(f"deleted session {session!r}")


def registered(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", help="At most this many sessions.")] = 20,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="Continue from where a page ended.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """List registered sessions (what `sessions create` made), most recently active first:
    name, model, source, usage, end reason. One page at a time; the next page's --cursor is
    printed after the table (JSON: the "cursor" field, null on the last page).

    Example: memstream sessions registered --limit 10 --cursor r42
    """
    settings = settings_of(ctx)
    check_int("limit", limit, minimum=1, maximum=LIST_LIMIT_MAX)

    async def main() -> dict[str, Any]:
        async with connected(settings) as ms:
            return await ms.session_manager().list_page(limit=limit, cursor=cursor)

    page = run(main())
    if as_json:
        emit_json(page)
    else:
        show_registered(page["sessions"])
        if page["cursor"] is not None:
            note(f"more: memstream sessions registered --limit {limit} --cursor {page['cursor']}")


@usage_app.command("add")
def add_usage(
    ctx: typer.Context,
    session: SessionArg,
    input_tokens: Annotated[int, typer.Argument(help="Input (prompt) tokens to add.")],
    output_tokens: Annotated[int, typer.Argument(help="Output (completion) tokens to add.")],
    cost: Annotated[float, typer.Argument(help="Cost to add (your currency).")],
    as_json: JsonFlag = False,
) -> None:
    """Add to a registered session's token and cost counters, and print them.

    Example: memstream usage add chat-1 1200 350 0.0042
    """
    settings = settings_of(ctx)
    check_session_id(session)

    async def main() -> Info:
        async with connected(settings) as ms:
            manager = ms.session_manager()
            await manager.add_usage(session, input_tokens, output_tokens, cost)
            return await _registered(manager, session)

    _show_info(run(main()), as_json, show_usage)


@usage_app.command("show")
def usage(ctx: typer.Context, session: SessionArg, as_json: JsonFlag = False) -> None:
    """Show a registered session's token and cost counters (JSON: the whole session info).

    Example: memstream usage show chat-1 --json
    """
    settings = settings_of(ctx)
    check_session_id(session)

    async def main() -> Info:
        async with connected(settings) as ms:
            return await _registered(ms.session_manager(), session)

    _show_info(run(main()), as_json, show_usage)
