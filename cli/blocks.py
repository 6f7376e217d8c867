"""``memstream context ...`` and ``memstream prompt ...``: built-in context blocks and the
frozen system prompts of sessions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from memstream import InvalidInputError, NotFoundError
from memstream.cli.as_of import AsOfOption, reading
from memstream.cli.context import connected, run, settings_of
from memstream.cli.output import emit_json, note, read_text, show_blocks, stdout
from memstream.domain.context import check_label, prompt_store_key, storage_key
from memstream.domain.limits import check_session_id
from memstream.domain.tokens import estimate_string_tokens

app = typer.Typer(no_args_is_help=True, help="Built-in context blocks (stored on the log).")
prompt_app = typer.Typer(no_args_is_help=True, help="Frozen system prompts of sessions.")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
LabelArg = Annotated[str, typer.Argument(help="Block label.", show_default=False)]
SessionOpt = Annotated[
    str, typer.Option("--session", help='Session id the block belongs to ("" for none).')
]


def _row(block: dict[str, Any]) -> dict[str, Any]:
    return {**block, "tokens": estimate_string_tokens(block["content"])}


@app.command("list")
def list_blocks(
    ctx: typer.Context,
    session: Annotated[
        str | None, typer.Option("--session", help="Only this session's blocks.")
    ] = None,
    as_of: AsOfOption = None,
    as_json: JsonFlag = False,
) -> None:
    """List the built-in context blocks of the namespace (key, label, session, tokens).

    Example: memstream context list --session chat-1
    """
    settings = settings_of(ctx)
    if session is not None:
        check_session_id(session)

    async def main() -> list[dict[str, Any]]:
        async with reading(settings, as_of, "context") as reads:
            return [_row(b) for b in reads.context.blocks(reads.namespace, session)]

    blocks = run(main())
    if as_json:
        emit_json(blocks)
    else:
        show_blocks(blocks)


@app.command("show")
def show(
    ctx: typer.Context,
    label: LabelArg,
    session: SessionOpt = "",
    as_of: AsOfOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Print a built-in block's content (--as-of: as it was then).

    Example: memstream context show memory --session chat-1 --as-of 2026-01-01T00:00
    """
    settings = settings_of(ctx)
    key = storage_key(check_label(label), check_session_id(session))

    async def main() -> str | None:
        async with reading(settings, as_of, "context") as reads:
            return reads.context.block_content(reads.namespace, label, session)

    content = run(main())
    if content is None:
        raise NotFoundError(f'no block "{label}" in session {session!r} (key {key!r})')
    if as_json:
        emit_json({"label": label, "session_id": session, "key": key, "content": content})
    else:
        stdout().out(content, highlight=False)


@app.command("set")
def set_block(
    ctx: typer.Context,
    label: LabelArg,
    content: Annotated[
        str | None, typer.Argument(help="New content (or use --file).", show_default=False)
    ] = None,
    file: Annotated[
        Path | None, typer.Option("--file", help="Read the content from this file (- for stdin).")
    ] = None,
    append: Annotated[
        bool, typer.Option("--append", help="Append (a newline between) instead of replacing.")
    ] = False,
    max_tokens: Annotated[
        int | None, typer.Option("--max-tokens", help="Refuse content over this estimate.")
    ] = None,
    session: SessionOpt = "",
    as_json: JsonFlag = False,
) -> None:
    """Write a built-in block through the log, as the set_context tool does.

    Example: memstream context set memory "User likes tea" --session chat-1 --append
    """
    settings = settings_of(ctx)
    if (content is None) == (file is None):
        raise InvalidInputError("give the content or --file, not both or neither")
    text = content if content is not None else _read(file)

    async def main() -> dict[str, Any]:
        async with connected(settings) as ms:
            builder = ms.session(session).with_context(label, max_tokens=max_tokens)
            if append:
                block = await builder.append_context_block(label, text)
            else:
                block = await builder.replace_context_block(label, text)
            return {"label": label, "session_id": session, "tokens": block.tokens}

    written = run(main())
    if as_json:
        emit_json(written)
    else:
        note(f"wrote {label!r} ({written['tokens']} tokens)")


def _read(file: Path | None) -> str:
    assert file is not None
    return read_text(file, "--file")


@prompt_app.command("show")
def show_prompt(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="Session id.", show_default=False)],
    as_json: JsonFlag = False,
) -> None:
    """Print a session's frozen (cached) system prompt.

    Example: memstream prompt show chat-1
    """
    settings = settings_of(ctx)
    check_session_id(session)

    async def main() -> str | None:
        async with connected(settings) as ms:
            await ms.sync("context")
            return ms.core.reads.context_queries.cached_prompt(ms.namespace, session)

    prompt = run(main())
    if as_json:
        emit_json({"session_id": session, "key": prompt_store_key(session), "prompt": prompt})
    elif prompt is None:
        note(f"session {session!r} has no frozen prompt")
    else:
        stdout().out(prompt, highlight=False)
