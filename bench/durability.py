"""What syncing every write costs, by the shape of the write: nats-server with
``sync_interval: always`` (memstream's default) against its lazy default (``2m``), each on a
server of its own in the same run.

Raw nats-py: the latency of one awaited ``js.publish``; 16 messages as 16 awaited publishes, as
one message holding all 16, and as one JetStream atomic batch; the throughput of one publisher
against 16 at once. Ours (projector in this process): an agent turn of two messages as two
awaited ``append_message`` against one ``append_messages`` (one event). And this disk's own
fsync time. Information only: the figures say where a synced write's time goes and which shapes
of writing share an fsync.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from bench.harness import (
    ACK_TIMEOUT,
    RAW_STREAM,
    RAW_SUBJECT,
    SYNCS,
    Row,
    bench_env,
    fsync_latencies,
    median,
    ms,
    percentile,
    sync_name,
)
from bench.payloads import MessageFactory, payload
from memstream.client import Memstream
from memstream.session import Session

NAME = "durability"
TITLE = "what a write costs by its shape"
PUBLISHES = 300  # awaited publishes timed one by one
REPEATS = 30  # of each 16-message shape, interleaved
GROUP = 16
WRITERS = 16
PER_ROUND = 480  # publishes per throughput round (a multiple of WRITERS)
ROUNDS = 3
TURNS = 60  # agent turns of each shape, interleaved


async def _atomic_stream(client: Client) -> JetStreamContext:
    """The raw stream, file-backed, with atomic batches allowed."""
    js = client.jetstream(timeout=ACK_TIMEOUT)
    await js.add_stream(
        api.StreamConfig(
            name=RAW_STREAM,
            subjects=[f"{RAW_STREAM.lower()}.>"],
            storage=api.StorageType.FILE,
            retention=api.RetentionPolicy.LIMITS,
            allow_atomic=True,
        )
    )
    return js


async def _atomic_batch(client: Client, payloads: list[bytes]) -> None:
    """One JetStream atomic batch, as its headers define it; the last message commits it and
    carries the reply subject."""
    inbox = client.new_inbox()
    acked: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()

    async def on_ack(msg: Msg) -> None:
        if not acked.done():
            acked.set_result(msg)

    subscription = await client.subscribe(inbox, cb=on_ack)
    batch = uuid.uuid4().hex
    try:
        for index, data in enumerate(payloads, start=1):
            headers = {"Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(index)}
            last = index == len(payloads)
            if last:
                headers["Nats-Batch-Commit"] = "1"
            await client.publish(RAW_SUBJECT, data, reply=inbox if last else "", headers=headers)
        reply = await asyncio.wait_for(acked, ACK_TIMEOUT)
        assert b'"error"' not in reply.data, reply.data
    finally:
        await subscription.unsubscribe()


async def _seconds(action: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await action()
    return time.perf_counter() - start


async def _writers(js: JetStreamContext, payloads: list[bytes], writers: int) -> float:
    """Publishes per second of ``writers`` concurrent publishers, each awaiting each ack."""

    async def writer(share: list[bytes]) -> None:
        for data in share:
            await js.publish(RAW_SUBJECT, data)

    seconds = await _seconds(
        lambda: asyncio.gather(*(writer(payloads[w::writers]) for w in range(writers)))
    )
    return len(payloads) / seconds


async def _raw(client: Client, factory: MessageFactory) -> dict[str, float]:
    js = await _atomic_stream(client)
    payloads = [payload(m) for m in factory.messages("raw", PUBLISHES)]
    for data in payloads[:20]:  # warm
        await js.publish(RAW_SUBJECT, data)
    latencies = [await _seconds(partial(js.publish, RAW_SUBJECT, data)) for data in payloads]
    group = payloads[:GROUP]
    joined = b"[" + b",".join(group) + b"]"

    async def one_by_one() -> None:
        for data in group:
            await js.publish(RAW_SUBJECT, data)

    shapes: dict[str, Callable[[], Awaitable[object]]] = {
        "publishes": one_by_one,
        "one message": lambda: js.publish(RAW_SUBJECT, joined),
        "atomic batch": lambda: _atomic_batch(client, group),
    }
    times: dict[str, list[float]] = {name: [] for name in shapes}
    for repeat in range(REPEATS):
        names = list(shapes)
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
            times[name].append(await _seconds(shapes[name]))
    one: list[float] = []
    many: list[float] = []
    for round_ in range(ROUNDS):
        published = [payload(m) for m in factory.messages(f"w{round_}", PER_ROUND)]
        if round_ % 2:
            many.append(await _writers(js, published, WRITERS))
            one.append(await _writers(js, published, 1))
        else:
            one.append(await _writers(js, published, 1))
            many.append(await _writers(js, published, WRITERS))
    return {
        "p50": percentile(latencies, 0.5),
        "p90": percentile(latencies, 0.9),
        **{name: median(values) for name, values in times.items()},
        "1 writer": median(one),
        f"{WRITERS} writers": median(many),
    }


async def _apart(session: Session, pair: list[dict[str, Any]]) -> None:
    for message in pair:
        await session.append_message(message)


async def _turns(memstream: Memstream, factory: MessageFactory) -> dict[str, float]:
    """Seconds per agent turn (a user and an assistant message) as two appends or one event."""
    two = memstream.session("bench-durability-two")
    one = memstream.session("bench-durability-one")
    for name, session in (("two", two), ("one", one)):  # loads the aggregates
        await session.append_messages(factory.messages(f"{name}-warm", 2))
    times: dict[str, list[float]] = {"two appends": [], "one event": []}
    for turn in range(TURNS):
        shapes: dict[str, Callable[[], Awaitable[object]]] = {
            "two appends": partial(_apart, two, factory.messages(f"two-{turn}", 2)),
            "one event": partial(one.append_messages, factory.messages(f"one-{turn}", 2)),
        }
        await memstream.wait_for("sessions")
        for name in reversed(shapes) if turn % 2 else shapes:
            times[name].append(await _seconds(shapes[name]))
    return {name: median(values) for name, values in times.items()}


async def _measure(sync: str, factory: MessageFactory) -> dict[str, float]:
    async with bench_env(f"{NAME}-{sync}", sync=sync) as env:
        probe = await asyncio.to_thread(fsync_latencies, env.root)
        memstream = await env.memstream()
        raw = await env.raw_client()
        try:
            figures = await _raw(raw, factory)
            figures.update(await _turns(memstream, factory))
        finally:
            await raw.close()
            await memstream.close()
    figures["fsync p50"] = percentile(probe, 0.5)
    figures["fsync p90"] = percentile(probe, 0.9)
    return figures


async def run() -> list[Row]:
    factory = MessageFactory(seed=29)
    rows = []
    for sync in SYNCS:
        f = await _measure(sync, factory)
        apart, together = f["two appends"], f["one event"]
        rows.append(
            Row(
                f"{TITLE}, {sync_name(sync)}",
                f"turn of 2 messages as one event {ms(together)}",
                f"as two append_message {ms(apart)}",
                f"{apart / together:.2f}× (two appends / one event)",
                "information",
                True,
                f"nats-server {sync_name(sync)}; ours with the projector in this process, "
                f"medians of {TURNS} interleaved turns each. Raw nats-py on the same server: "
                f"one awaited js.publish p50 {ms(f['p50'])}, p90 {ms(f['p90'])} ({PUBLISHES} "
                f"timed one by one); {GROUP} messages as {GROUP} awaited publishes "
                f"{ms(f['publishes'])}, as one message holding them {ms(f['one message'])}, as "
                f"one atomic batch {ms(f['atomic batch'])} (medians of {REPEATS}, "
                f"interleaved); awaited publishes per second, 1 publisher "
                f"{f['1 writer']:,.0f}, {WRITERS} at once {f[f'{WRITERS} writers']:,.0f} "
                f"({f[f'{WRITERS} writers'] / f['1 writer']:.1f}×; medians of {ROUNDS} rounds of "
                f"{PER_ROUND}); this disk's fsync after a 700-byte append p50 "
                f"{ms(f['fsync p50'])}, p90 {ms(f['fsync p90'])}",
            )
        )
    return rows
