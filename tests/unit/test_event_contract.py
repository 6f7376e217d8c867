"""The public event contract (version 1): plain JSON payloads with stable type names, few
headers, every event type round-tripping, events written before the contract still read, and
an upcaster path for a later version."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from support.events import every_event, subject_of
from support.messages import msg

from memstream.domain.messages import encode_message, normalize_message
from memstream.domain.session import SessionAggregate, session_aggregate_id
from memstream.workers.log import event_contract
from memstream.workers.log.codec import (
    H_ACTOR,
    H_CAUSATION_ID,
    H_COMMAND_ID,
    H_CORRELATION_ID,
    H_MSG_ID,
    H_SCHEMA,
    H_TOPIC,
    CommandMeta,
    _encode_stored,
    command_id,
    decode_event,
    encode_event,
    event_type,
)
from memstream.workers.log.event_contract import EVENT_TYPES, EventContractError

SUBJECT = "ms.default.session.s"


def test_every_event_type_has_a_stable_dotted_name_and_round_trips() -> None:
    events = every_event()
    assert {type(e) for e in events} == set(EVENT_TYPES.values())
    for name in EVENT_TYPES:
        assert re.fullmatch(r"(session|context|registry|memory|purge)\.[a-z_]+", name), name
    meta = CommandMeta()
    for event in events:
        payload, headers = encode_event(event, meta, meta.command_id)
        decoded = decode_event(payload, headers, subject_of(event))
        assert type(decoded) is type(event)
        assert vars(decoded) == vars(event)
        assert list(vars(decoded)) == list(vars(event))  # the same attribute order too


def test_a_payload_is_plain_json_with_the_message_nested() -> None:
    event = SessionAggregate.empty("default", "s").append_message(msg("m1", "hi"))[0]
    payload, _ = encode_event(event, CommandMeta(), "x")
    data = json.loads(payload)
    assert list(data) == [
        "type",  # no aggregate id: the subject and the session id give it
        "version",
        "time",
        "session_id",
        "parent_id",
        "message",  # the message's id is its own: no message_id beside it
    ]
    assert data["type"] == "session.message_appended"
    assert data["version"] == 1
    assert data["time"].endswith("Z")  # ISO 8601 / RFC 3339, UTC
    assert data["message"] == json.loads(event.message_json)
    assert "_type_" not in payload.decode()


def test_the_time_is_utc_with_z_and_an_offset_form_still_reads() -> None:
    event = SessionAggregate.empty("default", "s").append_message(msg("m1", "hi"))[0]
    payload, headers = encode_event(event, CommandMeta(), "x")
    time = json.loads(payload)["time"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z", time), time
    assert decode_event(payload, headers, SUBJECT).timestamp == event.timestamp
    offset = payload.replace(time.encode(), time[:-1].encode() + b"+00:00")
    assert decode_event(offset, headers, SUBJECT).timestamp == event.timestamp


def test_a_message_event_costs_at_most_1_3_times_its_message_plus_200_bytes() -> None:
    text = "word " * 90
    stored = normalize_message({"id": "msg-0001", "role": "user", "content": text})
    size = len(encode_message(stored).encode())
    assert 500 <= size <= 540
    event = SessionAggregate.empty("default", "chat").append_message(stored)[0]
    meta = CommandMeta()
    payload, headers = encode_event(event, meta, meta.command_id)
    # What the log stores besides the subject: payload and headers, plus the expected-sequence
    # header every write carries.
    headers["Nats-Expected-Last-Subject-Sequence"] = "123456"
    wire = len(payload) + sum(len(k) + len(v) + 4 for k, v in headers.items()) + 12
    assert wire <= 1.3 * size + 200, (wire, size)


def test_headers_carry_only_what_the_payload_and_the_message_id_do_not() -> None:
    event = SessionAggregate.empty("default", "s").append_message(msg("m1"))[0]
    meta = CommandMeta(command_id="cmd-1", actor="agent-7")
    _, headers = encode_event(event, meta, "cmd-1")
    assert headers == {H_SCHEMA: "1", H_MSG_ID: "cmd-1", H_ACTOR: "agent-7"}
    assert command_id(headers) == "cmd-1"
    # The second event of a command: the command id is still derivable from the message id
    _, headers = encode_event(event, meta, "cmd-1:1")
    assert H_COMMAND_ID not in headers
    assert command_id(headers) == "cmd-1"
    # A command id with a colon, and causation/correlation that differ, are spelled out
    meta = CommandMeta(command_id="a:b", causation_id="cause", correlation_id="flow")
    _, headers = encode_event(event, meta, "a:b")
    assert headers[H_COMMAND_ID] == "a:b"
    assert command_id(headers) == "a:b"
    assert headers[H_CAUSATION_ID] == "cause"
    assert headers[H_CORRELATION_ID] == "flow"


def test_events_written_before_the_contract_are_still_read() -> None:
    meta = CommandMeta()
    for event in every_event():
        payload, headers = _encode_stored(event, meta, meta.command_id)
        assert H_SCHEMA not in headers
        decoded = decode_event(payload, headers, subject_of(event))
        assert vars(decoded) == vars(event)
        assert event_type(payload, headers) == headers[H_TOPIC]


def test_events_written_before_the_aggregate_was_renamed_are_still_read() -> None:
    # Given session events in the stored form, with the topic they had while the aggregate
    # was called Session
    meta = CommandMeta()
    sessions = [e for e in every_event() if isinstance(e, SessionAggregate.Event)]
    assert len({type(e) for e in sessions}) == sum(n.startswith("session.") for n in EVENT_TYPES)
    for event in sessions:
        payload, headers = _encode_stored(event, meta, meta.command_id)
        name = type(event).__name__
        assert headers[H_TOPIC] == f"memstream.domain.session:SessionAggregate.{name}"
        headers[H_TOPIC] = f"memstream.domain.session:Session.{name}"
        # When they are read, Then they decode to the renamed class, unchanged
        decoded = decode_event(payload, headers, subject_of(event))
        assert type(decoded) is type(event)
        assert vars(decoded) == vars(event)


def test_a_message_as_written_before_the_contract_and_the_rename_is_read() -> None:
    # Given a message appended before the contract, byte for byte as it was stored
    headers = {
        H_TOPIC: "memstream.domain.session:Session.MessageAppended",
        "Ms-Originator-Id": "922bc512-4695-57a7-bbd1-8db306859979",
        "Ms-Originator-Version": "1",
        H_COMMAND_ID: "cmd-1",
        H_CAUSATION_ID: "cmd-1",
        H_CORRELATION_ID: "cmd-1",
        H_ACTOR: "memstream",
        "Ms-Timestamp": "2026-11-01T10:00:00+00:00",
        H_MSG_ID: "cmd-1",
        "Ms-Class-Version": "1",
    }
    payload = (
        b'{"timestamp":{"_type_":"datetime_iso","_data_":"2026-11-01T10:00:00+00:00"},'
        b'"session_id":"s","message_id":"m1","parent_id":null,'
        b'"message_json":"{\\"id\\":\\"m1\\",\\"role\\":\\"user\\",\\"parts\\":[]}"}'
    )
    # When it is read, Then it is the renamed aggregate's event
    event: Any = decode_event(payload, headers, SUBJECT)
    assert type(event) is SessionAggregate.MessageAppended
    assert (event.session_id, event.message_id, event.parent_id) == ("s", "m1", None)
    assert event.message_json == '{"id":"m1","role":"user","parts":[]}'
    assert event.originator_id == session_aggregate_id("default", "s")
    assert event_type(payload, headers) == headers[H_TOPIC]


def test_what_is_not_an_event_of_the_contract_is_refused() -> None:
    good, headers = encode_event(
        SessionAggregate.empty("default", "s").append_message(msg("m1"))[0], CommandMeta(), "x"
    )
    data = json.loads(good)
    cases: list[tuple[bytes, str]] = [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not an object"),
        (json.dumps({**data, "type": "session.nope"}).encode(), "unknown event type"),
        (json.dumps({k: v for k, v in data.items() if k != "session_id"}).encode(), "missing"),
        (json.dumps({**data, "time": "yesterday"}).encode(), "malformed"),
    ]
    for payload, reason in cases:
        with pytest.raises(EventContractError, match=reason):
            decode_event(payload, headers, SUBJECT)
    with pytest.raises(EventContractError, match="not known"):
        decode_event(good, {**headers, H_SCHEMA: "2"}, SUBJECT)
    with pytest.raises(EventContractError, match="not a version"):
        decode_event(good, {**headers, H_SCHEMA: "one"}, SUBJECT)


def test_a_later_contract_version_upcasts_older_payloads(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a contract version 2 that renamed a field of session.skill_loaded
    event = SessionAggregate.empty("default", "s").load_skill("docs", "a")[0]
    payload, headers = encode_event(event, CommandMeta(), "x")

    def rename(data: dict[str, Any]) -> dict[str, Any]:
        data["label"] = data.pop("skill_label", data.get("label"))
        return data

    monkeypatch.setattr(event_contract, "SCHEMA", 2)
    monkeypatch.setitem(event_contract.UPCASTERS, ("session.skill_loaded", 1), rename)
    # When a version-1 payload is read, it goes through the upcaster
    assert vars(decode_event(payload, headers, subject_of(event))) == vars(event)
    # And a type without an upcaster is refused, not misread
    other, _ = encode_event(
        SessionAggregate.empty("default", "s").load_skill("docs", "b")[0], CommandMeta(), "y"
    )
    monkeypatch.delitem(event_contract.UPCASTERS, ("session.skill_loaded", 1))
    with pytest.raises(EventContractError, match="no upcaster"):
        decode_event(other, headers, SUBJECT)


def test_a_payload_laid_out_otherwise_reads_the_same() -> None:
    # Messages whose own keys look like the event's, in a chain and alone
    tricky = [
        {
            "id": f"t{n}",
            "role": "user",
            "parts": [{"type": "text", "text": ',"message":{"messages":[ "}'}],
            "meta": {"message": {"id": "x"}, "messages": [{"parent_id": None}]},
        }
        for n in range(3)
    ]
    session = SessionAggregate.empty("default", "s")
    single = session.append_message(tricky[0])[0]
    single.mutate(session)
    chain = session.append_messages(tricky[1:])[0]
    for event in (single, chain):
        payload, headers = encode_event(event, CommandMeta(), "x")
        subject = subject_of(event)
        assert vars(decode_event(payload, headers, subject)) == vars(event)
        # The same event as another producer may write it: keys reordered, spaces added
        data = json.loads(payload)
        reordered = json.dumps(dict(reversed(list(data.items()))), indent=1).encode()
        decoded = decode_event(reordered, headers, subject)
        assert vars(decoded) == vars(event)  # the message text comes out canonical
