"""Fetching batches from a JetStream pull consumer without a task per message.

nats-py 2.16's ``PullSubscription.fetch`` waits for every message of a batch with
``Subscription.next_msg``, which creates an asyncio task (named by a fresh uuid4) and a
``wait_for`` per message, even when the message is already queued: about 48 µs per message here,
a third of what the projector spends on an event. :func:`fetch` sends the same pull requests in
the same order (a ``no_wait`` probe, then one lingering request for the time left) and reads the
subscription's queue directly: queued messages cost nothing to take, and waiting for the next one
costs a timeout handle, not a task.

Status messages are handled as nats-py does: heartbeats are skipped, "no messages" (404),
"request timeout" (408) and "conflict" (409) end a request, any other status is an error.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import api

_END_OF_REQUEST = frozenset(
    {api.StatusCode.NO_MESSAGES, api.StatusCode.REQUEST_TIMEOUT, api.StatusCode.CONFLICT}
)


class _Queue:
    """The subscription's pending queue, with nats-py's byte accounting kept."""

    def __init__(self, psub: Any) -> None:
        self._sub = psub._sub
        self._queue: asyncio.Queue[Msg] = psub._sub._pending_queue

    def _took(self, msg: Msg) -> Msg:
        self._sub._pending_size -= len(msg.data)
        self._queue.task_done()
        return msg

    def take_nowait(self) -> Msg | None:
        try:
            return self._took(self._queue.get_nowait())
        except asyncio.QueueEmpty:
            return None

    async def take(self, timeout: float) -> Msg:
        """The next message; raises ``TimeoutError`` after ``timeout`` seconds."""
        msg = self.take_nowait()
        if msg is not None:
            return msg
        if timeout <= 0:
            raise TimeoutError
        async with asyncio.timeout(timeout):
            return self._took(await self._queue.get())


def _status(msg: Msg) -> str | None:
    return msg.headers.get(api.Header.STATUS) if msg.headers else None


def _check(status: str, msg: Msg) -> None:
    """Raise for a status that is neither a heartbeat nor the end of a request."""
    if status != api.StatusCode.CONTROL_MESSAGE and status not in _END_OF_REQUEST:
        raise nats.js.errors.APIError.from_msg(msg)


async def _request(psub: Any, request: dict[str, Any]) -> None:
    await psub._nc.publish(psub._nms, json.dumps(request).encode(), psub._deliver)


async def _collect(queue: _Queue, msgs: list[Msg], batch: int, deadline: float) -> bool:
    """Add the replies to one pull request to ``msgs`` until it ends, ``batch`` is reached or
    the deadline passes. Returns whether the server answered at all (a heartbeat counts)."""
    answered = False
    while len(msgs) < batch:
        try:
            msg = await queue.take(deadline - time.monotonic())
        except TimeoutError:
            break
        status = _status(msg)
        if status is None:
            msgs.append(msg)
            answered = True
            continue
        _check(status, msg)
        answered = True
        if status in _END_OF_REQUEST:
            break
    return answered


async def fetch(psub: Any, batch: int, timeout: float) -> list[Msg]:
    """Up to ``batch`` messages of the pull subscription ``psub``, as ``psub.fetch`` returns.

    Raises:
        nats.errors.TimeoutError: no message arrived within ``timeout`` seconds.
        nats.js.errors.APIError: the server answered with an error status.
    """
    if batch < 1 or timeout <= 0:
        raise ValueError(f"batch {batch} and timeout {timeout} must be positive")
    start = time.monotonic()
    deadline = start + timeout
    queue = _Queue(psub)
    msgs: list[Msg] = []
    # Replies to earlier requests that arrived after their fetch returned come first.
    while len(msgs) < batch and (msg := queue.take_nowait()) is not None:
        if _status(msg) is None:
            msgs.append(msg)
    if len(msgs) == batch:
        return msgs
    # A no_wait probe: what is ready now. With ``expires`` (only when nothing was queued) the
    # server waits for the first message, then ends the request.
    probe: dict[str, Any] = {"batch": batch - len(msgs), "no_wait": True}
    if not msgs:
        probe["expires"] = int(timeout * 1_000_000_000) - 100_000
    await _request(psub, probe)
    answered = await _collect(queue, msgs, batch, deadline)
    if msgs:
        return msgs
    remaining = deadline - time.monotonic()
    if remaining <= 0.0002:
        raise nats.errors.TimeoutError
    # Nothing yet: one lingering request for the time that is left.
    await _request(psub, {"batch": batch, "expires": int(remaining * 1_000_000_000) - 100_000})
    answered = await _collect(queue, msgs, batch, deadline) or answered
    if not msgs:
        raise nats.js.errors.FetchTimeoutError if answered else nats.errors.TimeoutError
    return msgs
