"""``Session.append_messages`` in chains of 500 against raw ``publish_async`` with a 1000 window."""

from __future__ import annotations

import time

from bench.harness import (
    RAW_SUBJECT,
    Row,
    bench_env,
    median,
    paired_ratio,
    publish_window,
    raw_stream,
)
from bench.payloads import MessageFactory, chunks, payload

NAME = "batch"
TITLE = "append_all-style batches of 500 (append_messages)"
TARGET = 0.5
ROUNDS = 3
BATCH = 500
PER_ROUND = 10_000


async def run() -> Row:
    factory = MessageFactory(seed=2)
    async with bench_env(NAME) as env:
        ms = await env.memstream()
        raw = await env.raw_client()
        try:
            await raw_stream(raw)
            warm = factory.messages("warm", BATCH)
            await ms.session("bench-batch-warm").append_messages(warm)
            await publish_window(raw, RAW_SUBJECT, [payload(m) for m in warm])
            ours: list[float] = []
            baseline: list[float] = []
            drains: list[float] = []
            for round_ in range(ROUNDS):
                messages = factory.messages(f"r{round_}", PER_ROUND)
                payloads = [payload(m) for m in messages]
                session = ms.session(f"bench-batch-{round_}")  # a fresh session each round
                await ms.wait_for_sessions()
                start = time.perf_counter()
                for chain in chunks(messages, BATCH):
                    await session.append_messages(chain)
                acked = time.perf_counter()
                await ms.wait_for_sessions()
                drains.append(time.perf_counter() - acked)
                ours.append(PER_ROUND / (acked - start))
                start = time.perf_counter()
                await publish_window(raw, RAW_SUBJECT, payloads, window=1000)
                baseline.append(PER_ROUND / (time.perf_counter() - start))
                length = await session.get_path_length()
                assert length == PER_ROUND, f"path length {length}, expected {PER_ROUND}"
        finally:
            await raw.close()
            await ms.close()
    ratio = paired_ratio(ours, baseline)
    return Row(
        TITLE,
        f"{median(ours):,.0f} msg/s",
        f"{median(baseline):,.0f} msg/s",
        f"{ratio:.2f}×",
        f"≥ {TARGET}×",
        ratio >= TARGET,
        f"medians of {ROUNDS} interleaved rounds of {PER_ROUND:,} messages, ratio the median of "
        f"per-round ratios; rounds ours "
        + ", ".join(f"{r:,.0f}" for r in ours)
        + " / raw "
        + ", ".join(f"{r:,.0f}" for r in baseline)
        + f"; projector finished {max(drains) * 1000:.0f} ms after the last ack at most",
    )
