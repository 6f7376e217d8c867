"""Sequential ``Session.append_message``, each awaited, against raw ``js.publish`` awaited.

The figure that counts is the default embedded shape (the projector runs in this process, as
``connect()`` does when it owns the log). For diagnosis the same is measured with the projector in
its own process (the distributed shape), with no projector at all (the write path alone), and
like for like: the in-process projector against raw publishes that an in-process raw consumer
projects into SQLite rows and FTS5 at the same time. The in-process and no-projector shapes also
report this process's CPU time per append and per raw publish.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nats.aio.client import Client
from nats.js import JetStreamContext, api

from bench.harness import (
    ACK_TIMEOUT,
    RAW_STREAM,
    RAW_SUBJECT,
    BenchEnv,
    Row,
    bench_env,
    median,
    ms,
    paired_ratio,
    percentile,
    raw_stream,
)
from bench.payloads import MessageFactory, payload
from bench.projector_process import projector_process
from memstream.client import Memstream
from memstream.projections.sqlite.checkpointer import Checkpointer, defer_checkpoints
from memstream.workers.projector import DEFAULT_LINGER

NAME = "append"
TITLE = "sequential append_message, each awaited"
TARGET = 0.6
ROUNDS = 5
PER_ROUND = 1000
WARM = 50


@contextlib.contextmanager
def _no_projector() -> Iterator[None]:
    yield


async def _project_raw(client: Client, database: Path, stop: asyncio.Event) -> None:
    """The raw equivalent of the projector: batched pulls into message rows and FTS5 text."""
    connection = sqlite3.connect(database, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = NORMAL")
    # Checkpoints off the commit path, as the projector has them.
    defer_checkpoints(connection)
    checkpointer = Checkpointer(database)
    checkpointer.start()
    connection.executescript(
        "CREATE TABLE rows (seq INTEGER PRIMARY KEY, content TEXT);"
        "CREATE VIRTUAL TABLE rows_fts USING fts5(text, tokenize = 'porter unicode61');"
    )
    js = client.jetstream(timeout=ACK_TIMEOUT)
    subscription = await js.pull_subscribe(
        RAW_SUBJECT,
        durable="raw-projector",
        stream=RAW_STREAM,
        config=api.ConsumerConfig(ack_policy=api.AckPolicy.ALL, max_ack_pending=-1),
    )
    try:
        while not stop.is_set():
            try:
                msgs = await subscription.fetch(500, timeout=0.2)
            except TimeoutError:
                continue
            if not msgs:
                continue
            rows = [(m.metadata.sequence.stream, m.data.decode()) for m in msgs]
            texts = [
                (seq, " ".join(p["text"] for p in json.loads(data)["parts"] if "text" in p))
                for seq, data in rows
            ]
            connection.execute("BEGIN IMMEDIATE")
            connection.executemany("INSERT INTO rows VALUES (?, ?)", rows)
            connection.executemany("INSERT INTO rows_fts (rowid, text) VALUES (?, ?)", texts)
            connection.execute("COMMIT")
            checkpointer.committed()
            await msgs[-1].ack()
    finally:
        await asyncio.to_thread(checkpointer.stop)
        connection.close()


@contextlib.asynccontextmanager
async def _raw_projector(env: BenchEnv, client: Client, shape: str) -> AsyncIterator[None]:
    if shape != "fair":
        yield
        return
    stop = asyncio.Event()
    task = asyncio.create_task(_project_raw(client, env.root / "raw.db", stop))
    try:
        yield
    finally:
        stop.set()
        await task


@dataclass
class Rounds:
    """Per-round rates (ours, raw), this process's CPU time per operation (µs) and the
    latency of each of our appends (s)."""

    ours: list[float] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)
    ours_cpu: list[float] = field(default_factory=list)
    raw_cpu: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)


def _cpu() -> float:
    times = os.times()
    return times.user + times.system


async def _measure(env: BenchEnv, shape: str, factory: MessageFactory) -> Rounds:
    """Interleaved rounds in one projector ``shape``."""
    external = (
        projector_process(env.server.url, env.settings.stream, env.settings.database_path)
        if shape == "process"
        else _no_projector()
    )
    with external:
        memstream = await env.memstream(workers=shape in ("in-process", "fair"))
        raw = await env.raw_client()
        try:
            js = await raw_stream(raw)
            async with _raw_projector(env, raw, shape):
                return await _rounds(memstream, js, shape, factory)
        finally:
            await raw.close()
            await memstream.close()


async def _rounds(
    memstream: Memstream, js: JetStreamContext, shape: str, factory: MessageFactory
) -> Rounds:
    session = memstream.session(f"bench-append-{shape}")
    for message in factory.messages(f"{shape}-warm", WARM):  # load the aggregate
        await session.append_message(message)
        await js.publish(RAW_SUBJECT, payload(message))
    rounds = Rounds()
    for round_ in range(ROUNDS):
        messages = factory.messages(f"{shape}-r{round_}", PER_ROUND)
        payloads = [payload(m) for m in messages]
        if shape != "none":
            await memstream.wait_for_sessions()  # each phase starts with an idle projector
        start, cpu = time.perf_counter(), _cpu()
        clock = time.perf_counter
        latencies = rounds.latencies
        for message in messages:
            sent = clock()
            await session.append_message(message)
            latencies.append(clock() - sent)
        rounds.ours.append(PER_ROUND / (time.perf_counter() - start))
        rounds.ours_cpu.append((_cpu() - cpu) / PER_ROUND * 1e6)
        if shape != "none":
            await memstream.wait_for_sessions()
        start, cpu = time.perf_counter(), _cpu()
        for data in payloads:
            await js.publish(RAW_SUBJECT, data)
        rounds.raw.append(PER_ROUND / (time.perf_counter() - start))
        rounds.raw_cpu.append((_cpu() - cpu) / PER_ROUND * 1e6)
    if shape != "none":
        length = await session.get_path_length()
        assert length == WARM + ROUNDS * PER_ROUND, f"path length {length}"
    return rounds


async def run() -> Row:
    factory = MessageFactory(seed=1)
    results: dict[str, Rounds] = {}
    for shape in ("in-process", "process", "none", "fair"):
        async with bench_env(f"{NAME}-{shape}") as env:
            results[shape] = await _measure(env, shape, factory)
    ours, raw = results["in-process"].ours, results["in-process"].raw
    ratio = paired_ratio(ours, raw)

    def ratio_of(shape: str) -> str:
        rounds = results[shape]
        return (
            f"{median(rounds.ours):,.0f} vs {median(rounds.raw):,.0f} msg/s = "
            f"{paired_ratio(rounds.ours, rounds.raw):.2f}×"
        )

    def latency_of(shape: str) -> str:
        latencies = results[shape].latencies
        shares = ", ".join(
            f"{name} {ms(percentile(latencies, share))}"
            for name, share in (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999))
        )
        return f"{shares}, max {ms(max(latencies))}"

    def cpu_of(shape: str) -> str:
        rounds = results[shape]
        return f"{median(rounds.ours_cpu):.0f} vs {median(rounds.raw_cpu):.0f} µs"

    return Row(
        TITLE,
        f"{median(ours):,.0f} msg/s",
        f"{median(raw):,.0f} msg/s",
        f"{ratio:.2f}×",
        f"≥ {TARGET}×",
        ratio >= TARGET,
        f"projector in this process (the embedded default: it gathers up to "
        f"{DEFAULT_LINGER * 1000:.0f} ms of writes per transaction unless a reader waits); "
        f"medians of {ROUNDS} interleaved "
        f"rounds of {PER_ROUND}, ratio the median of per-round ratios. The same with the "
        f"projector in its own process: "
        f"{ratio_of('process')}; with no projector running (the write path alone): "
        f"{ratio_of('none')}; like for like, the in-process projector against raw publishes "
        f"projected at the same time by an in-process raw consumer (rows + FTS5): "
        f"{ratio_of('fair')}. This process's CPU time (user + system) per append vs per raw "
        f"publish: {cpu_of('in-process')} with the projector in this process, {cpu_of('none')} "
        f"on the write path alone: the client is CPU-bound where raw publishing waits on the "
        f"server. Latency of each append with the projector in this process: "
        f"{latency_of('in-process')}",
    )
