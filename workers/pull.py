"""Reading a JetStream pull consumer in batches.

nats-py 2.16's ``PullSubscription.fetch`` waits for every message of a batch with
``Subscription.next_msg``, which creates an asyncio task (named by a fresh uuid4) and a ``wait_for``
per message, even when the message is already queued: a large share of what the projector spends on
an event (bench/RESULTS.md, 'Figures moved from code comments'). It also sends every pull request
from one reply inbox, so the "408 Request Timeout" of a request that outlived its fetch can end the
next fetch's request early.

:class:`Puller` sends the same pull requests as nats-py (a ``no_wait`` probe, then one lingering
request for the time left), each from its own reply subject under one wildcard subscription:
messages are buffered as they are read (:meth:`MemstreamNatsClient.subscribe_direct`, or a
callback on another client) and taken without a task each, and a status message counts
only for the request it answers (status messages arrive on the request's reply subject; data
messages carry their stream subject). Heartbeats are skipped; "no messages" (404), "request
timeout" (408) and "conflict" (409) end a request, as nats-py treats them; any other status is an
error.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections import deque
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api

from memstream.workers.log.nats_client import MemstreamNatsClient

_V1_TOKENS = 9  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<time>.<pending>
_END_OF_REQUEST = frozenset(
    {api.StatusCode.NO_MESSAGES, api.StatusCode.REQUEST_TIMEOUT, api.StatusCode.CONFLICT}
)
# A standing request (see Puller.pull) asks for this many messages for this long, and is renewed
# once it has fewer than a batch left or is about to expire.
STANDING_BATCH = 10_000
STANDING_EXPIRES = 2.0
STANDING_RENEW_BEFORE = 0.5


def stream_sequence(msg: Msg) -> int:
    """The stream sequence of a message a consumer delivered, read from its reply subject as
    nats-py's ``msg.metadata`` reads it, without building the rest of the metadata.

    Raises:
        nats.errors.NotJSMessageError: not a JetStream delivery.
    """
    tokens = Msg.Metadata._get_metadata_fields(msg.reply)
    return int(tokens[5] if len(tokens) == _V1_TOKENS else tokens[Msg.Ack.StreamSeq])


def _status(msg: Msg) -> str | None:
    return msg.headers.get(api.Header.STATUS) if msg.headers else None


# Once a fetch holds a message, how long it waits for the next before it returns (a server
# streams a batch's messages back to back: far less than this apart).
SETTLE = 0.002


class Puller:
    """Batches from one pull consumer (durable or ephemeral), in stream order."""

    def __init__(self, client: Client, stream: str, consumer: str) -> None:
        self._client = client
        self._stream = stream
        self._consumer = consumer
        self._ephemeral = False
        self._next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._inbox = client.new_inbox()
        self._requests = itertools.count(1)
        self._buffer: deque[Msg] = deque()
        self._arrived = asyncio.Event()
        self._subscription: Any = None
        # The standing request of pull(): its reply subject, how many messages it may still
        # deliver, and when it expires (monotonic).
        self._standing: str | None = None
        self._standing_left = 0
        self._standing_until = 0.0
        self.standing_batch = STANDING_BATCH
        self.standing_expires = STANDING_EXPIRES

    @classmethod
    async def bind(cls, client: Client, stream: str, consumer: str) -> Puller:
        """Read the existing consumer ``consumer`` of ``stream``."""
        puller = cls(client, stream, consumer)
        subject = f"{puller._inbox}.*"
        if isinstance(client, MemstreamNatsClient):
            puller._subscription = await client.subscribe_direct(subject, puller._deliver)
        else:
            puller._subscription = await client.subscribe(subject, cb=puller._received)
        return puller

    @classmethod
    async def create(
        cls, client: Client, stream: str, config: api.ConsumerConfig
    ) -> tuple[Puller, api.ConsumerInfo]:
        """Create an ephemeral consumer (deleted again by :meth:`close`) and read it.

        Raises:
            nats.js.errors.BadRequestError: the server refused the consumer configuration.
        """
        info = await client.jetstream().add_consumer(stream, config)
        puller = await cls.bind(client, stream, info.name)
        puller._ephemeral = True
        return puller, info

    async def close(self) -> None:
        """Stop receiving (requests still open on the server expire on their own) and delete
        the consumer if :meth:`create` made it. Never raises."""
        if self._subscription is not None:
            subscription, self._subscription = self._subscription, None
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
            if self._ephemeral:
                with contextlib.suppress(Exception):  # it expires on its own anyway
                    await self._client.jetstream(timeout=1.0).delete_consumer(
                        self._stream, self._consumer
                    )

    def _deliver(self, msg: Msg) -> None:
        self._buffer.append(msg)
        self._arrived.set()

    async def _received(self, msg: Msg) -> None:
        self._deliver(msg)

    async def _request(self, request: dict[str, Any]) -> str:
        reply = f"{self._inbox}.{next(self._requests)}"
        await self._client.publish(self._next_subject, json.dumps(request).encode(), reply=reply)
        return reply

    async def _take(self, deadline: float) -> Msg | None:
        """The next buffered message, waiting until ``deadline`` (``None`` when it passed)."""
        while not self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._arrived.clear()
            try:
                async with asyncio.timeout(remaining):
                    await self._arrived.wait()
            except TimeoutError:
                return None
        return self._buffer.popleft()

    async def _collect(self, msgs: list[Msg], batch: int, reply: str, deadline: float) -> None:
        """Add messages to ``msgs`` until the request sent from ``reply`` ends, ``batch`` is
        reached or the deadline passes, or, once there is a message, until no more arrives
        within :data:`SETTLE` seconds.

        That last bound matters after the event loop was held up: the server may then have
        delivered the new messages under an earlier request that was still open on its side
        (and ended that one), while the request sent from ``reply`` waits for its expiry (half
        a second later) with nothing more to deliver. A message it delivers later is buffered
        for the next fetch.
        """
        while len(msgs) < batch:
            msg = await self._take(
                deadline if not msgs else min(deadline, time.monotonic() + SETTLE)
            )
            if msg is None:
                return
            status = _status(msg)
            if status is None:
                msgs.append(msg)
            elif msg.subject != reply or status == api.StatusCode.CONTROL_MESSAGE:
                continue  # the late status of an earlier request, or a heartbeat
            elif status in _END_OF_REQUEST:
                return
            else:
                raise nats.js.errors.APIError.from_msg(msg)

    async def pull(self, batch: int, timeout: float) -> list[Msg]:
        """Up to ``batch`` messages, as they arrive on a standing pull request.

        :meth:`fetch` sends a pull request for every batch it returns: with writes arriving one
        at a time, one request (and one more message for the server to handle and the client
        to send) per event. A standing request asks for many messages at once and stays open,
        so the server delivers each event as it is stored and the consumer sends nothing per
        event; the request is renewed when it runs low or is about to expire (or after a wait
        that saw nothing, in case the connection dropped and the server forgot it). Messages
        come in stream order, as from :meth:`fetch`.

        Raises:
            nats.errors.TimeoutError: no message arrived within ``timeout`` seconds.
            nats.js.errors.APIError: the server answered with an error status.
        """
        deadline = self._deadline(batch, timeout)
        msgs: list[Msg] = []
        while True:
            self._take_buffered(msgs, batch)
            await self._keep_standing(batch)
            if msgs:
                # A backlog streams in chunk by chunk: let the reader task add what is already
                # on the socket, so that a catch-up commits full batches.
                while len(msgs) < batch:
                    taken = len(msgs)
                    await asyncio.sleep(0)
                    self._take_buffered(msgs, batch)
                    if len(msgs) == taken:
                        break
                return msgs
            msg = await self._take(deadline)
            if msg is None:
                self._standing = None  # renew it on the next call: it may be gone
                raise nats.errors.TimeoutError
            self._buffer.appendleft(msg)

    def _take_buffered(self, msgs: list[Msg], batch: int) -> None:
        """Move buffered data messages to ``msgs`` (up to ``batch``); statuses that end the
        standing request end it, statuses of other requests and heartbeats are dropped."""
        buffer = self._buffer
        while buffer and len(msgs) < batch:
            msg = buffer.popleft()
            status = _status(msg)
            if status is None:
                msgs.append(msg)
                self._standing_left -= 1
            elif msg.subject != self._standing or status == api.StatusCode.CONTROL_MESSAGE:
                continue
            elif status in _END_OF_REQUEST:
                self._standing = None
            else:
                raise nats.js.errors.APIError.from_msg(msg)

    def _deadline(self, batch: int, timeout: float) -> float:
        """When a read of ``batch`` messages within ``timeout`` ends (arguments checked)."""
        if batch < 1 or timeout <= 0:
            raise ValueError(f"batch {batch} and timeout {timeout} must be positive")
        if self._subscription is None:
            raise nats.errors.BadSubscriptionError
        return time.monotonic() + timeout

    async def _keep_standing(self, batch: int) -> None:
        """Send a new standing request if there is none, or the current one runs low on
        messages or time (the old one then simply ends on its own)."""
        now = time.monotonic()
        if (
            self._standing is not None
            and self._standing_left >= batch
            and now < self._standing_until - min(STANDING_RENEW_BEFORE, self.standing_expires / 4)
        ):
            return
        expires = int(self.standing_expires * 1_000_000_000)
        size = max(batch, self.standing_batch)
        self._standing = await self._request({"batch": size, "expires": expires})
        self._standing_left = size
        self._standing_until = now + self.standing_expires

    async def fetch(self, batch: int, timeout: float) -> list[Msg]:
        """Up to ``batch`` messages, as nats-py's ``PullSubscription.fetch`` returns them.

        Raises:
            nats.errors.TimeoutError: no message arrived within ``timeout`` seconds.
            nats.js.errors.APIError: the server answered with an error status.
        """
        deadline = self._deadline(batch, timeout)
        msgs: list[Msg] = []
        # Messages that arrived after an earlier fetch returned come first; statuses left over
        # from earlier requests are dropped.
        while self._buffer and len(msgs) < batch:
            msg = self._buffer.popleft()
            if _status(msg) is None:
                msgs.append(msg)
        if len(msgs) == batch:
            return msgs
        # A no_wait probe: what is ready now. With ``expires`` (only when nothing was buffered)
        # the server waits for the first message, then ends the request.
        probe: dict[str, Any] = {"batch": batch - len(msgs), "no_wait": True}
        if not msgs:
            probe["expires"] = int(timeout * 1_000_000_000) - 100_000
        await self._collect(msgs, batch, await self._request(probe), deadline)
        if msgs:
            return msgs
        remaining = deadline - time.monotonic()
        if remaining > 0.0002:
            # Nothing yet: one lingering request for the time that is left.
            expires = int(remaining * 1_000_000_000) - 100_000
            await self._collect(
                msgs, batch, await self._request({"batch": batch, "expires": expires}), deadline
            )
        if not msgs:
            raise nats.errors.TimeoutError
        return msgs
