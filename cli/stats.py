"""``memstream stats``: daily volumes from the analytics projection, as a table, JSON or a
chart."""

from __future__ import annotations

import os
import sys
from datetime import date, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

from memstream.admin import DIMENSIONS, grouped
from memstream.cli.context import connected, run, settings_of
from memstream.cli.output import emit_json, is_stdio, note, show_stats
from memstream.domain.errors import InvalidInputError
from memstream.platform import open_private, os_reason


def _day(option: str, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value).isoformat()
    except ValueError:
        raise InvalidInputError(f"{option} {value!r} is not a date (YYYY-MM-DD)") from None


def _dimensions(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in DIMENSIONS]
    if not names or unknown:
        raise InvalidInputError(
            f"--by {value!r}: name one or more of {', '.join(DIMENSIONS)}, comma-separated"
        )
    return list(dict.fromkeys(names))


def stats(
    ctx: typer.Context,
    since: Annotated[
        str | None, typer.Option("--since", help="First day (YYYY-MM-DD, UTC).")
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", help="Last day (YYYY-MM-DD, UTC).")
    ] = None,
    by: Annotated[
        str,
        typer.Option(
            "--by", help=f"Group rows by these, comma-separated: {', '.join(DIMENSIONS)}."
        ),
    ] = "day,model,source",
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", help="Every namespace, not only this one.")
    ] = False,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="Also draw the daily volumes into this PNG file (needs memstream[plot]); "
            "- writes the PNG to stdout instead of the table.",
            metavar="FILE.png",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Daily volumes: sessions, messages, tokens, cost, memories by type, ingests.

    Counted by the analytics worker (a consumer of the log of its own) per namespace, UTC day,
    model and source (from the session's registration; "" outside a registered session).

    Example: memstream stats --since 2026-11-01 --by day --plot volumes.png
    """
    settings = settings_of(ctx)
    first, last = _day("--since", since), _day("--until", until)
    if first and last and first > last:
        raise InvalidInputError(f"--since {first} is after --until {last}")
    dimensions = _dimensions(by)
    if plot is not None and is_stdio(plot) and as_json:
        raise InvalidInputError("--plot - writes the PNG to stdout: it cannot go with --json")
    if plot is not None and not is_stdio(plot) and plot.suffix.lower() != ".png":
        raise InvalidInputError(f"--plot {plot}: the chart is a PNG file (name it *.png)")

    async def main() -> list[dict[str, Any]]:
        async with connected(settings) as ms:
            return await ms.stats(since=first, until=last, all_namespaces=all_namespaces)

    rows = grouped(run(main()), dimensions)
    if plot is not None:
        written = draw(per_day(rows, dimensions), plot)
        note(f"drew {written}")
        if is_stdio(plot):
            return
    if as_json:
        emit_json(rows)
    else:
        show_stats(rows, dimensions)


def per_day(rows: list[dict[str, Any]], dimensions: list[str]) -> list[dict[str, Any]]:
    """The rows summed per day (the chart's x axis), whatever they were grouped by."""
    if "day" not in dimensions:
        raise InvalidInputError("--plot draws volumes per day: include day in --by")
    return grouped(rows, ["day"])


def draw(days: list[dict[str, Any]], path: Path) -> Path:
    """Daily volumes as a PNG at ``path`` (its real path, created readable by its owner only):
    sessions, messages, memories and ingested messages per day, and tokens per day.

    Raises:
        InvalidInputError: matplotlib is not installed, or the file cannot be written.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        raise InvalidInputError("--plot needs matplotlib: pip install 'memstream[plot]'") from None
    real = path if is_stdio(path) else path.expanduser().resolve()
    x = [date.fromisoformat(row["day"]) for row in days]
    figure, (counts, tokens) = pyplot.subplots(2, 1, figsize=(9, 6), sharex=True)
    for label, values in (
        ("sessions", [row["sessions"] for row in days]),
        ("messages", [row["messages"] for row in days]),
        ("memories", [sum(row["memories"].values()) for row in days]),
        ("ingested messages", [row["ingested_messages"] for row in days]),
    ):
        counts.plot(x, values, marker="o", label=label)
    counts.set_ylabel("per day")
    counts.legend(loc="upper left")
    counts.set_title("memstream daily volumes")
    tokens.bar(x, [row["input_tokens"] for row in days], label="input tokens")
    tokens.bar(
        x,
        [row["output_tokens"] for row in days],
        bottom=[row["input_tokens"] for row in days],
        label="output tokens",
    )
    tokens.set_ylabel("tokens per day")
    tokens.legend(loc="upper left")
    if x:  # whole days on the axis (at most 10 labelled), a day either side
        tokens.set_xlim(x[0] - timedelta(days=1), x[-1] + timedelta(days=1))
        shown = x[:: max(1, len(x) // 10)]
        tokens.set_xticks(shown, [day.isoformat() for day in shown])
    figure.autofmt_xdate()
    try:
        if is_stdio(real):
            figure.savefig(sys.stdout.buffer, format="png", dpi=100)
            sys.stdout.buffer.flush()
            return Path("the standard output")
        fd = open_private(real, os.O_WRONLY | os.O_TRUNC)
        with open(fd, "wb") as file:
            figure.savefig(file, format="png", dpi=100)
    except OSError as error:
        raise InvalidInputError(f"cannot write {real}: {os_reason(error)}") from None
    finally:
        pyplot.close(figure)
    return real
