"""The write and delivery paths' own parsing and ids: command ids (unique without a system
call each, never repeated by a forked child), publish acks, delivered stream sequences."""

from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.msg import Msg
from nats.errors import NotJSMessageError

import memstream.workers.log.codec as codec
from memstream import UnavailableError
from memstream.workers.log.event_log import EventLog, OutgoingMessage, StillStoringError, _pub_ack
from memstream.workers.pull import stream_sequence


def test_command_ids_are_32_hex_digits_and_unique() -> None:
    ids = [codec.new_command_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert codec.CommandMeta().command_id != codec.CommandMeta().command_id


def test_a_forked_child_draws_a_new_prefix() -> None:
    before = codec.new_command_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id and leave at once
        try:
            os.write(write, codec.new_command_id().encode())
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    after = codec.new_command_id()
    assert re.fullmatch(r"[0-9a-f]{32}", child)
    assert child[:20] != before[:20]
    assert after[:20] == before[:20]
    assert child != after


def _ack(data: bytes) -> Msg:
    return Msg(_client=None, subject="_INBOX.x.1", data=data)  # type: ignore[arg-type]


@given(
    stream=st.text(alphabet="ABCXYZ_-09", min_size=1, max_size=20),
    seq=st.integers(min_value=1, max_value=2**63),
    domain=st.none() | st.text(alphabet="abc-", min_size=1, max_size=8),
    duplicate=st.booleans(),
)
def test_publish_acks_read_as_their_json_says(
    stream: str, seq: int, domain: str | None, duplicate: bool
) -> None:
    # Given an ack as nats-server writes it (fields in its order, with or without extras)
    body: dict[str, object] = {"stream": stream}
    if domain is not None:
        body["domain"] = domain
    body["seq"] = seq
    if duplicate:
        body["duplicate"] = True
    for data in (json.dumps(body, separators=(",", ":")), json.dumps(body)):
        # Then the fast read and the JSON agree
        result = _pub_ack("ms.s", _ack(data.encode()))
        assert (result.seq, result.duplicate) == (seq, duplicate)


STILL_STORING = (
    b'{"error":{"code":409,"err_code":10158,"description":"duplicate message id is in process"}}'
)


def test_a_write_still_being_stored_reads_as_unavailable() -> None:
    # Given the refusal of a message sent again while its first copy is being stored
    with pytest.raises(StillStoringError) as refused:
        _pub_ack("ms.s", _ack(STILL_STORING))
    # Then it is an UnavailableError (outcome unknown), not nats-py's BadRequestError
    assert isinstance(refused.value, UnavailableError)
    assert "ms.s" in str(refused.value)


class _Replies:
    """A NATS client that answers requests with the given replies, in turn."""

    def __init__(self, *replies: bytes) -> None:
        self.replies = list(replies)
        self.sent = 0

    def jetstream(self, timeout: float) -> None:
        return None

    async def request(
        self, subject: str, payload: bytes, timeout: float, headers: dict[str, str]
    ) -> Msg:
        self.sent += 1
        return _ack(self.replies.pop(0))


async def test_a_write_still_being_stored_is_asked_again_until_acknowledged() -> None:
    # Given a log whose first two answers are "still storing", then a duplicate's ack
    client = _Replies(STILL_STORING, STILL_STORING, b'{"stream":"S","seq":7,"duplicate":true}')
    log = EventLog(client, "S", timeout=2.0)  # type: ignore[arg-type]
    # When a message is appended
    result = await log.publish("ms.s", [OutgoingMessage(b"{}", {}, "id-1")], None)
    # Then it is asked again until the log acknowledges the stored copy
    assert (result.seq, result.duplicate, client.sent) == (7, True, 3)


async def test_a_write_still_being_stored_past_the_timeout_is_unavailable() -> None:
    client = _Replies(*[STILL_STORING] * 10)
    log = EventLog(client, "S", timeout=0.05)  # type: ignore[arg-type]
    with pytest.raises(StillStoringError):
        await log.publish("ms.s", [OutgoingMessage(b"{}", {}, "id-1")], None)
    assert 1 < client.sent < 10


@pytest.mark.parametrize(
    "reply",
    [
        "$JS.ACK.MEMSTREAM.projector.1.4242.17.1700000000000000000.3",
        "$JS.ACK.hub.ACCHASH.MEMSTREAM.projector.2.4242.18.1700000000000000000.0.tok",
        "$JS.ACK._.ACCHASH.MEMSTREAM.projector.1.4242.18.1700000000000000000.0",
    ],
)
def test_the_stream_sequence_is_read_as_nats_py_reads_it(reply: str) -> None:
    msg = Msg(_client=None, subject="ms.x", reply=reply)  # type: ignore[arg-type]
    assert stream_sequence(msg) == msg.metadata.sequence.stream == 4242


def test_a_message_that_is_not_a_delivery_has_no_stream_sequence() -> None:
    with pytest.raises(NotJSMessageError):
        stream_sequence(Msg(_client=None, subject="x", reply="_INBOX.abc"))  # type: ignore[arg-type]
