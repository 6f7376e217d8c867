"""Command ids: unique without a system call each, and never repeated by a forked child."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.msg import Msg

import memstream.workers.codec as codec
from memstream.workers.event_log import _pub_ack


def test_command_ids_are_32_hex_digits_and_unique() -> None:
    ids = [codec.new_command_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert codec.CommandMeta().command_id != codec.CommandMeta().command_id


def test_a_forked_child_draws_a_new_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    before = codec.new_command_id()
    monkeypatch.setattr(codec.os, "getpid", lambda: -7)  # as in a child after fork()
    after = codec.new_command_id()
    assert after[:20] != before[:20]
    assert after.endswith("000000000001")


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
