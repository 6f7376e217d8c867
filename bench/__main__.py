"""Run the benchmarks and write ``bench/RESULTS.md``: ``python -m bench [NAME ...]``.

Every benchmark starts its own nats-server in a temp dir and measures our figure and its
baseline in the same run, on the same payloads. A full run writes the results table; a run of
named benchmarks only prints (unless ``--write``). Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
import logging
import os
import platform
import sqlite3
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol, cast

from bench.harness import Row
from memstream.workers.runtime.nats_server import nats_server_binary

BENCHMARKS = (
    "append",
    "batch",
    "durability",
    "rebuild",
    "read_your_writes",
    "history",
    "search",
    "growth",
    "cold_start",
    "context",
    "agent_loop",
    "many_sessions",
    "disk",
    "compaction",
    "overlays",
    "manager_list",
    "manager_search",
    "locomo",
    "memory",
    "pg_rebuild",
    "pg_search",
    "pg_history",
    "pg_agent_loop",
    "pg_recall",
    "transfer",
    "scale",
)
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


class Benchmark(Protocol):
    NAME: str
    TITLE: str

    async def run(self) -> Row | list[Row]: ...


def load(name: str) -> Benchmark:
    return cast(Benchmark, importlib.import_module(f"bench.{name}"))


def machine() -> dict[str, str]:
    """What the figures depend on."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        server = subprocess.run(
            [nats_server_binary(), "--version"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        server = "unknown"
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "nats-server": server,
        "nats-py": importlib.metadata.version("nats-py"),
        "platform": platform.platform(),
    }


async def run_one(name: str) -> list[Row]:
    benchmark = load(name)
    print(f"== {name}: {benchmark.TITLE}", flush=True)
    start = time.perf_counter()
    try:
        result = await benchmark.run()
        rows = result if isinstance(result, list) else [result]
    except Exception as error:
        traceback.print_exc()
        rows = [
            Row(benchmark.TITLE, "error", "", "", "", False, f"{type(error).__name__}: {error}")
        ]
    for row in rows:
        print(row.show(), flush=True)
    print(f"[{time.perf_counter() - start:.0f} s]", flush=True)
    return rows


# Everything from this heading on is written by hand: a rewrite keeps it.
HAND_WRITTEN = "## Analysis (written by hand)"


def render(
    rows: list[Row], info: dict[str, str], seconds: float, previous: str = "", partial: bool = False
) -> str:
    """RESULTS.md for ``rows``. ``previous``: the file as it was; its hand-written section is
    kept, and for a ``partial`` run so are the rows (and their notes) of the benchmarks that
    did not run, in their places."""
    table: dict[str, str] = {}
    notes: dict[str, str] = {}
    if partial:
        table, notes = _previous_rows(previous)
    for row in rows:
        verdict = "pass" if row.passed else "**FAIL**"
        table[row.benchmark] = (
            f"| {row.benchmark} | {row.ours} | {row.baseline} | {row.ratio} | {row.target} "
            f"| {verdict} |"
        )
        notes.pop(row.benchmark, None)
        if row.notes:
            notes[row.benchmark] = f"- **{row.benchmark}**: {row.notes}"
    lines = [
        "# memstream benchmarks",
        "",
        "Written by `python -m bench` (`make bench`). Each benchmark starts its own nats-server "
        "and measures our figure and a baseline in the same run, on the same payloads.",
        "",
        "| benchmark | ours | baseline | ratio | target | result |",
        "|---|---|---|---|---|---|",
        *table.values(),
    ]
    lines += ["", "## Notes", "", *[notes[title] for title in table if title in notes]]
    lines += ["", "## Machine", ""]
    lines += [f"- {key}: {value}" for key, value in info.items()]
    lines += [
        f"- total run time: {seconds:.0f} s" + (" (this run's benchmarks)" if partial else "")
    ]
    if HAND_WRITTEN in previous:
        lines += ["", previous[previous.index(HAND_WRITTEN) :].rstrip("\n")]
    return "\n".join(lines) + "\n"


def _previous_rows(previous: str) -> tuple[dict[str, str], dict[str, str]]:
    """The table rows and notes of a RESULTS.md, by benchmark title, in their order."""
    table: dict[str, str] = {}
    notes: dict[str, str] = {}
    section = ""
    for line in previous.splitlines():
        if line.startswith("## "):
            section = line
        elif not section and line.startswith("| ") and not line.startswith("| benchmark |"):
            table[line[2:].split(" | ", 1)[0]] = line
        elif section == "## Notes" and line.startswith("- **") and "**: " in line:
            notes[line[4:].split("**: ", 1)[0]] = line
    return table, notes


async def main(names: list[str], write: bool, partial: bool) -> int:
    info = machine()
    start = time.perf_counter()
    rows = [row for name in names for row in await run_one(name)]
    seconds = time.perf_counter() - start
    print(f"\n{sum(r.passed for r in rows)}/{len(rows)} targets met in {seconds:.0f} s")
    if write:
        previous = RESULTS.read_text() if RESULTS.exists() else ""
        RESULTS.write_text(render(rows, info, seconds, previous, partial))
        print(f"wrote {RESULTS}")
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"default: all of {', '.join(BENCHMARKS)}"
    )
    parser.add_argument("--write", action="store_true", help="write RESULTS.md for a partial run")
    arguments = parser.parse_args()
    unknown = [n for n in arguments.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r}; known: {', '.join(BENCHMARKS)}")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    selected = arguments.names or list(BENCHMARKS)
    write = arguments.write or not arguments.names
    sys.exit(asyncio.run(main(selected, write=write, partial=bool(arguments.names))))
