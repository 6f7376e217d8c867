"""``memstream memory ...``: Agent Memory profiles from the command line (spec memory.md)."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Annotated, Any, TypeVar

import typer

from memstream import InvalidInputError
from memstream.agent_memory import Profile
from memstream.cli.context import connected, run, settings_of
from memstream.cli.output import emit_json, is_stdio, note, progress_bar
from memstream.domain.limits import BATCH_MAX_MESSAGES

T = TypeVar("T")

app = typer.Typer(
    no_args_is_help=True,
    help="Agent Memory: profiles, ingest, recall, memories.\n\n"
    'Example: memstream memory recall alice "Where does Alice live?"',
)

NamespaceOpt = Annotated[
    str, typer.Option("--namespace", "-n", help="The memory namespace.", show_default=True)
]
ProfileArg = Annotated[str, typer.Argument(help="The profile.", show_default=False)]
MemoryArg = Annotated[str, typer.Argument(help="A memory id.", show_default=False)]
SessionOpt = Annotated[
    str | None, typer.Option("--session", help="The memory session id.", show_default=False)
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _with_profile(
    ctx: typer.Context, namespace: str, name: str, work: Callable[[Profile], Awaitable[T]]
) -> T:
    settings = settings_of(ctx)

    async def main() -> T:
        async with connected(settings) as ms:
            profile = await ms.agent_memory(namespace).get_profile(name)
            return await work(profile)

    return run(main())


def _print(data: Any, as_json: bool, text: Callable[[Any], str]) -> None:
    if as_json:
        emit_json(data)
    else:
        typer.echo(text(data))


def _memory_line(memory: dict[str, Any]) -> str:
    flags = " (superseded)" if memory.get("superseded_by") else ""
    return f"{memory['id']}  {memory['type']:<11} {memory['summary']}{flags}"


@app.command("profiles")
def profiles(
    ctx: typer.Context, namespace: NamespaceOpt = "default", as_json: JsonFlag = False
) -> None:
    """List the profiles of a namespace with their memory and message counts.

    Example: memstream memory profiles --namespace default
    """
    settings = settings_of(ctx)

    async def main() -> list[dict[str, Any]]:
        async with connected(settings) as ms:
            return await ms.agent_memory(namespace).list_profiles()

    _print(
        run(main()),
        as_json,
        lambda rows: (
            "\n".join(
                f"{r['name']}  memories {r['memories']}  messages {r['messages']}  "
                f"updated {r['updated_at']}"
                for r in rows
            )
            or "no profiles"
        ),
    )


@app.command("ingest")
def ingest(
    ctx: typer.Context,
    profile: ProfileArg,
    file: Annotated[
        Path,
        typer.Argument(
            help="JSONL (- for stdin): one message per line, {role, content, timestamp?}; a "
            "line may carry session_id, which then overrides --session for it.",
            show_default=False,
        ),
    ],
    session: SessionOpt = None,
    namespace: NamespaceOpt = "default",
    as_json: JsonFlag = False,
) -> None:
    """Ingest a conversation from a JSONL file (in batches of 500, with a progress bar) and
    wait until its memories are recallable.

    Example: memstream memory ingest alice chat.jsonl --session s1
    """
    path = Path("<stdin>") if is_stdio(file) else file.expanduser().resolve()
    batches: dict[str | None, list[dict[str, Any]]] = {}
    try:
        with _lines(file) as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                except ValueError as error:
                    raise InvalidInputError(f"{path}:{number} is not JSON: {error}") from None
                if not isinstance(item, dict):
                    raise InvalidInputError(f"{path}:{number} is not a JSON object")
                sid = item.pop("session_id", session)
                batches.setdefault(sid, []).append(item)
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or error
        raise InvalidInputError(f"cannot read {path}: {reason}") from None
    total = sum(len(items) for items in batches.values())

    async def work(p: Profile) -> dict[str, Any]:
        done = 0
        with progress_bar("ingesting") as progress:
            for sid, items in batches.items():
                for start in range(0, len(items), BATCH_MAX_MESSAGES):
                    chunk = items[start : start + BATCH_MAX_MESSAGES]
                    await p.ingest(chunk, session_id=sid)
                    done += len(chunk)
                    progress(done, total)
        listed = await p.list(limit=1)
        return {"profile": p.name, "messages": total, "newest": listed["memories"][:1]}

    result = _with_profile(ctx, namespace, profile, work)
    _print(result, as_json, lambda r: f"ingested {r['messages']} messages into {r['profile']}")


@app.command("remember")
def remember(
    ctx: typer.Context,
    profile: ProfileArg,
    content: Annotated[str, typer.Argument(help="What to remember.", show_default=False)],
    session: SessionOpt = None,
    namespace: NamespaceOpt = "default",
    as_json: JsonFlag = False,
) -> None:
    """Store one memory explicitly (classified and summarised), and print it.

    Example: memstream memory remember alice "Prefers answers in French"
    """
    memory = _with_profile(
        ctx, namespace, profile, lambda p: p.remember(content, session_id=session)
    )
    _print(memory, as_json, _memory_line)


@app.command("recall")
def recall(
    ctx: typer.Context,
    profile: ProfileArg,
    query: Annotated[str, typer.Argument(help="The question.", show_default=False)],
    thinking_level: Annotated[
        str, typer.Option("--thinking-level", help="low | medium | high")
    ] = "low",
    response_length: Annotated[
        str, typer.Option("--response-length", help="short | medium | long")
    ] = "medium",
    reference_date: Annotated[
        str | None,
        typer.Option("--reference-date", help="ISO time relative dates count from (default now)."),
    ] = None,
    namespace: NamespaceOpt = "default",
    as_json: JsonFlag = False,
) -> None:
    """Answer a question from a profile's memories, with the scored candidates.

    Example: memstream memory recall alice "Where does Alice live?" --thinking-level medium
    """
    result = _with_profile(
        ctx,
        namespace,
        profile,
        lambda p: p.recall(
            query,
            thinking_level=thinking_level,
            response_length=response_length,
            reference_date=reference_date,
        ),
    )

    def text(r: dict[str, Any]) -> str:
        lines = [r["answer"] or "(nothing found)"]
        lines += [
            f"{c['score']:.3f}  {c['id']}  {c['type']:<11} {c['summary']}" for c in r["candidates"]
        ]
        return "\n".join(lines)

    _print(result, as_json, text)


@app.command("list")
def list_memories(
    ctx: typer.Context,
    profile: ProfileArg,
    limit: Annotated[int, typer.Option("--limit", help="Page size, 1–500.")] = 20,
    cursor: Annotated[str | None, typer.Option("--cursor", help="From list's cursor.")] = None,
    memory_type: Annotated[
        str | None, typer.Option("--type", help="fact | event | instruction | task")
    ] = None,
    session: SessionOpt = None,
    namespace: NamespaceOpt = "default",
    as_json: JsonFlag = False,
) -> None:
    """List a page of memories, newest first (the cursor of the next page is printed last).

    Example: memstream memory list alice --type fact --limit 50
    """
    page = _with_profile(
        ctx,
        namespace,
        profile,
        lambda p: p.list(limit=limit, cursor=cursor, session_id=session, type=memory_type),
    )

    def text(r: dict[str, Any]) -> str:
        lines = [_memory_line(m) for m in r["memories"]] or ["no memories"]
        if r.get("cursor"):
            lines.append(f"next page: --cursor {r['cursor']}")
        return "\n".join(lines)

    _print(page, as_json, text)


@app.command("get")
def get(
    ctx: typer.Context,
    profile: ProfileArg,
    memory_id: MemoryArg,
    namespace: NamespaceOpt = "default",
    as_json: JsonFlag = False,
) -> None:
    """Show one memory with its content and source messages.

    Example: memstream memory get alice 5f2c...
    """
    memory = _with_profile(ctx, namespace, profile, lambda p: p.get(memory_id))
    _print(memory, as_json, lambda m: json.dumps(m, indent=2, ensure_ascii=False))


@app.command("delete")
def delete(
    ctx: typer.Context,
    profile: ProfileArg,
    memory_id: MemoryArg,
    namespace: NamespaceOpt = "default",
    as_json: JsonFlag = False,
) -> None:
    """Delete a memory and the raw messages it came from.

    Example: memstream memory delete alice 5f2c...
    """
    memory = _with_profile(ctx, namespace, profile, lambda p: p.delete(memory_id))
    _print(memory, as_json, lambda m: f"deleted {m['id']}")


@app.command("forget-session")
def forget_session(
    ctx: typer.Context,
    profile: ProfileArg,
    session: Annotated[str, typer.Argument(help="The memory session id.", show_default=False)],
    namespace: NamespaceOpt = "default",
    as_json: JsonFlag = False,
) -> None:
    """Forget every memory and message of a session (an unknown session: nothing to do).

    Example: memstream memory forget-session alice s1
    """
    _with_profile(ctx, namespace, profile, lambda p: p.delete_session(session))
    if as_json:
        emit_json({"profile": profile, "session_id": session, "forgotten": True})
        return
    note(f"forgot session {session} of {profile}")


@app.command("summary")
def summary(
    ctx: typer.Context,
    profile: ProfileArg,
    session: SessionOpt = None,
    namespace: NamespaceOpt = "default",
    as_json: JsonFlag = False,
) -> None:
    """Print the profile's summary (markdown: Key Facts, Recent Events, Active Tasks, Last
    Session, Instructions).

    Example: memstream memory summary alice
    """
    result = _with_profile(ctx, namespace, profile, lambda p: p.get_summary(session_id=session))
    _print(result, as_json, lambda r: r["summary"] or "(nothing yet)")


@app.command("history")
def history(
    ctx: typer.Context,
    profile: ProfileArg,
    memory_id: MemoryArg,
    namespace: NamespaceOpt = "default",
    as_json: JsonFlag = False,
) -> None:
    """Show a memory's topic chain, oldest first: what it superseded, what superseded it.

    Example: memstream memory history alice 5f2c...
    """
    chain = _with_profile(ctx, namespace, profile, lambda p: p.history(memory_id))
    _print(
        chain,
        as_json,
        lambda rows: "\n".join(
            f"{'*' if r['current'] else ' '} {r['created_at']}  {_memory_line(r)}" for r in rows
        ),
    )


@app.command("delete-profile")
def delete_profile(
    ctx: typer.Context,
    profile: ProfileArg,
    namespace: NamespaceOpt = "default",
    as_json: JsonFlag = False,
) -> None:
    """Delete a profile with all its memories and messages.

    Example: memstream memory delete-profile alice
    """
    settings = settings_of(ctx)

    async def main() -> None:
        async with connected(settings) as client:
            await client.agent_memory(namespace).delete_profile(profile)

    run(main())
    if as_json:
        emit_json({"profile": profile, "namespace": namespace, "deleted": True})
        return
    note(f"deleted profile {profile}")


@contextmanager
def _lines(file: Path) -> Iterator[IO[str]]:
    """The lines of ``file`` (standard input for ``-``)."""
    if is_stdio(file):
        yield io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", newline=None)
        return
    with file.expanduser().resolve().open(encoding="utf-8") as lines:
        yield lines
