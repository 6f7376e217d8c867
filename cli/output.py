"""Everything the CLI prints: JSON for scripts, rich tables and progress bars for people."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from memstream.admin import (
    AuditEvent,
    Difference,
    PlatformStatus,
    ProjectionStatus,
    PurgeReport,
    VerifyResult,
)
from memstream.cli.demo import DemoResult
from memstream.cli.logs import JsonFormatter
from memstream.domain.errors import InvalidInputError
from memstream.domain.redaction import redact
from memstream.platform import open_private, os_reason

# A file argument that means standard input or output.
STDIO = "-"

Message = dict[str, Any]


def stdout() -> Console:
    return Console(highlight=False)


def stderr() -> Console:
    return Console(stderr=True, highlight=False)


def emit_json(data: Any) -> None:
    """One JSON document on stdout."""
    typer.echo(json.dumps(data, ensure_ascii=False, indent=2, default=str))


def emit_jsonl(data: Any, file: IO[str] | None = None) -> None:
    """One JSON object on one line (JSONL), to stdout or ``file``."""
    typer.echo(json.dumps(data, ensure_ascii=False, default=str), file=file)


def note(text: str) -> None:
    """A line for the person at the terminal, on stderr (keeps stdout clean for pipes); a URL's
    password or token in it is masked. Under ``--log-format json`` it is a log record (INFO,
    logger ``memstream.cli``), so that every line of stderr is JSON."""
    if logging.getLogger().handlers and isinstance(
        logging.getLogger().handlers[0].formatter, JsonFormatter
    ):
        logging.getLogger("memstream.cli").info("%s", text)
        return
    typer.echo(redact(text), err=True)


def message_text(message: Mapping[str, Any]) -> str:
    """The readable text of a message: its text parts, else its parts as JSON."""
    parts = message.get("parts")
    if isinstance(parts, list):
        texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
        if texts:
            return "\n".join(texts)
    return json.dumps(parts if parts is not None else message, ensure_ascii=False)


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", show_lines=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _cells(*values: object) -> list[Text]:
    return [Text(str(v)) for v in values]  # Text: user content is never read as rich markup


def show_history(
    session_id: str, messages: Sequence[Mapping[str, Any]], leaf: str | None = None
) -> None:
    if not messages:
        found = f"no message {leaf!r} in session" if leaf else "no messages in session"
        stdout().print(Text(f"{found} {session_id!r}"))
        return
    table = _table(f"session {session_id!r}: {len(messages)} messages", "id", "role", "text")
    for message in messages:
        table.add_row(*_cells(message.get("id"), message.get("role"), message_text(message)))
    stdout().print(table)


def show_sessions(sessions: Sequence[dict[str, Any]]) -> None:
    if not sessions:
        stdout().print(Text("no sessions"))
        return
    table = _table(f"{len(sessions)} sessions", "session", "messages", "first", "last")
    for row in sessions:
        table.add_row(
            *_cells(row["session_id"], row["messages"], row["first_at"] or "", row["last_at"] or "")
        )
    stdout().print(table)


def show_registered(sessions: Sequence[dict[str, Any]]) -> None:
    """Registered sessions (``SessionInfo`` rows), in the order given."""
    if not sessions:
        stdout().print(Text("no registered sessions"))
        return
    table = _table(
        f"{len(sessions)} registered sessions",
        "id",
        "name",
        "model",
        "source",
        "tokens in/out",
        "cost",
        "ended",
        "updated",
    )
    for info in sessions:
        table.add_row(
            *_cells(
                info["id"],
                info["name"],
                info["model"] or "",
                info["source"] or "",
                f"{info['input_tokens']}/{info['output_tokens']}",
                info["estimated_cost"],
                info["end_reason"] or "",
                info["updated_at"],
            )
        )
    stdout().print(table)


def show_usage(info: dict[str, Any]) -> None:
    """A registered session's usage counters."""
    keys = ("id", "name", "input_tokens", "output_tokens", "estimated_cost")
    show_fields({key: info[key] for key in keys})


def show_fields(fields: dict[str, Any]) -> None:
    """One ``name  value`` line per field (lists joined by commas, dicts as indented JSON)."""
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in fields.items():
        if isinstance(value, list):
            text = ", ".join(str(v) for v in value)
        elif isinstance(value, dict):
            text = json.dumps(value, ensure_ascii=False, indent=2)
        else:
            text = "" if value is None else str(value)
        table.add_row(key.replace("_", " "), Text(text))
    stdout().print(table)


def show_hits(query: str, hits: Sequence[Mapping[str, Any]]) -> None:
    if not hits:
        stdout().print(Text(f"no messages match {query!r}"))
        return
    title = f"{len(hits)} {'match' if len(hits) == 1 else 'matches'} for {query!r}"
    table = _table(title, "session", "id", "role", "text")
    for hit in hits:
        table.add_row(*_cells(hit.get("session_id"), hit["id"], hit["role"], hit["content"]))
    stdout().print(table)


def show_blocks(blocks: Sequence[dict[str, Any]]) -> None:
    if not blocks:
        stdout().print(Text("no context blocks"))
        return
    table = _table(f"{len(blocks)} context blocks", "key", "label", "session", "tokens", "updated")
    for block in blocks:
        table.add_row(
            *_cells(
                block["key"],
                block["label"],
                block["session_id"] or "",
                block["tokens"],
                block["updated_at"],
            )
        )
    stdout().print(table)


def show_projections(statuses: Sequence[ProjectionStatus]) -> None:
    table = _table("projections", "name", "tracked seq", "lag")
    for status in statuses:
        table.add_row(*_cells(status.name, status.tracked_seq, status.lag))
    stdout().print(table)


def show_status(status: PlatformStatus) -> None:
    console = stdout()
    stream = status.stream
    console.print(
        Text(
            f"stream {stream.name}: {stream.messages} messages, {stream.bytes} bytes, "
            f"sequences {stream.first_seq}..{stream.last_seq}"
        )
    )
    consumers = _table("consumers", "name", "durable", "pending", "ack pending", "ack floor")
    for c in status.consumers:
        consumers.add_row(
            *_cells(
                c.name, "yes" if c.durable else "no", c.num_pending, c.num_ack_pending, c.ack_floor
            )
        )
    console.print(consumers)
    copies = _table("read-model copies", "copy", "consumers", "ack floor", "lag", "this data dir")
    for copy in status.copies:
        copies.add_row(
            *_cells(
                copy.copy_id,
                ", ".join(copy.consumers),
                copy.ack_floor,
                copy.lag,
                "yes" if copy.local else "",
            )
        )
    console.print(copies)
    console.print(Text(f"this data dir's read-model copy: {status.copy_id}"))
    if status.log_gap is not None:
        console.print(Text(status.log_gap))
    for sync in status.durability:
        console.print(Text(f"durability: {sync.describe()}"))
    if status.replicas:
        replicas = _table("stream replicas", "server", "leader", "current", "offline", "lag")
        for r in status.replicas:
            replicas.add_row(
                *_cells(
                    r.server,
                    "yes" if r.leader else "",
                    "yes" if r.current else "no",
                    "yes" if r.offline else "",
                    r.lag,
                )
            )
        console.print(replicas)
    show_projections(status.projections)
    console.print(Text(f"dead letters: {status.dead_letter_count}"))
    if status.dead_letters:
        letters = _table("latest dead letters", "projection", "seq", "subject", "type", "error")
        for letter in status.dead_letters:
            letters.add_row(
                *_cells(
                    letter["projection"],
                    letter["seq"],
                    letter["subject"],
                    letter["topic"],
                    letter["error"],
                )
            )
        console.print(letters)


def verify_json(
    results: Sequence[VerifyResult], comparable: dict[str, bool]
) -> list[dict[str, Any]]:
    return [
        {
            "projection": r.projection,
            "seq": r.seq,
            "live": r.live,
            "rebuilt": r.rebuilt,
            "comparable": comparable[r.projection],
            "ok": r.ok if comparable[r.projection] else None,
            "difference": _difference_json(r.difference) if comparable[r.projection] else None,
        }
        for r in results
    ]


DIFFERENCE_VALUE_CHARS = 200


def _short(value: object) -> object:
    if isinstance(value, str) and len(value) > DIFFERENCE_VALUE_CHARS:
        return value[:DIFFERENCE_VALUE_CHARS] + f"… ({len(value)} characters)"
    return value


def _difference_json(difference: Difference | None) -> dict[str, Any] | None:
    """Where a live read model first differs from its rebuild (long values shortened)."""
    if difference is None:
        return None
    return {
        "part": difference.part,
        "live": None if difference.live is None else [_short(v) for v in difference.live],
        "rebuilt": None if difference.rebuilt is None else [_short(v) for v in difference.rebuilt],
    }


def show_verify(results: Sequence[VerifyResult], comparable: dict[str, bool]) -> None:
    table = _table(
        "checksums (SHA-256, first 16 hex digits)",
        "projection",
        "seq",
        "live",
        "rebuilt",
        "verdict",
    )
    for r in results:
        verdict = (
            ("equal" if r.ok else "DIFFERENT") if comparable[r.projection] else "live is elsewhere"
        )
        table.add_row(*_cells(r.projection, r.seq, r.live[:16], r.rebuilt[:16], verdict))
    stdout().print(table)
    for r in results:
        found = _difference_json(r.difference) if comparable[r.projection] else None
        if found is not None:
            stdout().print(Text(f"{r.projection}: first difference in {found['part']}"))
            stdout().print(Text(f"  live:    {json.dumps(found['live'], ensure_ascii=False)}"))
            stdout().print(Text(f"  rebuilt: {json.dumps(found['rebuilt'], ensure_ascii=False)}"))


def event_line(event: AuditEvent) -> str:
    """One human-readable line per event (``tail`` without ``--json``)."""
    kind = event.type.rpartition(":")[2] or "?"
    actor = event.headers.get("actor", "")
    return f"{event.seq:>8}  {event.time:%Y-%m-%d %H:%M:%S}  {event.subject}  {kind}  {actor}"


def show_stats(rows: Sequence[dict[str, Any]], dimensions: Sequence[str]) -> None:
    """Daily volumes: one row per group, a column per volume (memories: their sum)."""
    table = _table(
        "daily volumes",
        *dimensions,
        "sessions",
        "messages",
        "input tokens",
        "output tokens",
        "cost",
        "memories",
        "remembered",
        "ingested",
        "ingested bytes",
    )
    for row in rows:
        table.add_row(
            *_cells(
                *(row[d] or "-" for d in dimensions),
                row["sessions"],
                row["messages"],
                row["input_tokens"],
                row["output_tokens"],
                f"{row['cost']:.4f}",
                sum(row["memories"].values()),
                row["remembered"],
                row["ingested_messages"],
                row["ingested_bytes"],
            )
        )
    stdout().print(table)


def show_purge(report: PurgeReport) -> None:
    verb = "would erase" if report.dry_run else "erased"
    if report.units:
        table = _table(
            f"{verb}: deleted before {report.deleted_before.isoformat(timespec='seconds')}",
            "kind",
            "namespace",
            "id",
            "deleted at",
            "subjects",
            "events",
        )
        for unit in report.units:
            table.add_row(
                *_cells(
                    unit.kind,
                    unit.namespace,
                    unit.identifier,
                    unit.deleted_at.isoformat(timespec="seconds"),
                    len(unit.subjects),
                    unit.events,
                )
            )
        stdout().print(table)
    for skip in report.skipped:
        note(f"skipped session {skip.identifier!r} of {skip.namespace!r}: {skip.reason}")
    for copy in report.copies_behind:
        note(
            f"warning: read-model copy {copy.copy_id} ({', '.join(copy.consumers)}) has applied "
            f"the stream up to {copy.ack_floor}, before the events "
            + ("to be erased: it would keep" if report.dry_run else "erased: it keeps")
            + " what it held of them until it is rebuilt (memstream projections rebuild) or "
            "forgotten (memstream projections forget-copy)"
        )
    if report.deletes_denied and report.units:
        note(
            "warning: this stream denies message deletes (created by an older memstream): "
            "the purge takes the events out of the stream, but nats-server keeps their bytes "
            "in its files until their blocks go; to erase them for good, export the stream and "
            "import it into a new one (memstream events export / events import)"
        )
    sessions = sum(1 for unit in report.units if unit.kind == "session")
    profiles = len(report.units) - sessions
    events = report.events if report.dry_run else report.erased
    note(
        f"{verb} {events} events of {sessions} sessions and {profiles} profiles "
        f"({report.subjects} subjects)"
        + (
            f"; recorded at sequence {', '.join(map(str, report.records))}"
            if report.records
            else ""
        )
    )


@contextmanager
def private_output(path: Path) -> Iterator[IO[str]]:
    """``path`` (its real path) opened for writing, created readable by its owner only;
    standard output for ``-``.

    Raises:
        InvalidInputError: it cannot be written.
    """
    if is_stdio(path):
        yield sys.stdout
        sys.stdout.flush()
        return
    real = path.expanduser().resolve()
    try:
        fd = open_private(real, os.O_WRONLY | os.O_TRUNC)
    except OSError as error:
        raise InvalidInputError(f"cannot write {real}: {os_reason(error)}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        yield file


def is_stdio(path: Path | str | None) -> bool:
    """Whether a file argument is ``-``: standard input or output."""
    return path is not None and str(path) == STDIO


def readable_file(path: Path) -> Path:
    """The real path of a regular file to read.

    Raises:
        InvalidInputError: it does not exist, is no regular file or cannot be read.
    """
    real = path.expanduser().resolve()
    if not real.is_file():
        raise InvalidInputError(f"{real} is not a file")
    if not os.access(real, os.R_OK):
        raise InvalidInputError(f"cannot read {real}: permission denied")
    return real


@contextmanager
def input_file(path: Path) -> Iterator[Path]:
    """The real path of a regular file to read (:func:`readable_file`); for ``-``, standard
    input kept in a temporary file readable by its owner only (a reader may go through it
    twice, checking it whole before it acts), removed afterwards."""
    if not is_stdio(path):
        yield readable_file(path)
        return
    with tempfile.TemporaryDirectory(prefix="memstream-stdin-") as folder:  # mode 0700
        spool = Path(folder) / "stdin"
        with os.fdopen(os.open(spool, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
            shutil.copyfileobj(sys.stdin.buffer, out)
        yield spool


def read_text(path: Path, option: str) -> str:
    """The text of the file ``path`` names (standard input for ``-``).

    Raises:
        InvalidInputError: it cannot be read as UTF-8 text; the message names ``option``.
    """
    try:
        if is_stdio(path):
            return sys.stdin.buffer.read().decode("utf-8")
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInputError(f"cannot read {option} {path}: {error}") from None


@contextmanager
def import_progress(
    *, enabled: bool
) -> Iterator[tuple[Callable[[int], None], Callable[[int], None]]]:
    """(on_total, on_progress) callbacks driving a progress bar of an import on stderr."""
    done = total = 0
    with progress_bar("importing") as update:

        def on_total(count: int) -> None:
            nonlocal total
            total = count
            if enabled:
                update(done, total)

        def on_progress(count: int) -> None:
            nonlocal done
            done += count
            if enabled:
                update(done, total)

        yield on_total, on_progress


@contextmanager
def progress_bar(description: str) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on stderr, shown from the first ``progress(done, total)`` call on."""
    progress: Progress | None = None
    task: TaskID | None = None

    def update(done: int, total: int) -> None:
        nonlocal progress, task
        if progress is None or task is None:
            progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=stderr(),
            )
            progress.start()
            task = progress.add_task(description, total=total)
        progress.update(task, completed=done, total=total)

    try:
        yield update
    finally:
        if progress is not None:
            progress.stop()


def show_platform(url: str, data_dir: str, stream: str, namespace: str, role: str) -> None:
    """Where ``memstream up`` runs: NATS URL, data dir, stream, namespace, who projects."""
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in (
        ("NATS", url),
        ("data dir", data_dir),
        ("stream", stream),
        ("namespace", namespace),
        ("projector", role),
    ):
        table.add_row(key, Text(value))
    stdout().print(table)


def show_demo(demo: DemoResult) -> None:
    """The ``up --demo`` tour: history of the latest branch, the fork, a search, the status."""
    console = stdout()
    console.print()
    show_history(demo.session_id, demo.history)
    ids = ", ".join(str(m.get("id")) for m in demo.branches)
    console.print(Text(f"{demo.branch_point} has {len(demo.branches)} branches: {ids}"))
    console.print()
    show_hits(demo.query, [{"session_id": demo.session_id, **hit} for hit in demo.hits])
    console.print()
    console.print(Text(f"set_context → {demo.tool_reply}"))
    console.print(Text("frozen system prompt:", style="bold"))
    console.print(Text(demo.prompt))
    console.print()
    console.print(Text(f"agent memory: recall({demo.memory_question!r})", style="bold"))
    console.print(Text(f"answer: {demo.recall['answer'] or '(nothing)'}"))
    for candidate in demo.recall["candidates"][:3]:
        console.print(
            Text(f"  {candidate['score']:.3f}  {candidate['type']:<11} {candidate['summary']}")
        )
    console.print()
    show_status(demo.status)
