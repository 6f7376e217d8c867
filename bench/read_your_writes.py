"""Append → visible in ``get_history`` (read-your-writes) against raw publish-ack latency."""

from __future__ import annotations

import time

from bench.harness import RAW_SUBJECT, Row, bench_env, ms, percentile, raw_stream
from bench.payloads import MessageFactory, payload

NAME = "read_your_writes"
TITLE = "append → visible in get_history (read-your-writes)"
P50_TARGET = 0.005
P99_TARGET = 0.025
SAMPLES = 1000
SESSIONS = 50  # round-robin, so each history stays a realistic 20 messages


async def run() -> Row:
    factory = MessageFactory(seed=4)
    async with bench_env(NAME) as env:
        memstream = await env.memstream()
        raw = await env.raw_client()
        try:
            js = await raw_stream(raw)
            sessions = [memstream.session(f"chat-{s}") for s in range(SESSIONS)]
            ours: list[float] = []
            baseline: list[float] = []
            messages = factory.messages("m", SAMPLES + SESSIONS)
            for index, message in enumerate(messages):
                session = sessions[index % SESSIONS]
                start = time.perf_counter()
                await session.append_message(message)
                history = await session.get_history()
                elapsed = time.perf_counter() - start
                assert history[-1]["id"] == message["id"], "the write is not visible"
                data = payload(message)
                start = time.perf_counter()
                await js.publish(RAW_SUBJECT, data)
                raw_elapsed = time.perf_counter() - start
                if index >= SESSIONS:  # the first round loads each aggregate: warm-up
                    ours.append(elapsed)
                    baseline.append(raw_elapsed)
        finally:
            await raw.close()
            await memstream.close()
    p50, p99 = percentile(ours, 0.5), percentile(ours, 0.99)
    raw50, raw99 = percentile(baseline, 0.5), percentile(baseline, 0.99)
    return Row(
        TITLE,
        f"p50 {ms(p50)}, p99 {ms(p99)}",
        f"p50 {ms(raw50)}, p99 {ms(raw99)}",
        f"{p50 / raw50:.1f}× (p50)",
        f"p50 ≤ {P50_TARGET * 1000:.0f} ms, p99 ≤ {P99_TARGET * 1000:.0f} ms",
        p50 <= P50_TARGET and p99 <= P99_TARGET,
        f"{SAMPLES} appends interleaved with {SAMPLES} raw publishes; histories of "
        f"~{SAMPLES // SESSIONS} messages; projector in-process; ours max {ms(max(ours))}",
    )
