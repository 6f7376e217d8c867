"""The SessionManager on a real log (spec §10, Part A.6, A.7, A.9): registered sessions, usage,
fork and split, cross-session search and the ``session_search`` tool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from support.messages import msg
from support.read_models import EMBEDDED_VERIFIED

from memstream import SessionManager
from memstream.client import Memstream
from memstream.domain.errors import InvalidInputError, MessageNotFoundError, NotFoundError
from memstream.domain.messages import is_compaction_message
from memstream.settings import Settings
from memstream.workers.admin.rebuild import verify

# Every behaviour here holds on both read-model backends (issue 14).
pytestmark = pytest.mark.both_backends


def ids(messages: Sequence[dict[str, Any]]) -> list[str]:
    return [m["id"] for m in messages]


@pytest.fixture
def manager(ms: Memstream) -> SessionManager:
    return ms.session_manager()


async def test_create_get_list_rename(manager: SessionManager) -> None:
    # Given two registered sessions
    first = await manager.create("First", model="gpt-x", source="cli")
    second = await manager.create("Second", parent_session_id=first["id"])
    # Then each is a SessionInfo with zero usage
    assert {k: first[k] for k in ("name", "model", "source", "parent_session_id")} == {
        "name": "First",
        "model": "gpt-x",
        "source": "cli",
        "parent_session_id": None,
    }
    assert (first["input_tokens"], first["output_tokens"], first["estimated_cost"]) == (0, 0, 0)
    assert first["end_reason"] is None
    assert second["parent_session_id"] == first["id"]
    assert await manager.get(first["id"]) == first
    assert await manager.get("unknown") is None
    # And the list is most recently active first; activity (a message, a rename) moves a session
    assert [s["name"] for s in await manager.list()] == ["Second", "First"]
    await manager.append(first["id"], msg("m0"))
    assert [s["name"] for s in await manager.list()] == ["First", "Second"]
    await manager.rename(second["id"], "Renamed")
    renamed = await manager.get(second["id"])
    assert renamed is not None
    assert renamed["name"] == "Renamed"
    assert renamed["updated_at"] >= second["updated_at"]
    assert [s["name"] for s in await manager.list()] == ["Renamed", "First"]
    # And pages of one follow each other
    page = await manager.list_page(limit=1)
    assert [s["name"] for s in page["sessions"]] == ["Renamed"]
    rest = await manager.list_page(limit=1, cursor=page["cursor"])
    assert [s["name"] for s in rest["sessions"]] == ["First"]
    assert rest["cursor"] is None
    with pytest.raises(InvalidInputError, match="cursor"):
        await manager.list_page(cursor="nonsense")
    with pytest.raises(NotFoundError):
        await manager.rename("unknown", "x")


async def test_usage_adds_up_and_bad_usage_is_refused(manager: SessionManager) -> None:
    info = await manager.create("Usage")
    await manager.add_usage(info["id"], 100, 20, 0.5)
    await manager.add_usage(info["id"], 1, 2, 0.25)
    got = await manager.get(info["id"])
    assert got is not None
    assert (got["input_tokens"], got["output_tokens"], got["estimated_cost"]) == (101, 22, 0.75)
    for bad in ((-1, 0, 0), (0, 1.5, 0), (0, 0, float("nan")), (0, 0, -1)):
        with pytest.raises(InvalidInputError):
            await manager.add_usage(info["id"], *bad)
    with pytest.raises(NotFoundError):
        await manager.add_usage("unknown", 1, 1, 0)


async def test_messages_through_the_manager(manager: SessionManager) -> None:
    a = (await manager.create("A"))["id"]
    b = (await manager.create("B"))["id"]
    assert await manager.append(a, msg("m0")) == "m0"
    generated = await manager.append(a, {"role": "user", "content": "no id given"})
    assert len(generated) == 32
    # append_all continues from the latest leaf (Part A.6) and returns the last id
    assert await manager.append_all(a, [msg("m1"), msg("m2")]) == "m2"
    assert ids(await manager.get_history(a)) == ["m0", generated, "m1", "m2"]
    assert await manager.append_all(a, []) is None
    # upsert updates a stored message and appends a new one
    await manager.upsert(a, msg("m2", "changed"))
    await manager.upsert(a, msg("m3"))
    history = await manager.get_history(a)
    assert history[-2]["parts"][0]["text"] == "changed"
    assert ids(history)[-1] == "m3"
    assert await manager.get_message_count(a) == 5
    # deleting in one session leaves the other alone
    await manager.append(b, msg("m3"))
    await manager.delete_messages(a, ["m3"])
    assert ids(await manager.get_history(b)) == ["m3"]
    assert "m3" not in ids(await manager.get_history(a))
    assert ids(await manager.get_branches(a, "m0")) == [generated]
    await manager.clear_messages(b)
    assert await manager.get_history(b) == []


async def test_overlay_rounds_with_synthetic_ids(manager: SessionManager) -> None:
    sid = (await manager.create("Rounds"))["id"]
    await manager.append_all(sid, [msg(f"cm-{i}") for i in range(8)])
    await manager.add_compaction(sid, "Summary round 1", "cm-1", "cm-7")
    await manager.append_all(sid, [msg(f"cm-{i}") for i in range(8, 15)])
    first = (await manager.get_compactions(sid))[0]["from_message_id"]
    await manager.add_compaction(sid, "Summary round 2", first, "cm-12")
    history = await manager.get_history(sid)
    assert ids(history)[0] == "cm-0"
    assert [m["parts"][0]["text"] for m in history if is_compaction_message(m)] == [
        "Summary round 2"
    ]
    assert ids(history)[2:] == ["cm-13", "cm-14"]


async def test_fork_copies_the_path_with_overlays_as_messages(manager: SessionManager) -> None:
    source = (await manager.create("Source"))["id"]
    await manager.append_all(source, [msg("m0"), msg("m1"), msg("m2"), msg("m3")])
    # Fork at the 2nd of 3 (reference MUST)
    fork = await manager.fork(source, "m1", "Fork")
    assert fork["parent_session_id"] == source
    assert fork["updated_at"] >= fork["created_at"]
    assert ids(await manager.get_history(fork["id"])) == ["m0", "m1"]
    # An overlay on the path becomes a real message; no overlay is copied
    await manager.add_compaction(source, "the middle", "m1", "m2")
    overlaid = await manager.fork(source, "m3", "Overlaid")
    history = await manager.get_history(overlaid["id"])
    assert [m["role"] for m in history] == ["user", "assistant", "user"]
    assert history[1]["parts"][0]["text"] == "the middle"
    assert await manager.get_compactions(overlaid["id"]) == []
    # A message not in the session is refused (the reference made an empty session)
    with pytest.raises(MessageNotFoundError):
        await manager.fork(source, "nope", "Empty")
    # And writes after the fork stay on their side
    await manager.append(source, msg("after-source"))
    await manager.append(fork["id"], msg("after-fork"))
    assert "after-fork" not in ids(await manager.get_history(source))
    assert ids(await manager.get_history(fork["id"])) == ["m0", "m1", "after-fork"]


async def test_bad_names_and_unknown_sessions_are_refused(manager: SessionManager) -> None:
    for bad in ("", "x" * 257, None, 7):
        with pytest.raises(InvalidInputError, match="name"):
            await manager.create(bad)  # type: ignore[arg-type]
    info = await manager.create("ok")
    with pytest.raises(InvalidInputError, match="name"):
        await manager.rename(info["id"], "")
    with pytest.raises(InvalidInputError, match="name"):
        await manager.fork(info["id"], "m0", "")
    with pytest.raises(InvalidInputError, match="model"):
        await manager.create("m", model="")
    with pytest.raises(NotFoundError):
        await manager.rename("unknown", "name")
    assert [s["name"] for s in await manager.list()] == ["ok"]  # nothing partial


async def test_compact_and_split_ends_one_and_starts_the_next(manager: SessionManager) -> None:
    old = await manager.create("Long chat", model="m", source="web")
    await manager.append(old["id"], msg("m0"))
    new = await manager.compact_and_split(old["id"], "We planned Lisbon.")
    ended = await manager.get(old["id"])
    assert ended is not None
    assert ended["end_reason"] == "compaction"
    assert (new["name"], new["model"], new["source"]) == ("Long chat", "m", "web")
    assert new["parent_session_id"] == old["id"]
    [first] = await manager.get_history(new["id"])
    assert first["role"] == "assistant"
    assert first["parts"][0]["text"] == "[Context from previous session]\n\nWe planned Lisbon."
    with pytest.raises(NotFoundError):
        await manager.compact_and_split("unknown", "x")


async def test_search_across_sessions_and_the_session_search_tool(ms: Memstream) -> None:
    manager = ms.session_manager()
    one = (await manager.create("One"))["id"]
    two = (await manager.create("Two"))["id"]
    await manager.append(one, msg("ts", "I love TypeScript"))
    await manager.append(two, msg("fri", "Remember: deploy to production on Fridays"))
    assert [(h["session_id"], h["id"]) for h in await manager.search("TypeScript")] == [(one, "ts")]
    tools = manager.tools()
    assert list(tools) == ["session_search"]
    reply = await manager.execute_tool("session_search", {"query": "deploy production"})
    assert reply == "[user] Remember: deploy to production on Fridays"
    assert await manager.execute_tool("session_search", {"query": "kumquat"}) == (
        "No results found."
    )
    # A plain session never has it (§9.4)
    assert "session_search" not in await ms.session(one).tools()
    # With searchable history, every session gets a read-only block over all sessions
    searching = ms.session_manager().with_searchable_history("past")
    session = searching.get_session(one)
    prompt = await session.freeze_system_prompt()
    assert "2 sessions available for search." in prompt
    result = await session.execute_tool("search_context", {"label": "past", "query": "Fridays"})
    assert "deploy to production on Fridays" in result


async def test_delete_removes_the_session_and_the_log_replays(
    ms: Memstream, settings: Settings
) -> None:
    manager = ms.session_manager().with_context("memory", description="Facts").with_cached_prompt()
    sid = (await manager.create("Doomed"))["id"]
    await manager.append(sid, msg("m0", "a secret plan"))
    await manager.get_session(sid).replace_context_block("memory", "likes tea")
    assert "likes tea" in await manager.get_session(sid).refresh_system_prompt()
    await ms.wait_for("context")
    assert ms.core.reads.context_queries.block_content(ms.namespace, "memory", sid) == "likes tea"
    assert "likes tea" in (ms.core.reads.context_queries.cached_prompt(ms.namespace, sid) or "")
    await manager.delete(sid)
    assert await manager.get(sid) is None
    assert await manager.search("secret") == []
    assert await manager.get_history(sid) == []
    # And its built-in block and cached prompt are gone from the context read model
    await ms.wait_for("context")
    assert ms.core.reads.context_queries.cached_prompt(ms.namespace, sid) is None
    assert ms.core.reads.context_queries.block_content(ms.namespace, "memory", sid) is None
    assert "likes tea" not in await manager.get_session(sid).freeze_system_prompt()
    await manager.delete(sid)  # idempotent
    results = await verify(ms.core.log, ms.core.reads.copy)
    assert [r.projection for r in results] == [*EMBEDDED_VERIFIED]
    assert all(r.ok for r in results), results


async def test_a_fork_sorts_first_in_the_list(manager: SessionManager) -> None:
    source = (await manager.create("Source"))["id"]
    await manager.append_all(source, [msg("m0"), msg("m1"), msg("m2")])
    await manager.create("Later")
    fork = await manager.fork(source, "m1", "Fork")
    listed = await manager.list()
    assert listed[0]["name"] == "Fork"
    assert listed[0]["updated_at"] >= listed[0]["created_at"]
    assert listed[0]["parent_session_id"] == source
    assert len(await manager.get_history(fork["id"])) == 2
