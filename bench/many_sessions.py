"""Many sessions: appends round-robin over 1,000 sessions against over 50, and a new process's
first append to a 100,000-message session against one to a 2,000-message session.

A writer caches a few hundred sessions; one it does not hold is restored from the sessions read
model plus the events after it rather than replayed from its subject. The rates compare the same
messages appended round-robin over more sessions than the writer caches and over fewer. The
first appends run in child processes (``--child``) on the same data dir without workers, which
time their connect and their first append separately.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.fixtures import fill_session
from bench.harness import Row, bench_env, median, ms, paired_ratio
from bench.payloads import MessageFactory
from memstream.client import Memstream, open_memstream
from memstream.settings import Settings
from memstream.workers.log.aggregate_store import CACHE_SIZE

NAME = "many_sessions"
TITLE = "many sessions: append round-robin over 1,000 sessions vs 50"
TARGET = 0.8
TARGET_FIRST = 0.050
WIDE = 1_000
NARROW = 50
ROUNDS = 5
PER_ROUND = 2_000
BIG = 100_000
SMALL = 2_000
PROCESSES = 3


async def _round_robin(
    memstream: Memstream, names: list[str], messages: list[dict[str, Any]], tag: str
) -> float:
    """Append ``messages`` to ``names`` in turn; the rate in messages per second."""
    sessions = [memstream.session(name) for name in names]
    count = len(sessions)
    await memstream.wait_for("sessions")  # each phase starts with an idle projector
    start = time.perf_counter()
    for index, message in enumerate(messages):
        await sessions[index % count].append_message({**message, "id": f"{tag}-{message['id']}"})
    return len(messages) / (time.perf_counter() - start)


async def _rates(memstream: Memstream, factory: MessageFactory) -> dict[str, list[float]]:
    sets = {
        "wide": [f"wide-{i:04d}" for i in range(WIDE)],
        "narrow": [f"narrow-{i:02d}" for i in range(NARROW)],
    }
    for names in sets.values():  # every session exists (has a message) before timing
        for name in names:
            await memstream.session(name).append_message(factory.message(f"{name}-0", 0))
    rates: dict[str, list[float]] = {"wide": [], "narrow": []}
    for round_ in range(ROUNDS):
        messages = factory.messages(f"r{round_}", PER_ROUND)  # the same messages for both
        order = ("wide", "narrow") if round_ % 2 == 0 else ("narrow", "wide")
        for name in order:
            rates[name].append(await _round_robin(memstream, sets[name], messages, name))
    await memstream.wait_for("sessions")
    for name, names in sets.items():
        expected = 1 + ROUNDS * PER_ROUND // len(names)
        for session in (names[0], names[-1]):
            length = await memstream.session(session).get_path_length()
            assert length == expected, f"{name} session {session}: path {length} != {expected}"
    return rates


async def _child(url: str, data_dir: str, stream: str, session_id: str) -> dict[str, float]:
    started = time.perf_counter()
    settings = Settings(data_dir=Path(data_dir), nats_url=url, stream=stream)
    memstream = await open_memstream(settings, workers=False)
    connected = time.perf_counter()
    try:
        session = memstream.session(session_id)
        message = MessageFactory(seed=11).message(f"{session_id}-first-{time.time_ns()}", 1)
        start = time.perf_counter()
        await session.append_message(message)
        first = time.perf_counter() - start
        read = getattr(memstream.core.log, "entries_read", -1)  # (absent before the counter)
    finally:
        await memstream.close()
    return {"connect": connected - started, "first": first, "entries_read": read}


def _spawn(url: str, data_dir: Path, stream: str, session_id: str) -> dict[str, float]:
    command = [sys.executable, "-m", "bench.many_sessions", "--child"]
    command += [url, str(data_dir), stream, session_id]
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        command, cwd=root, capture_output=True, text=True, timeout=120, check=True
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def _first_appends(
    url: str, data_dir: Path, stream: str
) -> dict[str, list[dict[str, float]]]:
    runs: dict[str, list[dict[str, float]]] = {"big": [], "small": []}
    for _ in range(PROCESSES):  # interleaved
        for name in ("small", "big"):
            runs[name].append(await asyncio.to_thread(_spawn, url, data_dir, stream, name))
    return runs


async def run() -> Row:
    factory = MessageFactory(seed=12)
    async with bench_env(NAME) as env:
        memstream = await env.memstream()
        try:
            rates = await _rates(memstream, factory)
            fill_big = await fill_session(memstream, "big", factory, BIG)
            await fill_session(memstream, "small", factory, SMALL)
            # The children are guests of this data dir; this process's projector keeps the read
            # model complete between them (a child starts in far more than its linger).
            runs = await _first_appends(env.server.url, env.settings.data_dir, env.settings.stream)
        finally:
            await memstream.close()
    wide, narrow = median(rates["wide"]), median(rates["narrow"])
    ratio = paired_ratio(rates["wide"], rates["narrow"])

    def mid(name: str, key: str) -> float:
        return median([r[key] for r in runs[name]])

    big, small = mid("big", "first"), mid("small", "first")
    return Row(
        TITLE,
        f"{wide:,.0f} msg/s; first append at 100k {ms(big)}",
        f"{narrow:,.0f} msg/s; first append at 2k {ms(small)}",
        f"{ratio:.2f}× / {big / small:.2f}×",
        f"≥ {TARGET}× / ≤ {TARGET_FIRST * 1000:.0f} ms",
        ratio >= TARGET and big <= TARGET_FIRST,
        f"projector in this process; the same {PER_ROUND} messages per round appended "
        f"round-robin over {WIDE} sessions and over {NARROW} (the writer caches {CACHE_SIZE}), "
        f"medians of {ROUNDS} interleaved rounds, ratio the median of per-round ratios ("
        + ", ".join(f"{w / n:.2f}" for w, n in zip(rates["wide"], rates["narrow"], strict=True))
        + f"). First append by a new process (workers=False, same data dir; median of "
        f"{PROCESSES} each, interleaved): 100k {ms(big)} (worst "
        f"{ms(max(r['first'] for r in runs['big']))}), 2k {ms(small)}, log entries read "
        f"{mid('big', 'entries_read'):.0f} / {mid('small', 'entries_read'):.0f}; connect "
        f"{ms(mid('big', 'connect'))} / {ms(mid('small', 'connect'))}, not counted; the 100k "
        f"session was built in {fill_big:.1f} s",
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--child", nargs=4, metavar=("URL", "DATA_DIR", "STREAM", "SESSION"), required=True
    )
    arguments = parser.parse_args()
    print(json.dumps(asyncio.run(_child(*arguments.child))))
