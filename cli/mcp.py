"""``memstream mcp``: the session and memory tools as an MCP server (stdio or HTTP)."""

from __future__ import annotations

from typing import Annotated

import typer

from memstream.cli.context import (
    configure_logging,
    connected,
    run,
    settings_of,
    until_signal,
)
from memstream.domain.errors import InvalidInputError
from memstream.domain.limits import check_session_id


def mcp(
    ctx: typer.Context,
    session: Annotated[
        str,
        typer.Option(
            "--session", help="The session whose tools are served (default: the default session)."
        ),
    ] = "",
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile", help="Serve this Agent Memory profile's remember/recall/list/forget."
        ),
    ] = None,
    context: Annotated[
        list[str] | None,
        typer.Option(
            "--context",
            help="A writable block LABEL[:MAX_TOKENS] of the session "
            "(repeatable; default: memory).",
        ),
    ] = None,
    no_search: Annotated[
        bool,
        typer.Option("--no-search", help="Leave out session_search (search over all sessions)."),
    ] = False,
    http: Annotated[
        int | None,
        typer.Option(
            "--http",
            min=1,
            max=65535,
            help="Serve streamable HTTP on this port (path /mcp) instead of stdio.",
        ),
    ] = None,
    host: Annotated[
        str, typer.Option("--host", help="The address --http listens on.")
    ] = "127.0.0.1",
) -> None:
    """Serve the session tools (set_context, load_context, unload_context, search_context,
    session_search) and a profile's memory tools to MCP clients.

    Example: memstream mcp --session chat-1 --context memory:500 --profile alice
    """
    try:
        from memstream.mcp_server import DEFAULT_BLOCK, BlockOption, MemstreamTools, serve
    except ModuleNotFoundError as error:  # the optional mcp package
        raise InvalidInputError(
            f"memstream mcp needs the mcp package ({error.name} is missing): "
            "pip install 'memstream[mcp]'"
        ) from None
    check_session_id(session)
    blocks = [BlockOption.parse(text) for text in (context or [DEFAULT_BLOCK])]
    settings = settings_of(ctx)
    configure_logging(ctx)  # (stderr: stdout is the protocol's)

    async def main() -> None:
        async with connected(settings) as ms:
            tools = MemstreamTools(
                ms, session_id=session, blocks=blocks, profile=profile, search=not no_search
            )
            await until_signal(serve(tools, http_port=http, host=host))

    run(main())
