"""A log that holds events from before the event contract and after it, on a real nats-server:
the projector builds the same read model, writers decide on both (from a snapshot and from a
replay of the subject), and a plain nats-py consumer reads the contract's JSON."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import nats
import pytest
from support.processes import script_json

from memstream.client import Memstream, open_memstream
from memstream.domain.errors import InvalidInputError
from memstream.domain.limits import check_actor
from memstream.domain.session import SessionAggregate
from memstream.settings import Settings
from memstream.workers.log.codec import H_SCHEMA, CommandMeta, _encode_stored
from memstream.workers.log.event_log import OutgoingMessage


def _message(n: int) -> dict[str, object]:
    return {"id": f"m{n}", "role": "user", "content": f"message {n}"}


async def _publish_old(ms: Memstream, session_id: str, count: int) -> int:
    """``count`` appends to ``session_id`` in the form events had before the contract."""
    aggregate = SessionAggregate.empty(ms.namespace, session_id)
    subject = ms.core.commands.session_subject(session_id)
    last = 0
    for n in range(count):
        [event] = aggregate.append_message(_message(n))
        event.mutate(aggregate)
        meta = CommandMeta()
        payload, headers = _encode_stored(event, meta, meta.command_id)
        message = OutgoingMessage(payload, headers, meta.command_id)
        last = (await ms.core.log.publish(subject, [message], last)).seq
    return last


@pytest.mark.sqlite_only
async def test_a_log_from_before_the_contract_goes_on_in_it(
    ms: Memstream, settings: Settings
) -> None:
    # Given a session whose first 5 events were written before the contract
    before = await _publish_old(ms, "s", 5)
    # When this client appends more (decided on the read model's snapshot of the old events)
    await ms.sync("sessions")
    session = ms.session("s")
    await session.append_message(_message(5))
    await session.append_messages([_message(6), _message(7)])
    # Then the history has them all, in order
    assert [m["id"] for m in await session.get_history()] == [f"m{n}" for n in range(8)]
    # And a client with an empty read-model copy of its own, deciding on a replay of the
    # subject (old and new events), decides the same: the next append goes under m7
    other = await open_memstream(settings.with_(data_dir=settings.data_dir / "copy"), workers=False)
    try:
        seq = await other.session("s").append_message(_message(8))
        assert await other.session("s").append_message(_message(3)) == seq  # an existing id
        assert other.core.log.entries_read == 7  # the subject's 5 old events and 2 new ones
    finally:
        await other.close()
    await ms.sync("sessions")
    history = await session.get_history()
    assert [m["id"] for m in history] == [f"m{n}" for n in range(9)]
    assert seq > before


async def test_a_plain_nats_consumer_reads_the_contract(ms: Memstream, settings: Settings) -> None:
    # Given a session with a message and a chain of two
    session = ms.session("plain")
    await session.append_message({"id": "a", "role": "user", "content": "hello"})
    await session.append_messages(
        [
            {"id": "b", "role": "assistant", "content": "hi"},
            {"id": "c", "role": "user", "content": "bye"},
        ]
    )
    # When a consumer with nothing but nats-py and json reads the stream
    client = await nats.connect(settings.nats_url)
    try:
        js = client.jetstream()
        sub = await js.pull_subscribe(f"{ms.core.log.subject_prefix}.>", stream=ms.core.log.stream)
        msgs = await sub.fetch(10, timeout=5)
    finally:
        await client.close()
    # Then every event is a JSON object with a dotted type, the contract version in a header,
    # and messages as nested objects
    events = [(m.headers or {}, json.loads(m.data)) for m in msgs]
    assert [h[H_SCHEMA] for h, _ in events] == ["1", "1"]
    assert [e["type"] for _, e in events] == [
        "session.message_appended",
        "session.messages_appended",
    ]
    assert events[0][1]["message"]["parts"] == [{"type": "text", "text": "hello"}]
    assert [m["message"]["id"] for m in events[1][1]["messages"]] == ["b", "c"]
    assert events[1][1]["messages"][0]["parent_id"] == "a"


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "follow_sessions.py"


def _follow(settings: Settings, state: Path) -> dict[str, int]:
    counts: dict[str, int] = script_json(
        EXAMPLE,
        *("--url", settings.nats_url, "--stream", settings.stream, "--durable", "example"),
        *("--prefix", settings.subject_prefix),
        *("--state", str(state), "--once", "--json"),
        timeout=60,
    )
    return counts


async def test_the_example_consumer_counts_messages_with_nats_py_and_json(
    ms: Memstream, settings: Settings, tmp_path: Path
) -> None:
    # Given two sessions with messages, a deletion and a clear
    a, b = ms.session("a"), ms.session("b")
    await a.append_messages([_message(n) for n in range(5)])
    await a.append_message(_message(5))
    await a.delete_messages(["m2"])
    await b.append_message(_message(0))
    await b.clear_messages()
    await b.append_message(_message(1))
    # Events of other aggregates are passed over
    await ms.session("b").with_context("notes").replace_context_block("notes", "not a message")
    state = tmp_path / "counts.json"
    # When the example follows the stream in a process of its own, until caught up
    counts = await asyncio.to_thread(_follow, settings, state)
    # Then it counts each session's messages
    assert counts == {"a": 5, "b": 1}
    # And run again on the same durable consumer and state, it counts only what is new
    await a.append_message(_message(6))
    assert await asyncio.to_thread(_follow, settings, state) == {"a": 6, "b": 1}
    assert json.loads(state.read_text())["last_seq"] == await ms.core.log.stream_last_seq()


async def _actors(ms: Memstream) -> list[str]:
    """The Ms-Actor of every event on the log, in order."""
    found = []
    async for entry in ms.core.log.read_subject(f"{ms.core.log.subject_prefix}.>"):
        found.append(entry.headers["Ms-Actor"])
    return found


async def test_events_record_who_caused_them(settings: Settings) -> None:
    # Given a client with no actor set: its events name the OS user and host
    ms = await open_memstream(settings, workers=True)
    try:
        await ms.session("a").append_message(_message(0))
        [default] = await _actors(ms)
        assert re.fullmatch(r"[^@\s]+@[^@\s]+", default), default
    finally:
        await ms.close()
    # And a client that names one, and a session that names its own
    ms = await open_memstream(settings.with_(actor="svc-ingest"), workers=True)
    try:
        await ms.session("a").append_message(_message(1))
        agent = ms.session("a", actor="agent-7").with_context("notes").with_cached_prompt()
        await agent.append_message(_message(2))
        await agent.freeze_system_prompt()
        # (a block write records the client's actor: blocks may be shared between sessions)
        await agent.replace_context_block("notes", "remember this")
        actors = await _actors(ms)
        assert actors[1:] == ["svc-ingest", "agent-7", "agent-7", "svc-ingest"]
    finally:
        await ms.close()


async def test_a_bad_actor_is_refused_before_anything_is_written(ms: Memstream) -> None:
    before = await ms.core.log.stream_last_seq()
    for actor, reason in (
        ("", "minimum is 1"),
        ("x" * 129, "limit is 128"),
        ("a\r\nb", "printable"),
    ):
        with pytest.raises(InvalidInputError, match=reason):
            ms.session("s", actor=actor)
        with pytest.raises(InvalidInputError, match=reason):
            Settings.from_env({}, actor=actor) if actor else check_actor(actor)
    assert await ms.core.log.stream_last_seq() == before
