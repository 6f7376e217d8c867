"""``memstream events ...``: the log as an audit trail (tail, show one, export as JSONL)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from memstream import InvalidInputError, NotFoundError
from memstream.cli.context import connected, run, settings_of, until_signal
from memstream.cli.output import emit_json, emit_jsonl, event_line, note, show_fields
from memstream.domain.limits import check_int
from memstream.workers.audit import AuditEvent, EventQuery, read_events, tail_events

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
            async for event in tail_events(ms.log, query, count=count, follow=follow):
                if as_json:
                    emit_jsonl(event.as_json())
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
    query = EventQuery(from_seq=seq, to_seq=seq)

    async def main() -> AuditEvent:
        async with connected(settings, workers=False) as ms:
            async for event in read_events(ms.log, query):
                return event
            last = await ms.log.stream_last_seq()
        raise NotFoundError(f"no event at sequence {seq}; the log's last sequence is {last}")

    event = run(main())
    if as_json:
        emit_json(event.as_json())
    else:
        fields = event.as_json()
        payload, headers = fields.pop("payload"), fields.pop("headers")
        show_fields({**fields, **headers, "payload": payload})


@app.command("export")
def export(
    ctx: typer.Context,
    subject: SubjectOption = None,
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
        typer.FileTextWrite | None,
        typer.Option(
            "--output",
            "-o",
            help="Write to this file instead of stdout.",
            lazy=False,
            metavar="FILE",
        ),
    ] = None,
) -> None:
    """Export events as JSONL, one object per event.

    Each line has seq, subject, time, type, headers (command, causation and correlation ids,
    actor, originator id and version) and payload. Bounds are inclusive; the export ends at the
    stream's last event when it starts.

    Example: memstream events export --type MessageAppended --since 2025-01-01 -o audit.jsonl
    """
    settings = settings_of(ctx)
    query = EventQuery(
        subject=subject,
        event_type=event_type,
        from_seq=from_seq,
        to_seq=to_seq,
        since=parse_time("--since", since),
        until=parse_time("--until", until),
    )

    async def main() -> int:
        exported = 0
        async with connected(settings, workers=False) as ms:
            async for event in read_events(ms.log, query):
                emit_jsonl(event.as_json(), file=output)
                exported += 1
        return exported

    exported = run(main())
    if output is not None:
        note(f"exported {exported} events to {output.name}")
