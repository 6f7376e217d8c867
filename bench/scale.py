"""Projection by partition on PostgreSQL: events/s through ``memstream worker projector
--partitions`` with 1, 2 and 4 worker processes sharing a stream of 8 partitions.

The log: SESSIONS × PER_SESSION single-message events, written before any worker starts. For
each count of workers, a fresh database; the workers are started together and the read model's
tracking rows are polled (every 20 ms) until every partition's rows reach the partition's last
event. The rate is taken between 20% and 95% of the events applied (what each partition's row
covers, counted from the partitions' own sequences), so the processes' start (imports, the
first leases and the hand-over of half the partitions when the second member joins) is left
out; the whole time from the spawn is reported too. The baseline: one process's raw consume of
the same stream (a nats-py pull consumer, fetches of 1,000, each payload parsed as JSON), the
floor under any projector. Targets: 2 workers ≥ 1.6× and 4 workers ≥ 2.5× one worker.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from nats.aio.client import Client
from nats.js import api

from bench.fixtures import fill_log
from bench.harness import ACK_TIMEOUT, BenchEnv, Row, bench_env
from bench.payloads import MessageFactory
from bench.postgres import needs_postgres, scratch_database
from memstream.projections.ports import PARTITIONABLE, PROJECTOR_PROJECTIONS
from memstream.workers.event_log import EventLog
from memstream.workers.subjects import parse_subject

NAME = "scale"
TITLE = "projector by partition on PostgreSQL: 1, 2 and 4 workers on 8 partitions"
TARGET = "2 workers ≥ 1.6×, 4 workers ≥ 2.5× one worker"
PARTITIONS = 8
SESSIONS = 400
PER_SESSION = 100
EVENTS = SESSIONS * PER_SESSION
WORKERS = (1, 2, 4)
FETCH = 1_000
POLL = 0.02
LEASE_TTL = "1.5"  # seconds: members rebalance within half a second (a renewal each third)
DEADLINE = 600.0


async def run() -> Row | list[Row]:
    return await needs_postgres(TITLE, TARGET, measure)


async def measure(server: str) -> Row:
    async with bench_env(NAME) as env:
        client = await env.raw_client()
        try:
            log = EventLog(client, env.settings.stream, timeout=ACK_TIMEOUT, partitions=PARTITIONS)
            await log.ensure_stream()
            start = time.perf_counter()
            await fill_log(log, MessageFactory(seed=5), sessions=SESSIONS, per_session=PER_SESSION)
            fill = time.perf_counter() - start
            raw_seconds, seqs = await raw_consume(env, client)
            assert sum(len(s) for s in seqs.values()) == EVENTS
        finally:
            await client.close()
        rates: dict[int, tuple[float, float]] = {}
        for workers in WORKERS:
            with scratch_database(server) as url:
                rates[workers] = await projected(env, url, workers, seqs)
    raw_rate = EVENTS / raw_seconds
    one = rates[1][0]
    two, four = rates[2][0] / one, rates[4][0] / one
    passed = two >= 1.6 and four >= 2.5
    figures = ", ".join(
        f"{w}: {rates[w][0]:,.0f} events/s ({EVENTS / rates[w][1]:,.0f} from the spawn)"
        for w in WORKERS
    )
    return Row(
        TITLE,
        figures,
        f"raw consume (one process) {raw_rate:,.0f} events/s",
        f"2: {two:.2f}× / 4: {four:.2f}× one worker (one worker {one / raw_rate:.2f}× raw)",
        TARGET,
        passed,
        f"{EVENTS:,} single-message events over {SESSIONS} sessions on {PARTITIONS} partitions "
        f"(log written in {fill:.1f} s); each count of workers projects into a fresh database "
        f"(projections {', '.join(PROJECTOR_PROJECTIONS)}, each worker `--partitions "
        f"--lease-ttl {LEASE_TTL} --linger 0`); rate between 20% and 95% applied; seconds "
        "from the spawn to the last event "
        + ", ".join(f"{w}: {rates[w][1]:.1f}" for w in WORKERS)
        + f"; {os.cpu_count()} cores shared with PostgreSQL and nats-server",
    )


async def raw_consume(env: BenchEnv, client: Client) -> tuple[float, dict[int, list[int]]]:
    """One process's pull consume of the whole stream, parsing each payload; the seconds, and
    each partition's event sequences (what the progress of the workers is counted from)."""
    js = client.jetstream(timeout=ACK_TIMEOUT)
    subscription = await js.pull_subscribe(
        "ms.>",
        stream=env.settings.stream,
        config=api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE, mem_storage=True, inactive_threshold=30.0
        ),
    )
    seqs: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    seen = 0
    start = time.perf_counter()
    try:
        while seen < EVENTS:
            for msg in await subscription.fetch(FETCH, timeout=ACK_TIMEOUT):
                json.loads(msg.data)
                partition = parse_subject(msg.subject).partition
                assert partition is not None
                seqs[partition].append(msg.metadata.sequence.stream)
                seen += 1
        return time.perf_counter() - start, seqs
    finally:
        await subscription.unsubscribe()


async def projected(
    env: BenchEnv, url: str, workers: int, seqs: dict[int, list[int]]
) -> tuple[float, float]:
    """Events/s of ``workers`` processes between 20% and 95% applied, and the seconds from
    their spawn until everything is applied."""
    memstream = str(Path(sys.executable).parent / "memstream")
    process_env = {
        **os.environ,
        "MEMSTREAM_NATS_URL": env.server.url,
        "MEMSTREAM_STREAM": env.settings.stream,
        "MEMSTREAM_DATABASE_URL": url,
        "MEMSTREAM_DATA_DIR": str(env.root / f"data-{workers}"),
    }
    logs = [env.root / f"worker-{workers}-{n}.log" for n in range(workers)]
    ends = {p: s[-1] for p, s in seqs.items() if s}
    projections = [p for p in PROJECTOR_PROJECTIONS if p in PARTITIONABLE]
    start = time.perf_counter()
    command = [memstream, "worker", "projector", "--partitions", "--lease-ttl", LEASE_TTL]
    processes = [_spawn([*command, "--linger", "0"], process_env, path) for path in logs]
    marks: dict[float, float] = {}
    try:
        with psycopg.connect(url, autocommit=True) as connection:
            while True:
                await asyncio.sleep(POLL)
                now = time.perf_counter()
                if now - start > DEADLINE:
                    raise TimeoutError(f"{workers} workers did not finish in {DEADLINE:.0f} s")
                for process in processes:
                    if process.poll() is not None:
                        raise RuntimeError(f"a worker exited: {logs[0].read_text()[-2000:]}")
                rows = _rows(connection)
                if rows is None:
                    continue
                done = _applied(rows, projections, seqs)
                for fraction in (0.2, 0.95):
                    if fraction not in marks and done >= fraction * EVENTS:
                        marks[fraction] = now
                if all(
                    rows.get(f"{p}@{k}", 0) >= end for p in projections for k, end in ends.items()
                ):
                    total = now - start
                    break
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
    rate = 0.75 * EVENTS / (marks[0.95] - marks[0.2])
    return rate, total


def _spawn(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start a worker process, its output to ``log`` (not awaited: it runs beside the poll)."""
    with log.open("w") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)


def _rows(connection: psycopg.Connection[tuple[object, ...]]) -> dict[str, int] | None:
    try:
        return {
            str(name): int(str(seq))
            for name, seq in connection.execute(
                "SELECT projection, seq FROM memstream.tracking"
            ).fetchall()
        }
    except psycopg.errors.UndefinedTable:  # not migrated yet
        return None


def _applied(rows: dict[str, int], projections: list[str], seqs: dict[int, list[int]]) -> int:
    """Events every projection has applied: in each partition, those at or below the lowest
    of its projections' rows."""
    done = 0
    for partition, sequence in seqs.items():
        row = min(rows.get(f"{p}@{partition}", 0) for p in projections)
        done += bisect.bisect_right(sequence, row)
    return done
