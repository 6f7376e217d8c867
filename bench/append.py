"""Sequential ``Session.append_message``, each awaited, against raw ``js.publish`` awaited, on a
nats-server that syncs every write before acknowledging it (``sync_interval: always``,
memstream's default) and on one with nats-server's own lazy default (``2m``): every shape runs
once per fsync policy, its baseline on the same server.

The figure that counts is the default embedded shape (the projector runs in this process, as
``connect()`` does when it owns the log). For diagnosis the same is measured with the projector in
its own process (the distributed shape), with no projector at all (the write path alone), and
with 16 writers at once (ours: 16 sessions of one client; raw: 16 publishers of one connection).
Like for like (rows of their own): ours timed until the projector has committed the last append,
against raw publishes of the same events that an in-process raw consumer projects into SQLite
rows and FTS5, committing each batch before acknowledging it, timed until it has committed the
last. The in-process and no-projector shapes also report this process's CPU time per append and
per raw publish, and the run reports this disk's own fsync time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from nats.js import JetStreamContext

from bench.harness import (
    LAZY_SYNC,
    RAW_SUBJECT,
    SYNCS,
    BenchEnv,
    Row,
    bench_env,
    fsync_latencies,
    median,
    ms,
    paired_ratio,
    percentile,
    raw_stream,
    sync_name,
)
from bench.payloads import MessageFactory, payload
from bench.projector_process import projector_process
from bench.raw_projector import EventChain, RawProjector
from memstream.client import Memstream
from memstream.session import Session
from memstream.workers.projector import DEFAULT_LINGER
from memstream.workers.runtime.nats_server import SYNC_ALWAYS

NAME = "append"
TITLE = "sequential append_message, each awaited"
FAIR_TITLE = "sequential append_message until projected, like for like"
TARGET = 0.6
FAIR_TARGET = 0.8
ROUNDS = 5
# Appends per round and fsync policy: a synced write waits for the disk, so its rounds are
# shorter in appends to take a similar time.
PER_ROUND = {SYNC_ALWAYS: 500, LAZY_SYNC: 1000}
WARM = 50
WRITERS = 16
SHAPES = ("in-process", "process", "none", "writers", "fair")


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


async def _append(
    session: Session, messages: Sequence[dict[str, Any]], latencies: list[float]
) -> None:
    clock = time.perf_counter
    for message in messages:
        sent = clock()
        await session.append_message(message)
        latencies.append(clock() - sent)


async def _publish(js: JetStreamContext, payloads: Sequence[bytes]) -> int:
    seq = 0
    for data in payloads:
        seq = (await js.publish(RAW_SUBJECT, data)).seq
    return seq


async def _publish_events(
    js: JetStreamContext, chain: EventChain, messages: Sequence[dict[str, Any]]
) -> int:
    seq = 0
    for message in messages:
        seq = (await js.publish(RAW_SUBJECT, chain.event(message))).seq
    return seq


@contextlib.asynccontextmanager
async def _raw_projector(env: BenchEnv, shape: str) -> AsyncIterator[RawProjector | None]:
    if shape != "fair":
        yield None
        return
    projector = RawProjector(env.root / "raw.db")
    try:
        yield projector
    finally:
        await projector.stop()


async def _measure(env: BenchEnv, shape: str, factory: MessageFactory) -> Rounds:
    """Interleaved rounds in one projector ``shape``."""
    external = (
        projector_process(env.server.url, env.settings.stream, env.settings.database_path)
        if shape == "process"
        else contextlib.nullcontext()
    )
    with external:
        memstream = await env.memstream(workers=shape not in ("process", "none"))
        raw = await env.raw_client()
        try:
            js = await raw_stream(raw)
            async with _raw_projector(env, shape) as projector:
                if projector is not None:
                    await projector.start(js)
                rounds = await _rounds(
                    memstream, js, projector, shape, env.settings.nats_sync, factory
                )
                if projector is not None:
                    rows = projector.rows()
                    assert rows == WARM + ROUNDS * PER_ROUND[env.settings.nats_sync], rows
                return rounds
        finally:
            await raw.close()
            await memstream.close()


async def _rounds(
    memstream: Memstream,
    js: JetStreamContext,
    projector: RawProjector | None,
    shape: str,
    sync: str,
    factory: MessageFactory,
) -> Rounds:
    writers = WRITERS if shape == "writers" else 1
    sessions = [memstream.session(f"bench-append-{shape}-{w}") for w in range(writers)]
    chain = EventChain("bench-append-raw")
    idle = shape != "none"  # each phase starts with an idle projector

    async def ours(messages: list[dict[str, Any]], latencies: list[float]) -> None:
        await asyncio.gather(
            *(_append(s, messages[w::writers], latencies) for w, s in enumerate(sessions))
        )
        if projector is not None:  # like for like: until the projection has caught up
            await memstream.wait_for("sessions")

    async def raw(messages: list[dict[str, Any]], payloads: list[bytes]) -> None:
        if projector is not None:
            await projector.caught_up(await _publish_events(js, chain, messages))
        else:
            await asyncio.gather(*(_publish(js, payloads[w::writers]) for w in range(writers)))

    warm = factory.messages(f"{shape}-warm", WARM)  # loads each aggregate, as an agent has it
    await ours(warm, [])
    await raw(warm, [payload(m) for m in warm])
    rounds = Rounds()
    per_round = PER_ROUND[sync]
    for round_ in range(ROUNDS):
        messages = factory.messages(f"{shape}-r{round_}", per_round)
        payloads = [payload(m) for m in messages]

        # Alternate which goes first, so drift of the machine cancels in the pairs.
        for side in ("raw", "ours") if round_ % 2 else ("ours", "raw"):
            if idle:
                await memstream.wait_for("sessions")
            start, cpu = time.perf_counter(), _cpu()
            if side == "ours":
                await ours(messages, rounds.latencies)
            else:
                await raw(messages, payloads)
            rate = per_round / (time.perf_counter() - start)
            cpu_per_operation = (_cpu() - cpu) / per_round * 1e6
            (rounds.ours if side == "ours" else rounds.raw).append(rate)
            (rounds.ours_cpu if side == "ours" else rounds.raw_cpu).append(cpu_per_operation)
    if idle:
        lengths = [await s.get_path_length() for s in sessions]
        assert sum(lengths) == WARM + ROUNDS * per_round, f"path lengths {lengths}"
    return rounds


def _rate(rounds: Rounds) -> str:
    return (
        f"{median(rounds.ours):,.0f} vs {median(rounds.raw):,.0f} msg/s = "
        f"{paired_ratio(rounds.ours, rounds.raw):.2f}×"
    )


def _latency(latencies: list[float]) -> str:
    shares = ", ".join(
        f"{name} {ms(percentile(latencies, share))}"
        for name, share in (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999))
    )
    return f"{shares}, max {ms(max(latencies))}"


def _cpu_of(rounds: Rounds) -> str:
    return f"{median(rounds.ours_cpu):.0f} vs {median(rounds.raw_cpu):.0f} µs"


def _series(values: Sequence[float]) -> str:
    return ", ".join(f"{v:,.0f}" for v in values)


def _durability(results: dict[tuple[str, str], Rounds], shape: str) -> str:
    """What syncing every write costs in one shape: rates always vs lazy, and the time it adds
    to each operation (difference of the median times per operation)."""
    synced, lazy = results[shape, SYNC_ALWAYS], results[shape, LAZY_SYNC]

    def one(name: str, always: list[float], relaxed: list[float]) -> str:
        added = 1 / median(always) - 1 / median(relaxed)
        return (
            f"{name} {median(relaxed):,.0f} → {median(always):,.0f}/s "
            f"(+{ms(added)}, {median(relaxed) / median(always):.1f}× slower)"
        )

    return f"{one('ours', synced.ours, lazy.ours)}, {one('raw', synced.raw, lazy.raw)}"


def _headline(
    results: dict[tuple[str, str], Rounds], sync: str, probe: list[float], run_seconds: float
) -> Row:
    rounds = results["in-process", sync]
    one, many = rounds, results["writers", sync]
    ratio = paired_ratio(rounds.ours, rounds.raw)
    notes = (
        f"nats-server {sync_name(sync)}"
        + (" (memstream's default)" if sync == SYNC_ALWAYS else " (nats-server's default)")
        + f"; projector in this process (the embedded default: it gathers up to "
        f"{DEFAULT_LINGER * 1000:.0f} ms of writes per transaction unless a reader waits); "
        f"medians of {ROUNDS} interleaved rounds of {PER_ROUND[sync]} (alternating which goes "
        f"first), ratio the median of per-round ratios; rounds ours {_series(rounds.ours)} / "
        f"raw {_series(rounds.raw)}. The same with the projector in its own process: "
        f"{_rate(results['process', sync])}; with no projector running (the write path alone): "
        f"{_rate(results['none', sync])}; {WRITERS} writers at once (ours {WRITERS} sessions, raw "
        f"{WRITERS} publishers, projector in this process): {_rate(many)}, "
        f"{median(many.ours) / median(one.ours):.1f}× ours and "
        f"{median(many.raw) / median(one.raw):.1f}× raw of one writer. This process's CPU time "
        f"(user + system) per append vs per raw publish: {_cpu_of(rounds)} with the projector "
        f"in this process, {_cpu_of(results['none', sync])} on the write path alone. Latency of "
        f"each append with the projector in this process: {_latency(rounds.latencies)}"
    )
    if sync == SYNC_ALWAYS:
        notes += (
            f". What syncing every write costs (always vs {LAZY_SYNC}, medians, time added per "
            f"operation): one writer {_durability(results, 'in-process')}; write path alone "
            f"{_durability(results, 'none')}; {WRITERS} writers "
            f"{_durability(results, 'writers')}; like for like "
            f"{_durability(results, 'fair')}; this disk's fsync after a 700-byte append (100 "
            f"in each server's directory, before its rounds): p50 "
            f"{ms(percentile(probe, 0.5))}, p90 {ms(percentile(probe, 0.9))}; whole run "
            f"{run_seconds:.0f} s"
        )
    title = TITLE if sync == SYNC_ALWAYS else f"{TITLE}, {sync_name(sync)}"
    return Row(
        title,
        f"{median(rounds.ours):,.0f} msg/s",
        f"{median(rounds.raw):,.0f} msg/s",
        f"{ratio:.2f}×",
        f"≥ {TARGET}×",
        ratio >= TARGET,
        notes,
    )


def _fair(results: dict[tuple[str, str], Rounds], sync: str) -> Row:
    rounds = results["fair", sync]
    ratio = paired_ratio(rounds.ours, rounds.raw)
    title = f"{FAIR_TITLE}, {sync_name(sync)}"
    return Row(
        title,
        f"{median(rounds.ours):,.0f} msg/s",
        f"{median(rounds.raw):,.0f} msg/s",
        f"{ratio:.2f}×",
        f"≥ {FAIR_TARGET}×",
        ratio >= FAIR_TARGET,
        f"nats-server {sync_name(sync)} for both; ours: append_message each awaited, timed "
        f"until the in-process projector has committed the last (wait_for_sessions); baseline: "
        f"raw js.publish, each awaited, of the same messages as events of the contract's shape "
        f"(session.message_appended JSON, encoded in the timed loop), which an in-process push "
        f"consumer (ack all) applies batch by batch, whatever arrived meanwhile, in one "
        f"transaction each (message row, contentless FTS5 text, its position), commits and then "
        f"acknowledges, timed until it has committed the last; both SQLite in WAL with "
        f"synchronous = NORMAL and checkpoints in a thread; both end with "
        f"{WARM + ROUNDS * PER_ROUND[sync]:,} message rows; medians of {ROUNDS} interleaved "
        f"rounds of {PER_ROUND[sync]} (alternating which goes first), ratio the median of "
        f"per-round ratios; rounds ours {_series(rounds.ours)} / raw {_series(rounds.raw)}; "
        f"this process's CPU time (user + system) per message, its projection included: "
        f"{_cpu_of(rounds)}",
    )


async def run() -> list[Row]:
    factory = MessageFactory(seed=1)
    results: dict[tuple[str, str], Rounds] = {}
    probe: list[float] = []
    start = time.perf_counter()
    for shape in SHAPES:
        for sync in SYNCS:  # both policies per shape, so drift of the machine hits both alike
            async with bench_env(f"{NAME}-{shape}", sync=sync) as env:
                if sync == SYNC_ALWAYS:
                    probe += await asyncio.to_thread(fsync_latencies, env.root, 100)
                results[shape, sync] = await _measure(env, shape, factory)
    seconds = time.perf_counter() - start
    return [_headline(results, sync, probe, seconds) for sync in SYNCS] + [
        _fair(results, sync) for sync in SYNCS
    ]
