"""CLI polish (issue 15, item 7): paging of sessions list/history, JSON from rebuild and from
the deleting commands. The test process writes (and projects) through the API; each CLI
command is a process of its own reading the same stream and data dir."""

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
async def shared(
    tmp_path: Path, nats_server: NatsServerProcess
) -> AsyncIterator[tuple[Memstream, dict[str, str]]]:
    """A client with its projector in this process, and the CLI's environment for the same
    stream and data dir."""
    settings = deployment_settings(nats_server.url, tmp_path / "data")
    ms = await open_memstream(settings, workers=True)
    env = deployment_env(settings)
    try:
        yield ms, env
    finally:
        await ms.close()


async def test_history_and_list_pages_and_rebuild_json(
    shared: tuple[Memstream, dict[str, str]], tmp_path: Path
) -> None:
    ms, env = shared
    await ms.session("a").append_messages(
        [{"id": f"m{n}", "role": "user", "content": f"text {n}"} for n in range(1, 6)]
    )
    await ms.session("b").append_message({"role": "user", "content": "other session"})
    await ms.wait_for("sessions")

    def ids(*args: str) -> list[str]:
        return [m["id"] for m in json_of(env, "sessions", "history", "a", *args)]

    assert ids("--limit", "2") == ["m4", "m5"]
    assert ids("--limit", "2", "--offset", "2") == ["m2", "m3"]
    assert ids("--limit", "2", "--offset", "4") == ["m1"]
    every = [s["session_id"] for s in json_of(env, "sessions", "list")]
    assert sorted(every) == ["a", "b"]
    assert [s["session_id"] for s in json_of(env, "sessions", "list", "--offset", "1")] == every[1:]
    bad = memstream(env, "sessions", "history", "a", "--limit", "-1", expect=2)
    assert "--limit" in bad.stderr
    await ms.close()  # (the rebuild drops what a running projector writes to)
    rebuilt = json_of(env, "projections", "rebuild", "sessions")
    assert rebuilt["projections"] == ["sessions"]
    assert rebuilt["sequence"] >= 2
    assert rebuilt["into"] == str((tmp_path / "data" / "memstream.db").resolve())


async def test_deleting_commands_print_json_on_request(
    shared: tuple[Memstream, dict[str, str]],
) -> None:
    ms, env = shared

    async def cli(*args: str) -> object:
        # in a thread: this test's event loop runs the projector the command waits for
        return await asyncio.to_thread(json_of, env, *args)

    await ms.session("gone").append_message({"role": "user", "content": "bye"})
    profile = await ms.agent_memory().get_profile("alice")
    await profile.remember("Likes trams")
    assert await cli("sessions", "delete", "gone", "--yes") == {
        "session_id": "gone",
        "deleted": True,
    }
    assert await cli("memory", "forget-session", "alice", "s9") == {
        "profile": "alice",
        "session_id": "s9",
        "forgotten": True,
    }
    assert await cli("memory", "delete-profile", "alice") == {
        "profile": "alice",
        "namespace": "default",
        "deleted": True,
    }
    assert await cli("memory", "profiles") == []
