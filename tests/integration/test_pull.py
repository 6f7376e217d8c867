"""``workers.pull.Puller`` on a real nats-server: the same batches as nats-py's fetch, in order,
without losing or repeating a message across fetches, and bounded in time."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import nats
import nats.aio.msg
import nats.errors
import nats.js.errors
import pytest
from nats.aio.client import Client
from nats.js import api

from memstream.workers.log.event_log import connect_nats
from memstream.workers.pull import Puller
from memstream.workers.runtime.nats_server import NatsServerProcess

STREAM = "PULLTEST"


@pytest.fixture
async def client(nats_server: NatsServerProcess) -> AsyncIterator[Client]:
    nc = await connect_nats(nats_server.url)
    await nc.jetstream().add_stream(api.StreamConfig(name=STREAM, subjects=["pt.>"]))
    yield nc
    await nc.close()


async def _consumer(nc: Client, durable: str) -> Puller:
    await nc.jetstream().add_consumer(
        STREAM,
        api.ConsumerConfig(durable_name=durable, ack_policy=api.AckPolicy.ALL, max_ack_pending=-1),
    )
    return await Puller.bind(nc, STREAM, durable)


async def _publish(nc: Client, count: int, start: int = 0) -> None:
    js = nc.jetstream()
    for i in range(start, start + count):
        await js.publish(f"pt.{i % 3}", str(i).encode())


async def test_a_fetch_returns_what_is_ready_at_once_in_order(client: Client) -> None:
    # Given 5 messages and a consumer
    await _publish(client, 5)
    psub = await _consumer(client, "ready")
    # When a batch of up to 100 is fetched with a long timeout
    started = time.monotonic()
    msgs = await psub.fetch(100, 5.0)
    # Then the 5 come back in stream order, without waiting for the batch or the timeout
    assert [m.data for m in msgs] == [str(i).encode() for i in range(5)]
    assert [m.metadata.sequence.stream for m in msgs] == [1, 2, 3, 4, 5]
    assert time.monotonic() - started < 1.0
    # And a batch smaller than what is ready is honoured
    await _publish(client, 5, start=5)
    assert [m.data for m in await psub.fetch(2, 5.0)] == [b"5", b"6"]
    assert [m.data for m in await psub.fetch(10, 5.0)] == [b"7", b"8", b"9"]


async def test_an_empty_consumer_times_out_after_the_timeout(client: Client) -> None:
    psub = await _consumer(client, "empty")
    started = time.monotonic()
    with pytest.raises(nats.errors.TimeoutError):
        await psub.fetch(10, 0.3)
    elapsed = time.monotonic() - started
    assert 0.25 < elapsed < 1.5, elapsed
    with pytest.raises(ValueError, match="must be positive"):
        await psub.fetch(0, 1.0)


async def test_a_message_published_while_waiting_is_returned(client: Client) -> None:
    psub = await _consumer(client, "waiting")
    fetching = asyncio.create_task(psub.fetch(50, 5.0))
    await asyncio.sleep(0.2)
    assert not fetching.done()
    await _publish(client, 1)
    msgs = await asyncio.wait_for(fetching, 2.0)
    assert [m.data for m in msgs] == [b"0"]


async def test_fetches_beside_a_writer_see_every_message_once_in_order(client: Client) -> None:
    # Given a writer publishing 1,500 messages in bursts while small batches are fetched
    # (replies to a request can outlive the fetch that sent it: the next fetch takes them)
    psub = await _consumer(client, "busy")

    async def write() -> None:
        for burst in range(30):
            await _publish(client, 50, start=burst * 50)
            await asyncio.sleep(0.001)

    writer = asyncio.create_task(write())
    seen: list[int] = []
    while len(seen) < 1500:
        try:
            msgs = await psub.fetch(7, 0.5)
        except nats.errors.TimeoutError:
            continue
        assert len(msgs) <= 7
        seen += [m.metadata.sequence.stream for m in msgs]
        await msgs[-1].ack()
    await writer
    # Then every message arrived exactly once, in stream order
    assert seen == list(range(1, 1501))
    # And nothing more is delivered: the consumer is drained and acknowledged
    with pytest.raises(nats.errors.TimeoutError):
        await psub.fetch(7, 0.3)
    info = await client.jetstream().consumer_info(STREAM, "busy")
    assert (info.num_pending, info.num_ack_pending) == (0, 0)


async def test_a_status_left_by_an_expired_request_does_not_end_the_next_fetch(
    client: Client,
) -> None:
    # Given a fetch that timed out, whose request's "408 Request Timeout" reached the inbox
    # after the fetch returned
    psub = await _consumer(client, "stale")
    with pytest.raises(nats.errors.TimeoutError):
        await psub.fetch(10, 0.2)
    for _ in range(100):
        if psub._buffer:
            break
        await asyncio.sleep(0.01)
    assert [m.headers and m.headers.get("Status") for m in psub._buffer] == ["408"]
    # When a message is published while the next fetch waits for up to 10
    fetching = asyncio.create_task(psub.fetch(10, 5.0))
    await asyncio.sleep(0.05)
    await _publish(client, 1)
    started = time.monotonic()
    msgs = await asyncio.wait_for(fetching, 6.0)
    # Then the stale status neither ends the new request nor holds the fetch to its timeout
    assert [m.data for m in msgs] == [b"0"]
    assert time.monotonic() - started < 1.0


async def test_a_message_delivered_under_an_earlier_open_request_is_returned_at_once(
    client: Client,
) -> None:
    # Given a pull request still open on the server from before (as after a fetch gave up while
    # the event loop was held up), and a fetch that waits up to 5 s with a request of its own
    psub = await _consumer(client, "earlier")
    await psub._request({"batch": 10, "expires": 5_000_000_000})
    await asyncio.sleep(0.05)
    fetching = asyncio.create_task(psub.fetch(10, 5.0))
    await asyncio.sleep(0.05)
    # When a message is published: the server hands it to the earlier request
    started = time.monotonic()
    await _publish(client, 1)
    msgs = await asyncio.wait_for(fetching, 6.0)
    # Then the fetch returns it at once, not when its own request expires
    assert [m.data for m in msgs] == [b"0"]
    assert time.monotonic() - started < 1.0


async def test_an_ephemeral_consumer_is_deleted_on_close(client: Client) -> None:
    await _publish(client, 3)
    config = api.ConsumerConfig(ack_policy=api.AckPolicy.NONE, inactive_threshold=30.0)
    puller, info = await Puller.create(client, STREAM, config)
    assert info.num_pending == 3
    assert [m.data for m in await puller.fetch(10, 2.0)] == [b"0", b"1", b"2"]
    await puller.close()
    await puller.close()  # idempotent
    with pytest.raises(nats.js.errors.NotFoundError):
        await client.jetstream().consumer_info(STREAM, info.name)
    with pytest.raises(nats.errors.BadSubscriptionError):
        await puller.fetch(1, 1.0)


async def test_a_plain_nats_py_client_is_read_through_a_callback(
    nats_server: NatsServerProcess,
) -> None:
    # Given a client that is nats-py's own (no direct subscriptions)
    plain = await nats.connect(nats_server.url)
    try:
        await plain.jetstream().add_stream(api.StreamConfig(name="PLAIN", subjects=["pl.>"]))
        for i in range(7):
            await plain.jetstream().publish("pl.x", str(i).encode())
        await plain.jetstream().add_consumer(
            "PLAIN", api.ConsumerConfig(durable_name="d", ack_policy=api.AckPolicy.ALL)
        )
        puller = await Puller.bind(plain, "PLAIN", "d")
        # When it is fetched from, Then the batches come back the same way
        assert [m.data for m in await puller.fetch(4, 5.0)] == [b"0", b"1", b"2", b"3"]
        assert [m.data for m in await puller.fetch(10, 5.0)] == [b"4", b"5", b"6"]
        await puller.close()
    finally:
        await plain.close()


async def test_a_standing_pull_delivers_each_message_once_in_order_across_renewals(
    client: Client,
) -> None:
    # Given a consumer read through standing requests that expire every 0.4 s and ask for 7
    psub = await _consumer(client, "standing")
    psub.standing_batch, psub.standing_expires = 7, 0.4
    received: list[bytes] = []

    async def read(until: int) -> None:
        while len(received) < until:
            with contextlib.suppress(nats.errors.TimeoutError):
                received.extend(m.data for m in await psub.pull(5, 0.3))

    # When messages arrive in bursts, before, during and after requests expire
    await _publish(client, 12)
    await asyncio.wait_for(read(12), 10)
    await asyncio.sleep(0.9)  # the standing request expired in between: it is renewed
    await _publish(client, 20, start=12)
    await asyncio.wait_for(read(32), 10)
    # Then each arrived once, in stream order, in batches of at most 5
    assert received == [str(i).encode() for i in range(32)]
    # And an idle pull is bounded by its timeout
    started = time.monotonic()
    with pytest.raises(nats.errors.TimeoutError):
        await psub.pull(5, 0.2)
    assert time.monotonic() - started < 1.0
    await psub.close()


async def test_a_standing_pull_sends_no_request_per_message(client: Client) -> None:
    # Given a consumer read through a standing request, and a count of the requests it sends
    psub = await _consumer(client, "quiet")
    requests: list[str] = []

    async def count(msg: nats.aio.msg.Msg) -> None:
        requests.append(msg.subject)

    spy = await client.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.quiet", cb=count)
    # When 50 messages are written one at a time and each is pulled as it comes
    for i in range(50):
        await _publish(client, 1, start=i)
        assert [m.data for m in await psub.pull(10, 5.0)] == [str(i).encode()]
    await client.flush()
    # Then one request served them all (a fetch sends one per batch)
    assert len(requests) == 1
    await spy.unsubscribe()
    await psub.close()
