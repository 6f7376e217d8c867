"""A new process's first ``get_latest_leaf`` and ``get_history`` on a 10,000-message session.

Run as a benchmark (``python -m bench cold_start``), this module builds the session, then starts
itself as a child process (``--child``) that connects to the same data dir without workers and
times only its first calls, then the same calls again warm.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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


async def _child(url: str, data_dir: str, stream: str) -> dict[str, float]:
    started = time.perf_counter()
    settings = Settings(data_dir=Path(data_dir), nats_url=url, stream=stream)
    memstream = await open_memstream(settings, workers=False)
    connected = time.perf_counter()
    try:
        session = memstream.session(SESSION)
        start = time.perf_counter()
        leaf = await session.get_latest_leaf()
        first_leaf = time.perf_counter() - start
        start = time.perf_counter()
        history = await session.get_history()
        first_history = time.perf_counter() - start
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
        "first_leaf": first_leaf,
        "first_history": first_history,
        "warm_leaf": sorted(warm_leaf)[WARM_CALLS // 2],
        "warm_history": sorted(warm_history)[WARM_CALLS // 2],
    }


def _spawn(url: str, data_dir: Path, stream: str) -> dict[str, float]:
    command = [sys.executable, "-m", "bench.cold_start", "--child", url, str(data_dir), stream]
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
        runs = [
            await asyncio.to_thread(
                _spawn, env.server.url, env.settings.data_dir, env.settings.stream
            )
            for _ in range(PROCESSES)
        ]

    def mid(key: str) -> float:
        return median([r[key] for r in runs])

    leaf, history = mid("first_leaf"), mid("first_history")
    warm_leaf, warm_history = mid("warm_leaf"), mid("warm_history")
    return Row(
        TITLE,
        f"leaf {ms(leaf)}, history {ms(history)}",
        f"warm leaf {ms(warm_leaf)}, history {ms(warm_history)}",
        f"{leaf / warm_leaf:.1f}× / {history / warm_history:.1f}×",
        f"≤ {TARGET * 1000:.0f} ms each",
        leaf <= TARGET and history <= TARGET,
        f"median of {PROCESSES} child processes (workers=False, same data dir); each child "
        f"connected in {mid('connect') * 1000:.0f} ms (not counted) and ran start to exit in "
        f"{mid('process') * 1000:.0f} ms; "
        f"worst first history {ms(max(r['first_history'] for r in runs))}",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=3, metavar=("URL", "DATA_DIR", "STREAM"), required=True)
    arguments = parser.parse_args()
    print(json.dumps(asyncio.run(_child(*arguments.child))))
