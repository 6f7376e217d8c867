"""``MemstreamNatsClient`` on a real nats-server: requests with counter tokens and a timer, and
subscriptions delivered straight to a function, behave as nats-py's own."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import nats.errors
import pytest
from nats.aio.msg import Msg
from support.processes import freeze

from memstream.workers.log.event_log import (
    EventLog,
    ExpectedSequenceMismatch,
    OutgoingMessage,
    PublishResult,
    connect_nats,
)
from memstream.workers.log.nats_client import MemstreamNatsClient
from memstream.workers.runtime.nats_server import NatsServerProcess, free_port


async def _ignore(msg: Msg) -> None:
    pass


@pytest.fixture
async def client(nats_server: NatsServerProcess) -> AsyncIterator[MemstreamNatsClient]:
    nc = await connect_nats(nats_server.url)
    assert isinstance(nc, MemstreamNatsClient)
    yield nc
    await nc.close()


async def test_concurrent_requests_each_get_their_own_reply(client: MemstreamNatsClient) -> None:
    # Given a responder that answers each request late, in reverse order of arrival
    async def respond(msg: Msg) -> None:
        await asyncio.sleep(0.05 - int(msg.data) * 0.001)
        await msg.respond(b"re:" + msg.data + b":" + (msg.headers or {}).get("X-N", "").encode())

    responder = await client.subscribe("svc.echo", cb=respond)
    # When 40 requests are in flight at once, with headers
    replies = await asyncio.gather(
        *(
            client.request("svc.echo", str(i).encode(), timeout=5, headers={"X-N": str(i)})
            for i in range(40)
        )
    )
    # Then each got the reply to its own request, and nothing is left waiting
    assert [r.data for r in replies] == [f"re:{i}:{i}".encode() for i in range(40)]
    assert client._replies == {}
    await responder.unsubscribe()


async def test_a_request_nobody_answers_times_out_and_cleans_up(
    client: MemstreamNatsClient,
) -> None:
    # Given a subscriber that never answers
    silent = await client.subscribe("svc.silent", cb=_ignore)
    # When a request is sent to it with a 0.2 s timeout
    started = time.monotonic()
    with pytest.raises(nats.errors.TimeoutError):
        await client.request("svc.silent", b"?", timeout=0.2)
    # Then it gave up after about that, and forgot the request
    assert 0.15 < time.monotonic() - started < 2.0
    assert client._replies == {}
    # And a subject with no subscriber at all is refused at once, as nats-py does
    with pytest.raises(nats.errors.NoRespondersError):
        await client.request("svc.nobody", b"?", timeout=5)
    await silent.unsubscribe()


async def test_a_cancelled_request_is_forgotten(client: MemstreamNatsClient) -> None:
    silent = await client.subscribe("svc.slow", cb=_ignore)
    task = asyncio.create_task(client.request("svc.slow", b"?", timeout=30))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert client._replies == {}
    await silent.unsubscribe()


async def test_a_direct_subscription_gets_every_message_in_order_until_unsubscribed(
    client: MemstreamNatsClient,
) -> None:
    # Given a subscription delivered straight to a function
    got: list[tuple[str, bytes, dict[str, str] | None]] = []
    all_there = asyncio.Event()

    def handle(msg: Msg) -> None:
        got.append((msg.subject, msg.data, msg.headers))
        if len(got) == 200:
            all_there.set()

    subscription = await client.subscribe_direct("feed.*", handle)
    # When 200 messages are published, some with headers
    for i in range(200):
        headers = {"N": str(i)} if i % 2 else None
        await client.publish(f"feed.{i % 4}", str(i).encode(), headers=headers)
    async with asyncio.timeout(5):  # a flush's PONG may come before the deliveries
        await all_there.wait()
    # Then the function got all of them, in order, with their subjects and headers
    assert [data for _, data, _ in got] == [str(i).encode() for i in range(200)]
    assert [subject for subject, _, _ in got[:4]] == ["feed.0", "feed.1", "feed.2", "feed.3"]
    assert got[1][2] == {"N": "1"}
    assert got[0][2] is None
    assert subscription.delivered == 200
    # And after unsubscribing it gets nothing more, and the client forgets it
    await subscription.unsubscribe()
    await client.publish("feed.0", b"late")
    await client.publish("feed.1", b"last")
    await client.flush()
    await asyncio.sleep(0.2)
    assert len(got) == 200
    assert subscription._id not in client._direct


async def test_requests_work_again_after_the_client_is_closed_and_reconnected(
    nats_server: NatsServerProcess,
) -> None:
    # Given a client that made a request, was closed, and connected again
    client = MemstreamNatsClient()
    await client.connect(nats_server.url)
    responder = await client.subscribe("svc.again", cb=_echo)
    assert (await client.request("svc.again", b"1", timeout=5)).data == b"1"
    await client.close()
    await client.connect(nats_server.url)
    try:
        responder = await client.subscribe("svc.again", cb=_echo)
        # When it makes a request, Then the reply reaches it (on a new reply subscription)
        assert (await client.request("svc.again", b"2", timeout=5)).data == b"2"
        await responder.unsubscribe()
    finally:
        await client.close()


async def _echo(msg: Msg) -> None:
    await msg.respond(msg.data)


async def _lose_next_write(
    server: NatsServerProcess, client: Any, write: Callable[[], Awaitable[PublishResult]]
) -> tuple[asyncio.Task[PublishResult], NatsServerProcess]:
    """Start ``write`` against a server frozen (so it reads nothing), killed once the write is
    on the wire, and started again on the same port and store; the write's task and the new
    server."""
    freeze(server.process)  # stopped before it can read the write
    sent = client.stats["out_msgs"]
    task = asyncio.create_task(write())
    deadline = time.monotonic() + 10
    while client.stats["out_msgs"] == sent:  # until it is written to the dying connection
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    server.stop(signal.SIGKILL)
    restarted = await asyncio.to_thread(
        NatsServerProcess.start,
        server.store_dir,
        port=server.port,
        log_path=server.store_dir.parent / f"nats-{time.monotonic_ns()}.log",
    )
    return task, restarted


async def test_a_write_lost_with_its_connection_is_sent_again_on_reconnect(tmp_path: Path) -> None:
    # Given a stream on a server, and a client that has written one message to it
    server = NatsServerProcess.start(tmp_path / "store", port=free_port())
    client = await connect_nats(server.url)
    log = EventLog(client, "LOST", timeout=10)
    try:
        await log.ensure_stream()
        await log.publish("ms.a", [OutgoingMessage(b"one", {}, "id-1")], None)
        # When the next write goes out to a server that is frozen, killed and started again
        write, server = await _lose_next_write(
            server,
            client,
            lambda: log.publish("ms.a", [OutgoingMessage(b"two", {}, "id-2")], None),
        )
        # Then the client sends the write again when it reconnects, and it is stored once
        result = await asyncio.wait_for(write, 10)
        assert (result.seq, result.duplicate) == (2, False)
        assert await log.stream_last_seq() == 2
        # And a write sent again after the log stored it is acknowledged as a duplicate
        again = await log.publish("ms.a", [OutgoingMessage(b"two", {}, "id-2")], None)
        assert (again.seq, again.duplicate) == (2, True)
    finally:
        await client.close()
        server.stop()


async def test_a_batch_lost_with_its_connection_is_sent_again_whole_on_reconnect(
    tmp_path: Path,
) -> None:
    # Given a stream on a server, and a client that has written one message to a subject
    server = NatsServerProcess.start(tmp_path / "store", port=free_port())
    client = await connect_nats(server.url)
    log = EventLog(client, "LOSTBATCH", timeout=10)
    batch = [OutgoingMessage(f"b{n}".encode(), {}, f"id-b{n}") for n in range(3)]
    try:
        await log.ensure_stream()
        await log.publish("ms.a", [OutgoingMessage(b"one", {}, "id-1")], None)
        # When a batch of three, guarded by the subject's last sequence, goes out to a server
        # that is frozen, killed and started again
        write, server = await _lose_next_write(
            server, client, lambda: log.publish("ms.a", batch, expected_last_seq=1)
        )
        # Then the client sends the whole batch again when it reconnects, stored once
        result = await asyncio.wait_for(write, 10)
        assert (result.seq, result.duplicate) == (4, False)
        assert await log.stream_last_seq() == 4
        stored = [await log.js.get_msg(log.stream, seq) for seq in (2, 3, 4)]
        assert [m.data for m in stored] == [b"b0", b"b1", b"b2"]
        # And the batch sent again after the log stored it (a caller retrying its command) is
        # acknowledged as a duplicate, with or without its guard, and nothing is added
        again = await log.publish("ms.a", batch, expected_last_seq=1)
        assert (again.seq, again.duplicate) == (4, True)
        again = await log.publish("ms.a", batch, expected_last_seq=None)
        assert (again.seq, again.duplicate) == (4, True)
        assert await log.stream_last_seq() == 4
        # But a batch that was not stored, refused by its guard, is still refused
        with pytest.raises(ExpectedSequenceMismatch):
            await log.publish("ms.a", [OutgoingMessage(b"x", {}, f"id-x{n}") for n in range(2)], 1)
    finally:
        await client.close()
        server.stop()


@pytest.mark.parametrize("write_early", [True, False], ids=["own-write", "nats-py-flusher"])
async def test_an_overlapped_request_is_on_the_wire_before_the_work_beside_it_runs(
    nats_server: NatsServerProcess, client: MemstreamNatsClient, write_early: bool
) -> None:
    # Given a responder in another thread (its own event loop and connection) that notes
    # when a request reaches it
    received = threading.Event()
    ready = threading.Event()
    loop = asyncio.new_event_loop()

    async def serve() -> Any:
        responder = await nats.connect(nats_server.url)

        async def respond(msg: Msg) -> None:
            received.set()
            await msg.respond(b"done:" + msg.data)

        await responder.subscribe("svc.slow", cb=respond)
        await responder.flush()
        ready.set()
        return responder

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    responder = asyncio.run_coroutine_threadsafe(serve(), loop).result(10)
    try:
        assert ready.is_set()
        client.write_early = write_early
        seen: list[bool] = []

        def beside() -> None:
            # Blocks this event loop: the request can only reach the responder if it was
            # written to the socket before this ran
            seen.append(received.wait(timeout=5))

        # When a request runs work beside its round trip
        reply = await client.request_overlapped("svc.slow", b"x", 5, {"Nats-Msg-Id": "r1"}, beside)
        # Then the work ran once, after the request was on its way, and the reply came back
        assert seen == [True]
        assert reply.data == b"done:x"
        assert client._replies == {}
        assert client._in_flight == {}
    finally:
        asyncio.run_coroutine_threadsafe(responder.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def test_an_overlapped_request_without_a_reply_fails_as_a_request_does(
    client: MemstreamNatsClient,
) -> None:
    # Given a subscriber that never answers
    silent = await client.subscribe("svc.silent", cb=_ignore)
    calls: list[int] = []
    # When a request with work beside it waits for a reply
    with pytest.raises(nats.errors.TimeoutError):
        await client.request_overlapped("svc.silent", b"x", 0.2, {}, lambda: calls.append(1))
    # Then the work ran, the request timed out, and nothing is left waiting
    assert calls == [1]
    assert client._replies == {}
    assert client._in_flight == {}
    # And a subject with no subscriber at all is refused, as nats-py does
    with pytest.raises(nats.errors.NoRespondersError):
        await client.request_overlapped("svc.nobody", b"?", 5, {}, lambda: calls.append(2))
    assert client._replies == {}
    await silent.unsubscribe()
