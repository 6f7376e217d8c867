"""``memstream events ...``: the log as an audit trail (tail, show one, export as JSONL)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from memstream import InvalidInputError, admin
from memstream.admin import AGGREGATE_KINDS, AuditEvent, EventQuery, ImportResult, subject_filter
from memstream.cli.context import connected, run, settings_of, until_signal
from memstream.cli.output import (
    emit_json,
    emit_jsonl,
    event_line,
    import_progress,
    input_file,
    is_stdio,
    note,
    private_output,
    show_fields,
)
from memstream.domain.limits import check_int
from memstream.settings import Settings

app = typer.Typer(no_args_is_help=True, help="Read the log: every change, with who and why.")

SubjectOption = Annotated[
    str | None,
    typer.Option("--subject", help="NATS subject filter, e.g. 'ms.default.session.>'."),
]
TypeOption = Annotated[
    str | None,
    typer.Option("--type", help="Event type: the topic or its class name, e.g. MessageAppended."),
]


def parse_time(option: str, value: str | None) -> datetime | None:
    """An ISO 8601 time (UTC unless it names a zone).

    Raises:
        InvalidInputError: not an ISO 8601 time.
    """
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInputError(f"{option} {value!r} is not an ISO 8601 time") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@app.command("tail")
def tail(
    ctx: typer.Context,
    subject: SubjectOption = None,
    event_type: TypeOption = None,
    since_seq: Annotated[
        int | None, typer.Option("--since-seq", help="Start at this stream sequence (inclusive).")
    ] = None,
    count: Annotated[
        int, typer.Option("--last", "-n", help="How many of the latest events to show.")
    ] = 20,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new events until Ctrl-C.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSONL (as export).")] = False,
) -> None:
    """Show the latest events of the log, optionally following it.

    The last --last events, or every event from --since-seq on.

    Example: memstream events tail --type MessageAppended -n 5 --follow
    """
    settings = settings_of(ctx)
    check_int("--last", count, minimum=1, maximum=1_000_000)
    query = EventQuery(subject=subject, event_type=event_type, from_seq=since_seq)

    async def main() -> None:
        async with connected(settings, workers=False) as ms:
            async for event in admin.tail(ms, query, count=count, follow=follow):
                if as_json:
                    emit_jsonl(event.export_json())
                else:
                    typer.echo(event_line(event))

    run(until_signal(main()) if follow else main())


@app.command("show")
def show(
    ctx: typer.Context,
    seq: Annotated[int, typer.Argument(help="Stream sequence of the event.", show_default=False)],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (as export).")] = False,
) -> None:
    """Show one event: its subject, stored time, type, audit headers and payload.

    Example: memstream events show 42 --json
    """
    settings = settings_of(ctx)
    if seq < 1:
        raise InvalidInputError(f"sequence is {seq}; stream sequences start at 1")

    async def main() -> AuditEvent:
        async with connected(settings, workers=False) as ms:
            return await admin.event_at(ms, seq)

    event = run(main())
    if as_json:
        emit_json(event.export_json())
    else:
        fields = event.as_json()
        payload, headers = fields.pop("payload"), fields.pop("headers")
        show_fields({**fields, **headers, "payload": payload})


NamespaceOption = Annotated[
    str | None, typer.Option("--namespace", help="Only this namespace's events.")
]
AggregateOption = Annotated[
    str | None,
    typer.Option(
        "--aggregate",
        help=f"Only this aggregate kind's events: {', '.join(AGGREGATE_KINDS)}.",
    ),
]
IdOption = Annotated[
    str | None,
    typer.Option("--id", help="Only this aggregate's events: a session id, a profile name, ..."),
]


def event_query(
    prefix: str,
    *,
    subject: str | None,
    namespace: str | None,
    aggregate: str | None,
    identifier: str | None,
    **criteria: Any,
) -> EventQuery:
    """The query of the filter options (``--subject`` or the namespace/aggregate/id ones)."""
    if subject is not None and (namespace, aggregate, identifier) != (None, None, None):
        raise InvalidInputError(
            "--subject cannot be combined with --namespace, --aggregate or --id "
            "(they build the subject filter)"
        )
    if subject is None and (namespace, aggregate, identifier) != (None, None, None):
        subject = subject_filter(
            prefix,
            namespace=namespace,
            aggregate=aggregate,
            identifier=identifier,
        )
    return EventQuery(subject=subject, **criteria)


@app.command("export")
def export(
    ctx: typer.Context,
    subject: SubjectOption = None,
    namespace: NamespaceOption = None,
    aggregate: AggregateOption = None,
    identifier: IdOption = None,
    event_type: TypeOption = None,
    from_seq: Annotated[int | None, typer.Option("--from-seq", help="First sequence.")] = None,
    to_seq: Annotated[int | None, typer.Option("--to-seq", help="Last sequence.")] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Stored at or after (ISO 8601; UTC default).")
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", help="Stored at or before (ISO 8601; UTC default).")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write to this file (created readable by its owner only; - for stdout) "
            "instead of stdout.",
            metavar="FILE",
        ),
    ] = None,
) -> None:
    """Export events as JSONL, one object per event (a backup that events import restores).

    Each line has seq, subject, time, type, headers (command, causation and correlation ids,
    actor, originator id and version), nats_headers (the headers as stored) and payload.
    Filters combine with AND; bounds are inclusive; the export ends at the stream's last event
    when it starts.

    Example: memstream events export --namespace default --aggregate session -o sessions.jsonl
    """
    settings = settings_of(ctx)
    criteria: dict[str, Any] = {
        "subject": subject,
        "namespace": namespace,
        "aggregate": aggregate,
        "identifier": identifier,
        "event_type": event_type,
        "from_seq": from_seq,
        "to_seq": to_seq,
        "since": parse_time("--since", since),
        "until": parse_time("--until", until),
    }
    event_query(settings.subject_prefix, **criteria)  # bad filters fail before connecting

    async def main(file: IO[str]) -> int:
        async with connected(settings, workers=False) as ms:
            query = event_query(ms.core.log.subject_prefix, **criteria)
            return await admin.export_events(ms, query, file)

    if output is None or is_stdio(output):
        run(main(sys.stdout))
        return
    with private_output(output) as file:
        exported = run(main(file))
    note(f"exported {exported} events to {output}")


@app.command("import")
def import_(
    ctx: typer.Context,
    source: Annotated[
        Path,
        typer.Argument(
            help="An export (JSONL) made by events export; - for stdin.", show_default=False
        ),
    ],
    force: Annotated[
        bool,
        typer.Option("--force", help="Append to a stream that holds events already."),
    ] = False,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show a progress bar on stderr.")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Load an export into an empty stream: backup/restore, or migration between clusters.

    Every event keeps its message id, command id, actor, causation, correlation and payload;
    subjects take this stream's prefix. The whole file is checked before the first event is
    published. The read models then build from the imported log as from any other.

    Example: memstream --nats nats://other:4222 events import backup.jsonl
    (or, between two clusters: memstream events export | memstream --nats ... events import -)
    """
    settings = settings_of(ctx)
    with input_file(source) as path:
        result = _import(settings, path, force=force, progress=progress and not as_json)
    if as_json:
        emit_json(result.as_json())
    else:
        note(
            f"imported {result.stored} events ({result.duplicates} already stored); "
            f"the stream's last sequence is {result.last_seq}"
        )


def _import(settings: Settings, path: Path, *, force: bool, progress: bool) -> ImportResult:
    async def main() -> ImportResult:
        async with connected(settings, workers=False) as ms:
            with import_progress(enabled=progress) as (on_total, on_progress):
                return await admin.import_events(
                    ms, path, force=force, on_total=on_total, on_progress=on_progress
                )

    return run(main())
