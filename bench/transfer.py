"""``events export`` and ``events import`` of 100,000 events against raw nats-py doing the same.

Export: ours is what the command runs (an ephemeral ordered read of the stream, each event's
audit view and stored headers written as one JSONL line to a file); the baseline is a raw pull
consumer (ack none, fetches of 500) writing each message's sequence, subject, stored time,
headers and parsed payload as one JSON line. Import: ours checks the whole file, then publishes
it in atomic batches; the baseline reads the same file line by line and publishes each event with
``publish_async`` (window 1,000, every wait bounded), its headers as exported. Each import goes
into a fresh stream; both results are checked (line counts, stream counts and last sequences).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from nats.aio.client import Client
from nats.js import api

from bench.fixtures import fill_log
from bench.harness import ACK_TIMEOUT, BenchEnv, Row, bench_env, median, paired_ratio
from bench.payloads import MessageFactory
from memstream.cli.output import export_line
from memstream.workers.admin.audit import EventQuery, read_events
from memstream.workers.admin.event_transfer import import_events
from memstream.workers.log.event_log import EventLog

NAME = "transfer"
TITLE = "events export / import of 100,000 events"
TARGET = 0.5
SESSIONS = 100
PER_SESSION = 1_000
EVENTS = SESSIONS * PER_SESSION
ROUNDS = 3
FETCH = 500
WINDOW = 1_000


async def export_ours(log: EventLog, path: Path) -> int:
    lines = 0
    with path.open("w", encoding="utf-8") as file:
        async for event in read_events(log, EventQuery()):
            file.write(export_line(event))
            lines += 1
    return lines


async def export_raw(client: Client, stream: str, path: Path) -> int:
    js = client.jetstream(timeout=ACK_TIMEOUT)
    last = (await js.stream_info(stream)).state.last_seq
    subscription = await js.pull_subscribe(
        "ms.>",
        stream=stream,
        config=api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE, mem_storage=True, inactive_threshold=30.0
        ),
    )
    lines = 0
    try:
        with path.open("w", encoding="utf-8") as file:
            reached = 0
            while reached < last:
                for msg in await subscription.fetch(FETCH, timeout=ACK_TIMEOUT):
                    metadata = msg.metadata
                    reached = metadata.sequence.stream
                    line = {
                        "seq": reached,
                        "subject": msg.subject,
                        "time": metadata.timestamp.isoformat(),
                        "headers": msg.headers or {},
                        "payload": json.loads(msg.data),
                    }
                    file.write(json.dumps(line, ensure_ascii=False) + "\n")
                    lines += 1
    finally:
        await subscription.unsubscribe()
    return lines


async def import_raw(client: Client, path: Path, prefix: str) -> None:
    js = client.jetstream(timeout=ACK_TIMEOUT, publish_async_max_pending=WINDOW)
    futures = []
    with path.open(encoding="utf-8") as file:
        for text in file:
            line = json.loads(text)
            subject = prefix + line["subject"][line["subject"].index(".") :]
            headers = {
                k: v for k, v in line["nats_headers"].items() if not k.startswith("Nats-Expected-")
            }
            data = json.dumps(line["payload"], ensure_ascii=False, separators=(",", ":")).encode()
            futures.append(
                await js.publish_async(subject, data, headers=headers, wait_stall=ACK_TIMEOUT)
            )
    await asyncio.wait_for(asyncio.gather(*futures), ACK_TIMEOUT)


async def _stream(client: Client, name: str, prefix: str) -> EventLog:
    log = EventLog(client, name, subject_prefix=prefix, timeout=ACK_TIMEOUT)
    await log.ensure_stream()
    return log


async def _delete(client: Client, name: str) -> None:
    await client.jetstream(timeout=ACK_TIMEOUT).delete_stream(name)


Timings = tuple[list[float], list[float], list[float], list[float], float]


async def _measure(env: BenchEnv) -> Timings:
    client = await env.raw_client()
    try:
        log = await _stream(client, env.settings.stream, "ms")
        start = time.perf_counter()
        await fill_log(log, MessageFactory(seed=5), sessions=SESSIONS, per_session=PER_SESSION)
        fill = time.perf_counter() - start
        assert await log.stream_last_seq() == EVENTS
        ours_export: list[float] = []
        raw_export: list[float] = []
        ours_import: list[float] = []
        raw_import: list[float] = []
        ours_file, raw_file = env.root / "ours.jsonl", env.root / "raw.jsonl"
        for round_ in range(ROUNDS):
            start = time.perf_counter()
            lines = await export_ours(log, ours_file)
            ours_export.append(time.perf_counter() - start)
            start = time.perf_counter()
            raw_lines = await export_raw(client, log.stream, raw_file)
            raw_export.append(time.perf_counter() - start)
            assert lines == raw_lines == EVENTS, (lines, raw_lines)

            target = await _stream(client, f"OURS{round_}", f"o{round_}")
            start = time.perf_counter()
            result = await import_events(target, ours_file)
            ours_import.append(time.perf_counter() - start)
            assert result.stored == EVENTS, result
            assert result.last_seq == EVENTS, result
            raw_target = await _stream(client, f"RAWI{round_}", f"r{round_}")
            start = time.perf_counter()
            await import_raw(client, ours_file, f"r{round_}")
            raw_import.append(time.perf_counter() - start)
            assert await raw_target.stream_last_seq() == EVENTS
            await _delete(client, target.stream)
            await _delete(client, raw_target.stream)
        return ours_export, raw_export, ours_import, raw_import, fill
    finally:
        await client.close()


def _rate(seconds: float) -> str:
    return f"{EVENTS / seconds:,.0f} events/s"


async def run() -> list[Row]:
    async with bench_env(NAME) as env:
        ours_export, raw_export, ours_import, raw_import, fill = await _measure(env)
    export_ratio = paired_ratio([1 / s for s in ours_export], [1 / s for s in raw_export])
    import_ratio = paired_ratio([1 / s for s in ours_import], [1 / s for s in raw_import])
    common = (
        f"{EVENTS:,} single-message events over {SESSIONS} sessions (log built in {fill:.1f} s); "
        f"medians of {ROUNDS} interleaved rounds, ratio the median of per-round ratios"
    )
    return [
        Row(
            benchmark="events export of 100,000 events to a JSONL file",
            ours=_rate(median(ours_export)),
            baseline=_rate(median(raw_export)) + " (raw pull consume + one JSON line each)",
            ratio=f"{export_ratio:.2f}×",
            target=f"≥ {TARGET}×",
            passed=export_ratio >= TARGET,
            notes=f"{common}; seconds ours/raw: "
            + ", ".join(f"{o:.2f}/{r:.2f}" for o, r in zip(ours_export, raw_export, strict=True)),
        ),
        Row(
            benchmark="events import of 100,000 events into an empty stream",
            ours=_rate(median(ours_import)),
            baseline=_rate(median(raw_import)) + " (raw publish_async, window 1,000)",
            ratio=f"{import_ratio:.2f}×",
            target=f"≥ {TARGET}×",
            passed=import_ratio >= TARGET,
            notes=f"{common}; ours checks every line before publishing (two reads of the file), "
            "then atomic batches of ~250; seconds ours/raw: "
            + ", ".join(f"{o:.2f}/{r:.2f}" for o, r in zip(ours_import, raw_import, strict=True)),
        ),
    ]
