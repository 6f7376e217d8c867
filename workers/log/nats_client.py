"""nats-py's client with faster message headers (every event carries eleven), requests and
deliveries.

Headers are most of what nats-py 2.16 spends per message: building an event's header block for
a publish does a regex match, a strip, a translate and four bytearray extends per header, and
parsing one on delivery checks each name for whitespace one character at a time through a
generator. :class:`MemstreamNatsClient` produces and reads the same bytes and the same dicts with
less work per header (bench/RESULTS.md, 'Figures moved from code comments'); the tests compare
both against nats-py's own code.

Every message nats-py delivers to a subscription goes through that subscription's queue and
task, and every request draws a random token (a ``getrandom`` system call) and waits in
``asyncio.wait_for``. A subscription made with :meth:`MemstreamNatsClient.subscribe_direct`
instead hands each message to a plain function as it is read; requests use one such
subscription, a counter for their tokens and a timer handle. Publishing an event and
receiving it in the projector each cost one task switch less.

A request that carries a ``Nats-Msg-Id`` (every append) and was written to a connection that
then died is sent again when the client reconnects, so a write in flight when the server is
killed or restarted completes instead of timing out; the log drops a second copy. So is a
JetStream atomic batch (:meth:`MemstreamNatsClient.request_batch`), whole and under a new batch
id: the server forgets an open batch with its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nats import errors
from nats.aio.client import NO_RESPONDERS_STATUS, Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import api
from nats.protocol import command as prot_command

# nats-py's rule for a header name (an HTTP token) and its newline replacement in values.
_HEADER_KEY = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VALUE_NEWLINES = str.maketrans({"\r": " ", "\n": " "})
# What ``str.isspace`` finds in an ASCII header name once ``bytes.strip`` has trimmed it.
_NAME_SPACE = re.compile(rb"[\t\n\x0b\x0c\r\x1c-\x1f ]")
_PREFIX_CACHE_SIZE = 256
_MSG_ID = "Nats-Msg-Id"
BATCH_ID = "Nats-Batch-Id"
BATCH_SEQUENCE = "Nats-Batch-Sequence"
BATCH_COMMIT = "Nats-Batch-Commit"
# Turns of the event loop request_overlapped gives nats-py's flusher to write a request.
_FLUSHER_TURNS = 4
# One message of a batch: subject, payload, headers (without the batch's own).
BatchMessage = tuple[str, bytes, Mapping[str, str]]


class MemstreamNatsClient(Client):
    """nats-py's client; header blocks are built and parsed faster, to the same result."""

    def __init__(self) -> None:
        super().__init__()
        # request_overlapped writes a request itself (True) or lets nats-py's flusher (False).
        self.write_early = True
        self._prefixes: dict[str, bytes] = {}  # name → b"Name: " once validated (names repeat)
        self._direct: dict[int, Callable[[Msg], None]] = {}  # sid → handler
        self._replies: dict[str, asyncio.Future[Msg]] = {}  # request token → its reply
        self._reply_prefix = ""
        self._request_count = 0
        # Idempotent requests (they carry a Nats-Msg-Id) awaiting their reply, with the number
        # of the connection they went out on: one that died with its connection is sent again.
        self._in_flight: dict[str, tuple[int, str, bytes, dict[str, Any]]] = {}
        self._batches_in_flight: dict[str, tuple[int, Sequence[BatchMessage]]] = {}
        self._connection_number = 0

    @property
    def connection_number(self) -> int:
        """How many times it has reconnected (a server restarted, a failover): what was true of
        the server before may not be now (its log may have lost its tail)."""
        return self._connection_number

    async def subscribe_direct(self, subject: str, handler: Callable[[Msg], None]) -> Subscription:
        """Subscribe ``handler``, called with each message as soon as it is read (on the
        reading task: it must not block). Unsubscribe as any subscription."""
        subscription = await self.subscribe(subject)
        self._direct[subscription._id] = handler
        return subscription

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes
    ) -> None:
        handler = self._direct.get(sid)
        if handler is None:
            await super()._process_msg(sid, subject, reply, data, headers)
            return
        subscription = self._subs.get(sid)
        if subscription is None:  # closed, or unsubscribed as nats-py does it on a drain
            self._direct.pop(sid, None)
            return
        # As nats-py's _process_msg, without the subscription's queue and task.
        subscription._received += 1
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        msg = self._build_message(sid, subject, reply, data, await self._process_headers(headers))
        if msg:
            handler(msg)

    async def _close(self, status: int, do_cbs: bool = True) -> None:
        await super()._close(status, do_cbs)
        # nats-py drops every subscription here: a later connect() subscribes for replies anew.
        self._direct.clear()
        self._reply_prefix = ""
        self._in_flight.clear()
        self._batches_in_flight.clear()

    def _remove_sub(self, sid: int, max_msgs: int = 0) -> None:
        super()._remove_sub(sid, max_msgs)
        self._direct.pop(sid, None)

    async def _request_new_style(
        self,
        subject: str,
        payload: bytes,
        timeout: float = 1,
        headers: dict[str, Any] | None = None,
    ) -> Msg:
        return await self._request(subject, payload, timeout, headers, None)

    async def request_overlapped(
        self,
        subject: str,
        payload: bytes,
        timeout: float,
        headers: dict[str, Any],
        while_waiting: Callable[[], None],
    ) -> Msg:
        """:meth:`request`, calling ``while_waiting()`` once the request is on its way to the
        server and before its reply is awaited: work that does not need the reply (or that
        the reply confirms) overlaps the round trip instead of following it. Not called when
        the request could not be written at once (reconnecting, say).

        The request is written to the socket at once (:attr:`write_early`, nats-py's flusher
        task would write it at its next turn of the event loop); with ``write_early`` False,
        the loop is given turns until the flusher has.
        """
        msg = await self._request(subject, payload, timeout, headers, while_waiting)
        # As nats-py's request does.
        if msg.headers and msg.headers.get(api.Header.STATUS) == NO_RESPONDERS_STATUS:
            raise errors.NoRespondersError
        return msg

    async def _request(
        self,
        subject: str,
        payload: bytes,
        timeout: float,
        headers: dict[str, Any] | None,
        while_waiting: Callable[[], None] | None,
    ) -> Msg:
        if self.is_draining_pubs:
            raise errors.ConnectionDrainingError
        await self._ensure_reply_subscription()
        # Tokens only need to be unique among this connection's requests.
        self._request_count += 1
        token = str(self._request_count)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Msg] = loop.create_future()
        self._replies[token] = future
        if headers is not None and _MSG_ID in headers:
            # While reconnecting, nats-py queues it for the next connection.
            number = self._connection_number + (0 if self.is_connected else 1)
            self._in_flight[token] = (number, subject, payload, headers)
        expiry = loop.call_later(timeout, _expire, future)
        try:
            await self.publish(subject, payload, reply=self._reply_prefix + token, headers=headers)
            # Written now rather than at the flusher's next turn: the reply comes sooner, and
            # the flusher's wake-up is saved.
            written = await self._written()
            if while_waiting is not None and written and not future.done():
                while_waiting()
            return await future
        finally:
            expiry.cancel()
            del self._replies[token]
            self._in_flight.pop(token, None)

    async def _written(self) -> bool:
        """Write what is pending to the connection now; False if it could not be."""
        if not self.is_connected or self._transport is None:
            return False
        if self.write_early:
            # As nats-py 2.16's _flusher does at its next turn (it then finds nothing to write).
            if self._pending_data_size:
                self._transport.writelines(self._pending[:])
                self._pending = []
                self._pending_data_size = 0
            return True
        for _ in range(_FLUSHER_TURNS):
            if not self._pending_data_size:
                return True
            await asyncio.sleep(0)
        return not self._pending_data_size

    async def request_batch(self, messages: Sequence[BatchMessage], timeout: float) -> Msg:
        """Publish ``messages`` as one JetStream atomic batch and wait for its acknowledgement
        (the reply to its last, committing message). A batch written to a connection that then
        died is sent again, whole, when the client reconnects; the log refuses it if it stored
        the first copy (its message ids are known).

        Raises:
            nats.errors.TimeoutError: no acknowledgement within ``timeout``.
        """
        if self.is_draining_pubs:
            raise errors.ConnectionDrainingError
        await self._ensure_reply_subscription()
        self._request_count += 1
        token = str(self._request_count)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Msg] = loop.create_future()
        self._replies[token] = future
        number = self._connection_number + (0 if self.is_connected else 1)
        self._batches_in_flight[token] = (number, messages)
        expiry = loop.call_later(timeout, _expire, future)
        try:
            for subject, payload, headers, reply in frame_batch(
                messages, self._reply_prefix + token
            ):
                await self.publish(subject, payload, reply=reply, headers=headers)
            return await future
        finally:
            expiry.cancel()
            del self._replies[token]
            self._batches_in_flight.pop(token, None)

    async def _ensure_reply_subscription(self) -> None:
        if not self._reply_prefix:
            prefix = f"{self.new_inbox()}."
            await self.subscribe_direct(f"{prefix}*", self._reply)
            self._reply_prefix = prefix

    async def _process_connect_init(self) -> None:
        reconnecting = self.is_reconnecting
        try:
            await super()._process_connect_init()
        except BaseException:
            if reconnecting and self._transport is not None:
                # nats-py 2.16 tries the next server with a new transport and leaves this one
                # open: a server that accepts the connection but never answers (paused, cut
                # off) would leak a socket per reconnect attempt.
                with contextlib.suppress(Exception):
                    self._transport.close()  # type: ignore[no-untyped-call]  # (nats-py)
            raise
        if not reconnecting:
            return
        # A request written to a connection that then died (a server killed or restarted) was
        # lost with it: queue it again, after the resubscriptions nats-py sends next. The log
        # drops a copy it already stored (same Nats-Msg-Id) and acknowledges it as a duplicate.
        lost, self._connection_number = self._connection_number, self._connection_number + 1
        for token, (number, subject, payload, headers) in self._in_flight.items():
            if number == lost:
                command = prot_command.hpub_cmd(
                    subject, self._reply_prefix + token, self._header_block(headers), payload
                )
                self._pending.append(command)
                self._pending_data_size += len(command)
                self._in_flight[token] = (self._connection_number, subject, payload, headers)
        for token, (number, messages) in self._batches_in_flight.items():
            if number == lost:
                for subject, payload, headers, reply in frame_batch(
                    messages, self._reply_prefix + token
                ):
                    command = prot_command.hpub_cmd(
                        subject, reply, self._header_block(headers), payload
                    )
                    self._pending.append(command)
                    self._pending_data_size += len(command)
                self._batches_in_flight[token] = (self._connection_number, messages)

    def _reply(self, msg: Msg) -> None:
        future = self._replies.get(msg.subject[len(self._reply_prefix) :])
        if future is not None and not future.done():
            future.set_result(msg)

    def _header_block(self, headers: Mapping[str, str]) -> bytes:
        """The ``NATS/1.0`` header block nats-py would send for ``headers``.

        Raises:
            nats.errors.BadHeaderError: a name that is not an HTTP token.
        """
        parts = [b"NATS/1.0\r\n"]
        prefixes = self._prefixes
        for name, value in headers.items():
            prefix = prefixes.get(name)
            if prefix is None:
                key = name.strip()
                if not key:
                    continue  # nats-py skips empty names
                if not _HEADER_KEY.fullmatch(key):
                    raise errors.BadHeaderError(key)
                prefix = key.encode() + b": "
                if len(prefixes) < _PREFIX_CACHE_SIZE:
                    prefixes[name] = prefix
            text = value.strip()
            if "\r" in text or "\n" in text:
                text = text.translate(_VALUE_NEWLINES)
            parts += (prefix, text.encode(), b"\r\n")
        parts.append(b"\r\n")
        return b"".join(parts)

    async def _send_publish(
        self,
        subject: str,
        reply: str,
        payload: bytes,
        payload_size: int,
        headers: dict[str, Any] | None,
    ) -> None:
        if headers is None or subject == "":
            await super()._send_publish(subject, reply, payload, payload_size, headers)
            return
        command = prot_command.hpub_cmd(subject, reply, self._header_block(headers), payload)
        # From here on as nats-py 2.16's own _send_publish.
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += payload_size
        await self._send_command(command)
        if self._flush_queue is not None and self._flush_queue.empty():
            await self._flush_pending()

    @staticmethod
    def _parse_header_lines(raw: bytes) -> dict[str, str]:
        """nats-py's parse of a header block: lines split at CRLF and at their first ":",
        names and values trimmed, names with whitespace or non-ASCII bytes skipped, values
        decoded with replacement, the last of a repeated name wins."""
        headers: dict[str, str] = {}
        for line in raw.split(b"\r\n"):
            name, colon, value = line.partition(b":")
            if not colon:
                continue
            name = name.strip()
            if not name.isascii() or _NAME_SPACE.search(name):
                continue
            headers[name.decode("ascii")] = value.strip().decode("utf-8", "replace")
        return headers


def frame_batch(
    messages: Sequence[BatchMessage], reply: str
) -> list[tuple[str, bytes, dict[str, str], str]]:
    """``messages`` as the publishes of one atomic batch under a new batch id (unique among
    the server's open batches, at most 64 characters): (subject, payload, headers, reply); the
    last commits the batch and carries the reply subject."""
    batch_id = uuid.uuid4().hex
    framed = []
    for index, (subject, payload, headers) in enumerate(messages, start=1):
        framing = {**headers, BATCH_ID: batch_id, BATCH_SEQUENCE: str(index)}
        last = index == len(messages)
        if last:
            framing[BATCH_COMMIT] = "1"
        framed.append((subject, payload, framing, reply if last else ""))
    return framed


def _expire(future: asyncio.Future[Msg]) -> None:
    if not future.done():
        future.set_exception(errors.TimeoutError())
