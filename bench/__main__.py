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
from memstream.workers.nats_server import nats_server_binary

BENCHMARKS = (
    "append",
    "batch",
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


def render(rows: list[Row], info: dict[str, str], seconds: float) -> str:
    lines = [
        "# memstream benchmarks",
        "",
        "Written by `python -m bench` (`make bench`). Each benchmark starts its own nats-server "
        "and measures our figure and a baseline in the same run, on the same payloads.",
        "",
        "| benchmark | ours | baseline | ratio | target | result |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        verdict = "pass" if row.passed else "**FAIL**"
        lines.append(
            f"| {row.benchmark} | {row.ours} | {row.baseline} | {row.ratio} | {row.target} "
            f"| {verdict} |"
        )
    lines += ["", "## Notes", ""]
    lines += [f"- **{row.benchmark}**: {row.notes}" for row in rows if row.notes]
    lines += ["", "## Machine", ""]
    lines += [f"- {key}: {value}" for key, value in info.items()]
    lines += [f"- total run time: {seconds:.0f} s", ""]
    return "\n".join(lines)


async def main(names: list[str], write: bool) -> int:
    info = machine()
    start = time.perf_counter()
    rows = [row for name in names for row in await run_one(name)]
    seconds = time.perf_counter() - start
    print(f"\n{sum(r.passed for r in rows)}/{len(rows)} targets met in {seconds:.0f} s")
    if write:
        RESULTS.write_text(render(rows, info, seconds))
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
    sys.exit(asyncio.run(main(selected, write=arguments.write or not arguments.names)))
