"""``Session.append_messages`` in chains of 500 against raw nats-py doing the same job: one
awaited ``js.publish`` per chain of the single event that ``append_messages`` publishes (the
chain's messages as JSON inside one event's JSON, with the ids and parents of the chain), encoding
included. For reference the notes also give raw ``publish_async`` of the messages one by one."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from bench.harness import (
    ACK_TIMEOUT,
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
TITLE = "append_all-style batches of 500 (append_messages), like for like"
TARGET = 0.5
ROUNDS = 3
BATCH = 500
PER_ROUND = 10_000


def chain_event(session_id: str, chain: list[dict[str, Any]], version: int) -> bytes:
    """The baseline's encoding of one chain as one event, in the event contract's shape
    (``session.messages_appended``): each message nested with its parent, plus the event's
    type, version and time, encoded in one ``json.dumps``."""
    parent = None
    entries = []
    for message in chain:
        entries.append({"parent_id": parent, "message": message})
        parent = message["id"]
    event = {
        "type": "session.messages_appended",
        "version": version,
        "time": datetime.now(UTC).isoformat(),
        "session_id": session_id,
        "messages": entries,
    }
    return json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode()


async def run() -> Row:
    factory = MessageFactory(seed=2)
    async with bench_env(NAME) as env:
        ms = await env.memstream()
        raw = await env.raw_client()
        try:
            js = await raw_stream(raw)
            warm = factory.messages("warm", BATCH)
            await ms.session("bench-batch-warm").append_messages(warm)
            await publish_window(raw, RAW_SUBJECT, [payload(m) for m in warm])
            ours: list[float] = []
            baseline: list[float] = []
            singles: list[float] = []
            drains: list[float] = []
            sizes: list[int] = []
            for round_ in range(ROUNDS):
                messages = factory.messages(f"r{round_}", PER_ROUND)
                payloads = [payload(m) for m in messages]
                session = ms.session(f"bench-batch-{round_}")  # a fresh session each round
                await ms.wait_for("sessions")
                start = time.perf_counter()
                for chain in chunks(messages, BATCH):
                    await session.append_messages(chain)
                acked = time.perf_counter()
                await ms.wait_for("sessions")
                drains.append(time.perf_counter() - acked)
                ours.append(PER_ROUND / (acked - start))
                start = time.perf_counter()
                for version, chain in enumerate(chunks(messages, BATCH), start=1):
                    data = chain_event(f"raw-{round_}", chain, version)
                    await js.publish(f"{RAW_SUBJECT}.{round_}", data, timeout=ACK_TIMEOUT)
                    sizes.append(len(data))
                baseline.append(PER_ROUND / (time.perf_counter() - start))
                start = time.perf_counter()
                await publish_window(raw, RAW_SUBJECT, payloads, window=1000)
                singles.append(PER_ROUND / (time.perf_counter() - start))
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
        f"per-round ratios; baseline: one awaited js.publish per chain of {BATCH} of the chain "
        f"as one event (~{median(sizes) / 1024:,.0f} KiB), encoded in the timed loop; rounds ours "
        + ", ".join(f"{r:,.0f}" for r in ours)
        + " / raw "
        + ", ".join(f"{r:,.0f}" for r in baseline)
        + f"; projector finished {max(drains) * 1000:.0f} ms after the last ack at most; raw "
        f"publish_async of the messages one by one (window 1000): {median(singles):,.0f} msg/s",
    )
