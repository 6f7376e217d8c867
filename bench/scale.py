"""Projection by partition on PostgreSQL: events/s through ``memstream worker projector
--partitions`` with 1, 2 and 4 worker processes sharing a stream of 8 partitions.

The log: SESSIONS × PER_SESSION single-message events, written before any worker starts. For
each count of workers, a fresh database and the partitions' durable consumers made paused; the
workers start, share the leases out, bind the paused consumers; then all are resumed at once and
the read model's tracking rows are polled (every 20 ms) until every partition's rows reach the
partition's last event. So the processes' start and the leases' first hand-overs are not
timed. The baseline: one process's raw consume of
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
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from nats.aio.client import Client
from nats.js import api

from bench.fixtures import fill_log
from bench.harness import ACK_TIMEOUT, BenchEnv, Row, bench_env
from bench.payloads import MessageFactory
from bench.postgres import needs_postgres, scratch_database
from memstream.projections.postgres.copy import PostgresCopy
from memstream.projections.registry import PARTITIONABLE, PROJECTOR_PROJECTIONS
from memstream.workers.log.event_log import EventLog
from memstream.workers.log.subjects import parse_subject, partition_filter
from memstream.workers.projector import projector_consumer

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
        rates: dict[int, tuple[float, float, float]] = {}
        for workers in WORKERS:
            with scratch_database(server) as url:
                rates[workers] = await projected(env, url, workers, seqs)
    raw_rate = EVENTS / raw_seconds
    one = rates[1][0]
    two, four = rates[2][0] / one, rates[4][0] / one
    passed = two >= 1.6 and four >= 2.5
    figures = ", ".join(f"{w}: {rates[w][0]:,.0f} events/s" for w in WORKERS)
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
        f"--lease-ttl {LEASE_TTL} --linger 0`), timed from the moment the partitions' paused "
        "consumers are resumed, once every worker holds its share; CPU seconds per 1,000 "
        "events, the workers' + PostgreSQL's and nats-server's: "
        + ", ".join(
            f"{w}: {1000 * rates[w][1] / EVENTS:.2f} + {1000 * rates[w][2] / EVENTS:.2f}"
            for w in WORKERS
        )
        + "; cores busy (all that CPU / wall): "
        + ", ".join(
            f"{w}: {(rates[w][1] + rates[w][2]) * rates[w][0] / EVENTS:.2f}" for w in WORKERS
        )
        + "; "
        f"{os.cpu_count()} cores shared with PostgreSQL and nats-server",
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
) -> tuple[float, float, float]:
    """Events/s of ``workers`` processes from the moment their partitions' consumers are let
    go, and the CPU seconds the workers, and PostgreSQL and nats-server, used meanwhile.

    The partitions' durable consumers are made paused before the workers start (as a
    projector would make them, so it binds them as they are); once every worker holds its
    fair share of the leases, all eight are resumed at once: the figure is the projection's
    alone, without the processes' start or the leases' first hand-overs.
    """
    memstream = str(Path(sys.executable).parent / "memstream")
    process_env = {
        **os.environ,
        "MEMSTREAM_NATS_URL": env.server.url,
        "MEMSTREAM_STREAM": env.settings.stream,
        "MEMSTREAM_DATABASE_URL": url,
        "MEMSTREAM_DATA_DIR": str(env.root / f"data-{workers}"),
    }
    projections = [p for p in PROJECTOR_PROJECTIONS if p in PARTITIONABLE]
    client = await env.raw_client()
    try:
        consumers = await _paused_consumers(client, env.settings.stream, url, projections)
        logs = [env.root / f"worker-{workers}-{n}.log" for n in range(workers)]
        command = [memstream, "worker", "projector", "--partitions", "--lease-ttl", LEASE_TTL]
        processes = [_spawn([*command, "--linger", "0"], process_env, path) for path in logs]
        try:
            await _shared_out(logs, processes, workers)
            await asyncio.sleep(1.0)  # each partition's projector bound to its consumer
            cpu_before = sum(_cpu_seconds(p.pid) for p in processes)
            others_before = _others_cpu()
            start = time.perf_counter()
            for name in consumers:
                await client.request(
                    f"$JS.API.CONSUMER.PAUSE.{env.settings.stream}.{name}", b"{}", timeout=5
                )
            await _until_applied(url, projections, seqs, processes, logs)
            seconds = time.perf_counter() - start
            cpu = sum(_cpu_seconds(p.pid) for p in processes) - cpu_before
            others = _others_cpu() - others_before
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
    finally:
        await client.close()
    return EVENTS / seconds, cpu, others


async def _paused_consumers(
    client: Client, stream: str, url: str, projections: list[str]
) -> list[str]:
    """The partitions' durable consumers of the copy in ``url``, made as a projector makes
    them (from sequence 1), paused for an hour."""
    store = PostgresCopy(url).store(projections)
    try:
        copy = store.copy_id()
    finally:
        store.close()
    js = client.jetstream(timeout=ACK_TIMEOUT)
    names = []
    for partition in range(PARTITIONS):
        name = projector_consumer(copy, projections, partition)
        await js.add_consumer(
            stream,
            api.ConsumerConfig(
                durable_name=name,
                deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=1,
                ack_policy=api.AckPolicy.ALL,
                ack_wait=60.0,
                max_ack_pending=-1,
                filter_subject=partition_filter("ms", partition),
            ),
        )
        until = datetime.now(UTC) + timedelta(hours=1)
        await js.pause_consumer(stream, name, until.strftime("%Y-%m-%dT%H:%M:%SZ"))
        names.append(name)
    return names


async def _shared_out(logs: list[Path], processes: list[subprocess.Popen[bytes]], n: int) -> None:
    """Wait until each of ``n`` workers holds its fair share of the partitions, disjoint."""
    share = PARTITIONS // n
    deadline = time.perf_counter() + 120
    while True:
        owned = [_owned(log) for log in logs]
        if all(len(o) == share for o in owned) and len(set().union(*owned)) == PARTITIONS:
            return
        for process, log in zip(processes, logs, strict=True):
            if process.poll() is not None:
                raise RuntimeError(f"a worker exited: {log.read_text()[-2000:]}")
        if time.perf_counter() > deadline:
            raise TimeoutError(f"partitions not shared out among {n} workers: {owned}")
        await asyncio.sleep(0.1)


def _owned(log: Path) -> set[int]:
    """The partitions a worker's log says it holds last."""
    owned: set[int] = set()
    for line in log.read_text().splitlines():
        if ": partitions " in line and f" of {PARTITIONS}" in line:
            listed = line.split(": partitions ", 1)[1].split(" of ", 1)[0]
            owned = set() if listed == "none" else {int(p) for p in listed.split(",")}
    return owned


async def _until_applied(
    url: str,
    projections: list[str],
    seqs: dict[int, list[int]],
    processes: list[subprocess.Popen[bytes]],
    logs: list[Path],
) -> None:
    """Poll the tracking rows until every partition's rows reach its last event."""
    ends = {p: s[-1] for p, s in seqs.items() if s}
    deadline = time.perf_counter() + DEADLINE
    with psycopg.connect(url, autocommit=True) as connection:
        while True:
            await asyncio.sleep(POLL)
            rows = _rows(connection)
            if all(rows.get(f"{p}@{k}", 0) >= end for p in projections for k, end in ends.items()):
                return
            if time.perf_counter() > deadline:
                done = _applied(rows, projections, seqs)
                raise TimeoutError(f"{done} of {EVENTS} events applied in {DEADLINE:.0f} s")
            for process, log in zip(processes, logs, strict=True):
                if process.poll() is not None:
                    raise RuntimeError(f"a worker exited: {log.read_text()[-2000:]}")


def _others_cpu() -> float:
    """CPU seconds used so far by this machine's PostgreSQL and nats-server processes."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.find("(") + 1 : text.rfind(")")]
        if name in ("postgres", "nats-server"):
            total += _cpu_seconds(int(stat.parent.name))
    return total


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a live process (from /proc; 0 where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spawn(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start a worker process, its output to ``log`` (not awaited: it runs beside the poll)."""
    with log.open("w") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)


def _rows(connection: psycopg.Connection[tuple[object, ...]]) -> dict[str, int]:
    return {
        str(name): int(str(seq))
        for name, seq in connection.execute(
            "SELECT projection, seq FROM memstream.tracking"
        ).fetchall()
    }


def _applied(rows: dict[str, int], projections: list[str], seqs: dict[int, list[int]]) -> int:
    """Events every projection has applied: in each partition, those at or below the lowest
    of its projections' rows."""
    done = 0
    for partition, sequence in seqs.items():
        row = min(rows.get(f"{p}@{partition}", 0) for p in projections)
        done += bisect.bisect_right(sequence, row)
    return done
