"""``memstream audit session`` (issue 16, item 2): every event that shaped a session — its
messages, its registration and its blocks — with actor, command id and causation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.deployment import deployment_env, deployment_settings
from support.processes import json_of, memstream

from memstream.client import Memstream, open_memstream
from memstream.workers.runtime.nats_server import NatsServerProcess


@pytest.fixture
async def audited(
    tmp_path: Path, nats_server: NatsServerProcess
) -> AsyncIterator[tuple[Memstream, dict[str, str]]]:
    """A client (actor ``ops@host``) projecting in this process, and the CLI's environment
    for the same stream and data dir."""
    settings = deployment_settings(nats_server.url, tmp_path / "data", actor="ops@host")
    ms = await open_memstream(settings, workers=True)
    env = deployment_env(settings)
    try:
        yield ms, env
    finally:
        await ms.close()


async def test_a_sessions_trail_in_log_order_with_who_did_it(
    audited: tuple[Memstream, dict[str, str]],
) -> None:
    ms, env = audited
    manager = ms.session_manager()
    info = await manager.create("Trip", session_id="trip")
    agent = ms.session("trip", actor="agent-7")
    await agent.append_message({"id": "m1", "role": "user", "content": "Lisbon?"})
    await agent.add_context("memory")
    await agent.replace_context_block("memory", "Likes trams")
    await ms.session("other").append_message({"role": "user", "content": "unrelated"})
    await agent.append_message({"id": "m2", "role": "assistant", "content": "Tram 28"})
    # (in a thread: this test's event loop runs the projector the command waits for)
    trail = await asyncio.to_thread(json_of, env, "audit", "session", "trip")
    wide = {**env, "COLUMNS": "200"}
    table = await asyncio.to_thread(memstream, wide, "audit", "session", "trip")
    missing = await asyncio.to_thread(memstream, env, "audit", "session", "nobody", expect=1)
    assert info["id"] == "trip"
    types = [event["type"] for event in trail]
    assert types == [
        "registry.session_created",
        "session.message_appended",
        "context.block_written",
        "session.message_appended",
    ]
    seqs = [event["seq"] for event in trail]
    assert seqs == sorted(seqs)
    actors = [event["headers"]["actor"] for event in trail]
    # (a block is an aggregate of its own: its writes carry the client's actor, as documented;
    # the session's own events carry the session's)
    assert actors == ["ops@host", "agent-7", "ops@host", "agent-7"]
    assert all(event["headers"]["command_id"] for event in trail)
    assert trail[1]["payload"]["message"]["id"] == "m1"
    assert "session.message_appended" in table.stdout
    assert "agent-7" in table.stdout
    assert "no events of session 'nobody'" in missing.stderr


async def test_a_memorys_trail_survives_its_deletion(
    audited: tuple[Memstream, dict[str, str]],
) -> None:
    ms, env = audited
    alice = await ms.agent_memory().get_profile("alice")
    bob = await ms.agent_memory().get_profile("bob")
    kept = await alice.remember("Alice is vegetarian")
    await bob.remember("Bob likes chess")
    gone = await alice.remember("Alice lives in Lisbon")
    await alice.delete(gone["id"])
    await alice.ingest(
        [{"role": "user", "content": "I moved to Porto last week."}], session_id="s1"
    )
    gone_trail = await asyncio.to_thread(json_of, env, "audit", "memory", gone["id"])
    kept_trail = await asyncio.to_thread(
        json_of, env, "audit", "memory", kept["id"], "--profile", "alice"
    )
    ingested = [m for m in (await alice.list())["memories"] if "Porto" in m["summary"]]
    ingested_trail = await asyncio.to_thread(json_of, env, "audit", "memory", ingested[0]["id"])
    unknown = await asyncio.to_thread(memstream, env, "audit", "memory", "no-such-memory", expect=1)
    assert [e["type"] for e in gone_trail] == [
        "memory.memory_remembered",
        "memory.memories_extracted",
        "memory.memory_deleted",
    ]
    assert [e["type"] for e in kept_trail] == [
        "memory.memory_remembered",
        "memory.memories_extracted",
    ]
    assert all(e["payload"]["profile"] == "alice" for e in kept_trail + gone_trail)
    assert [e["type"] for e in ingested_trail] == [
        "memory.conversation_ingested",
        "memory.memories_extracted",
    ]
    assert "no events of memory 'no-such-memory'" in unknown.stderr
