"""A new process's first ``get_latest_leaf`` and ``get_history`` on a 10,000-message session.

Run as a benchmark (``python -m bench cold_start``), this module builds the session, then starts
itself as child processes (``--child``) that connect to the same data dir without workers. The
figure is the whole first call of a new process: from before ``connect`` to the first result,
``connect`` included (half the children call ``get_latest_leaf`` first, the other half
``get_history``); the baseline is the same call again, warm, in the same process. Each child
runs once with the read model's pages in the OS page cache (as right after writing) and once
after they were evicted (``posix_fadvise(DONTNEED)`` on the database files).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.fixtures import fill_session
from bench.harness import Row, bench_env, median, ms
from bench.payloads import MessageFactory
from memstream.client import open_memstream
from memstream.settings import Settings

NAME = "cold_start"
TITLE = "cold start: new process, first calls on a 10,000-message session"
TARGET = 0.050
MESSAGES = 10_000
PROCESSES = 5
WARM_CALLS = 5
SESSION = "long"


async def _child(url: str, data_dir: str, stream: str, first: str) -> dict[str, float]:
    started = time.perf_counter()
    settings = Settings(data_dir=Path(data_dir), nats_url=url, stream=stream)
    memstream = await open_memstream(settings, workers=False)
    connected = time.perf_counter()
    try:
        session = memstream.session(SESSION)
        if first == "leaf":
            leaf = await session.get_latest_leaf()
            first_call = time.perf_counter() - started
            history = await session.get_history()
        else:
            history = await session.get_history()
            first_call = time.perf_counter() - started
            leaf = await session.get_latest_leaf()
        assert leaf is not None, "the child sees no session"
        assert len(history) == MESSAGES, f"the child sees {len(history)} messages"
        warm_leaf: list[float] = []
        warm_history: list[float] = []
        for _ in range(WARM_CALLS):
            start = time.perf_counter()
            await session.get_latest_leaf()
            warm_leaf.append(time.perf_counter() - start)
            start = time.perf_counter()
            await session.get_history()
            warm_history.append(time.perf_counter() - start)
    finally:
        await memstream.close()
    return {
        "connect": connected - started,
        "first": first_call,
        "warm": sorted(warm_leaf if first == "leaf" else warm_history)[WARM_CALLS // 2],
    }


def _evict(data_dir: Path) -> None:
    """Drop the read model's pages from the OS page cache (clean pages only: it is idle)."""
    for path in _database_files(data_dir):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _warm(data_dir: Path) -> None:
    """Read the read model's files once, so that their pages are in the OS page cache (as
    right after writing them; an earlier cold run evicted them)."""
    for path in _database_files(data_dir):
        with path.open("rb") as file:
            while file.read(1 << 20):
                pass


def _database_files(data_dir: Path) -> list[Path]:
    return [
        path
        for path in data_dir.glob("memstream.db*")
        if path.is_file() and not path.name.endswith("lock")
    ]


def _spawn(url: str, data_dir: Path, stream: str, first: str, cold: bool) -> dict[str, float]:
    if cold:
        _evict(data_dir)
    else:
        _warm(data_dir)
    command = [
        sys.executable,
        "-m",
        "bench.cold_start",
        "--child",
        url,
        str(data_dir),
        stream,
        first,
    ]
    root = Path(__file__).resolve().parents[1]
    start = time.perf_counter()
    done = subprocess.run(
        command, cwd=root, capture_output=True, text=True, timeout=120, check=True
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    result["process"] = time.perf_counter() - start
    return result


async def run() -> Row:
    async with bench_env(NAME) as env:
        memstream = await env.memstream()
        try:
            await fill_session(memstream, SESSION, MessageFactory(seed=8), MESSAGES)
        finally:
            await memstream.close()  # the server keeps running; the read model is complete
        runs: dict[tuple[str, bool], list[dict[str, float]]] = {}
        for _ in range(PROCESSES):
            for first in ("leaf", "history"):
                for cold in (False, True):
                    runs.setdefault((first, cold), []).append(
                        await asyncio.to_thread(
                            _spawn,
                            env.server.url,
                            env.settings.data_dir,
                            env.settings.stream,
                            first,
                            cold,
                        )
                    )

    def mid(first: str, cold: bool, key: str) -> float:
        return median([r[key] for r in runs[first, cold]])

    leaf, history = mid("leaf", False, "first"), mid("history", False, "first")
    warm_leaf, warm_history = mid("leaf", False, "warm"), mid("history", False, "warm")
    cold_leaf, cold_history = mid("leaf", True, "first"), mid("history", True, "first")
    every = [r for group in runs.values() for r in group]
    return Row(
        TITLE,
        f"leaf {ms(leaf)}, history {ms(history)} (connect included)",
        f"warm leaf {ms(warm_leaf)}, history {ms(warm_history)}",
        f"{leaf / warm_leaf:.1f}× / {history / warm_history:.1f}×",
        f"≤ {TARGET * 1000:.0f} ms each",
        leaf <= TARGET and history <= TARGET,
        f"median of {PROCESSES} child processes per first call (workers=False, same data dir); "
        f"ours counts the whole first call of a new process, connect included (connect alone: "
        f"median {median([r['connect'] for r in every]) * 1000:.1f} ms); page cache warm (the "
        f"read model's files read just before each child). With the read model's pages evicted "
        f"first (posix_fadvise DONTNEED): leaf {ms(cold_leaf)}, history {ms(cold_history)}. Each "
        f"child ran start to exit in {median([r['process'] for r in every]) * 1000:.0f} ms",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--child", nargs=4, metavar=("URL", "DATA_DIR", "STREAM", "FIRST"), required=True
    )
    arguments = parser.parse_args()
    print(json.dumps(asyncio.run(_child(*arguments.child))))
