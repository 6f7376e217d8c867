"""Message operations through the log (spec §3.1–§3.4, §3.6, §3.8, §3.9; §12.1–§12.2 inventory).

Every test runs against a real nats-server with the projector in-process; reads wait for the
client's own last write, so no test sleeps.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from support.messages import ids, msg

from memstream.client import Memstream, open_memstream
from memstream.domain.errors import InvalidInputError, MessageNotFoundError, NotFoundError
from memstream.settings import Settings

# Every behaviour here holds on both read-model backends (issue 14).
pytestmark = pytest.mark.both_backends


async def test_tree_basics_on_one_session(ms: Memstream) -> None:
    session = ms.session("tree")
    # Given an empty session
    # Then history is empty, there is no leaf, and unknown ids read as nothing
    assert await session.get_history() == []
    assert await session.get_latest_leaf() is None
    assert await session.get_path_length() == 0
    assert await session.get_message("nope") is None
    assert await session.get_branches("nope") == []

    # When m1 and m2 are appended (m2 without parent)
    await session.append_message(msg("m1", role="user"))
    await session.append_message(msg("m2", role="assistant"))
    # Then they read back root→leaf, m2 is a child of m1, the leaf is m2 (full message)
    history = await session.get_history()
    assert history == [msg("m1"), msg("m2", role="assistant")]
    assert await session.get_path_length() == 2
    assert ids(await session.get_branches("m1")) == ["m2"]
    leaf = await session.get_latest_leaf()
    assert leaf == msg("m2", role="assistant")
    assert leaf is not None
    assert leaf["parts"][0]["text"] == "m message m2"
    assert await session.get_message("m1") == msg("m1")
    assert await session.get_message(id="m1") == msg("m1")  # design.md's parameter name
    assert await session.get_message("nope") is None
    # And a falsy leaf id means the latest leaf
    assert ids(await session.get_history("")) == ["m1", "m2"]
    assert await session.get_path_length("") == 2


async def test_branching(ms: Memstream) -> None:
    session = ms.session("branching")
    # Given m1 → m2a
    await session.append_message(msg("m1"))
    await session.append_message(msg("m2a"), "m1")
    # When a second child m2b is appended under m1
    await session.append_message(msg("m2b"), "m1")
    # Then m1 has two branches in log order, and the latest leaf is the newer branch
    assert ids(await session.get_branches("m1")) == ["m2a", "m2b"]
    assert (await session.get_latest_leaf() or {})["id"] == "m2b"
    assert ids(await session.get_history()) == ["m1", "m2b"]
    # And each branch has its own history
    assert ids(await session.get_history("m2a")) == ["m1", "m2a"]
    assert ids(await session.get_history("m2b")) == ["m1", "m2b"]
    # And any node may be given, not only a leaf
    assert ids(await session.get_history("m1")) == ["m1"]
    assert await session.get_path_length("m2a") == 2
    # When the next message omits its parent, it continues the newest branch
    await session.append_message(msg("m3"))
    assert ids(await session.get_history()) == ["m1", "m2b", "m3"]
    # When a branch is appended off the root while other leaves exist, it becomes the tip
    await session.append_message(msg("b"), "m1")
    assert (await session.get_latest_leaf() or {})["id"] == "b"
    assert ids(await session.get_history()) == ["m1", "b"]
    assert ids(await session.get_branches("m1")) == ["m2a", "m2b", "b"]


async def test_parent_none_creates_a_root_and_omitted_parent_attaches(ms: Memstream) -> None:
    session = ms.session("roots")
    # Given m1 → m2
    await session.append_message(msg("m1"))
    await session.append_message(msg("m2"))
    # When m3 is appended with parent_id=None
    await session.append_message(msg("m3"), None)
    # Then m3 is a root, not a child of m2, and its history is itself
    assert ids(await session.get_branches("m2")) == []
    assert ids(await session.get_history("m3")) == ["m3"]
    assert ids(await session.get_history()) == ["m3"]
    # When m4 omits its parent, it attaches to the latest leaf m3
    await session.append_message(msg("m4"))
    assert ids(await session.get_history()) == ["m3", "m4"]
    # And the old branch is still intact
    assert ids(await session.get_history("m2")) == ["m1", "m2"]


async def test_explicit_unknown_parent_raises_and_writes_nothing(ms: Memstream) -> None:
    session = ms.session("unknown-parent")
    # Given m1
    await session.append_message(msg("m1"))
    # When m2 names a parent that does not exist in this session
    with pytest.raises(MessageNotFoundError) as raised:
        await session.append_message(msg("m2"), "ghost")
    # Then the error is a NotFoundError/LookupError and m2 was not stored
    assert isinstance(raised.value, NotFoundError)
    assert isinstance(raised.value, LookupError)
    assert await session.get_message("m2") is None
    assert ids(await session.get_history()) == ["m1"]


async def test_idempotent_append_first_content_wins(ms: Memstream) -> None:
    session = ms.session("idempotent")
    # Given m1 "First"
    first_seq = await session.append_message(msg("m1", "First"))
    # When m1 is appended again with "Second" (even under parent None)
    again_seq = await session.append_message(msg("m1", "Second"), None)
    # Then it is a no-op: no new event, first content kept, no second row
    assert again_seq == first_seq
    assert await ms.core.log.last_seq(ms.core.commands.session_subject("idempotent")) == first_seq
    history = await session.get_history()
    assert history == [msg("m1", "First")]
    assert [h["id"] for h in await session.search("first")] == ["m1"]
    assert await session.search("second") == []


async def test_update_message(ms: Memstream) -> None:
    session = ms.session("update")
    # Given m1 → m2
    await session.append_message(msg("m1"))
    await session.append_message(msg("m2", "before"))
    # When m2's parts are replaced
    updated = {"id": "m2", "role": "user", "parts": [{"type": "text", "text": "after"}]}
    await session.update_message(updated)
    # Then get_message and history show the new parts, the tree is unchanged
    assert await session.get_message("m2") == updated
    assert await session.get_history() == [msg("m1"), updated]
    assert ids(await session.get_branches("m1")) == ["m2"]
    # When an unknown id is updated → MessageNotFoundError
    with pytest.raises(MessageNotFoundError):
        await session.update_message(msg("ghost"))
    assert await session.get_message("ghost") is None


async def test_delete_messages(ms: Memstream) -> None:
    session = ms.session("delete")
    # Given m0 → m1 → m2 → m3
    for i in range(4):
        await session.append_message(msg(f"m{i}"))
    # When the tip m3 is deleted (with an unknown id alongside)
    await session.delete_messages(["m3", "unknown"])
    # Then m2 is the latest leaf
    assert (await session.get_latest_leaf() or {})["id"] == "m2"
    assert ids(await session.get_history()) == ["m0", "m1", "m2"]
    # When the interior m0 is deleted, the tip stays m2 and its path starts below the gap
    await session.delete_messages(["m0"])
    assert (await session.get_latest_leaf() or {})["id"] == "m2"
    assert ids(await session.get_history()) == ["m1", "m2"]
    assert await session.get_message("m0") is None
    # When only unknown ids are deleted, nothing happens and no event is written
    before = await ms.core.log.last_seq(ms.core.commands.session_subject("delete"))
    await session.delete_messages(["nope"])
    await session.delete_messages([])
    assert await ms.core.log.last_seq(ms.core.commands.session_subject("delete")) == before
    # And the next omitted-parent append continues from m2
    await session.append_message(msg("m4"))
    assert ids(await session.get_history()) == ["m1", "m2", "m4"]


async def test_delete_tip_makes_parent_the_next_parent(ms: Memstream) -> None:
    session = ms.session("delete-tip")
    # Given m0 → m1 → m2 with the tip deleted
    for i in range(3):
        await session.append_message(msg(f"m{i}"))
    await session.delete_messages(["m2"])
    # When a message is appended without parent, it hangs under m1
    await session.append_message(msg("m3"))
    assert ids(await session.get_history()) == ["m0", "m1", "m3"]
    assert ids(await session.get_branches("m1")) == ["m3"]


async def test_clear_messages_only_clears_the_target_session(ms: Memstream) -> None:
    a, b = ms.session("clear-a"), ms.session("clear-b")
    # Given two sessions with messages, and an overlay in a
    await a.append_message(msg("a1"))
    await a.append_message(msg("a2"))
    await a.add_compaction("summary", "a1", "a2")
    await b.append_message(msg("b1"))
    # When a is cleared
    await a.clear_messages()
    # Then a is empty (history, length, leaf, compactions), b untouched
    assert await a.get_history() == []
    assert await a.get_path_length() == 0
    assert await a.get_latest_leaf() is None
    assert await a.get_compactions() == []
    assert ids(await b.get_history()) == ["b1"]
    # And ids can be reused in a after the clear, as new roots
    await a.append_message(msg("a1", "fresh"))
    assert await a.get_history() == [msg("a1", "fresh")]


async def test_sessions_are_isolated_and_ids_are_per_session(ms: Memstream) -> None:
    a, b = ms.session("chat-a"), ms.session("chat-b")
    # Given a1 → a2 in chat-a and b1 in chat-b
    await a.append_message(msg("a1"))
    await a.append_message(msg("a2"))
    await b.append_message(msg("b1"))
    # Then each sees only its own
    assert ids(await a.get_history()) == ["a1", "a2"]
    assert ids(await b.get_history()) == ["b1"]
    assert await b.get_message("a1") is None
    # When the same id is used in both sessions, both are stored
    await a.append_message(msg("same", "in a"))
    await b.append_message(msg("same", "in b"))
    assert await a.get_message("same") == msg("same", "in a")
    assert await b.get_message("same") == msg("same", "in b")
    # When b names a parent that exists only in a → MessageNotFoundError, a gains no branch
    with pytest.raises(MessageNotFoundError):
        await b.append_message(msg("x"), "a1")
    assert ids(await a.get_branches("a1")) == ["a2"]


async def test_unusual_session_ids_round_trip(ms: Memstream) -> None:
    # Given session ids with subject-hostile characters, unicode, and the default ""
    odd = ["", "a.b", "with space", "*", ">", "ms.default.session.x", "日本語", "=3D", "x" * 256]
    # When each gets its own message
    for index, session_id in enumerate(odd):
        await ms.session(session_id).append_message(msg(f"m{index}"))
    # Then each session holds exactly its own message
    for index, session_id in enumerate(odd):
        assert ids(await ms.session(session_id).get_history()) == [f"m{index}"]
    # And for_session switches the session of a builder
    assert ids(await ms.session().for_session("a.b").get_history()) == ["m1"]


async def test_messages_round_trip_verbatim(ms: Memstream) -> None:
    session = ms.session("verbatim")
    # Given a message with extra fields and a dynamic-tool part with every field
    tool_message = {
        "id": "t1",
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "reasoning", "text": "thinking", "providerMetadata": {"x": 1}},
            {
                "type": "dynamic-tool",
                "toolName": "lookup",
                "toolCallId": "call-1",
                "state": "output-available",
                "input": {"q": "weather", "n": [1, 2.5, None, True]},
                "output": {"temp": 21, "unit": "C"},
            },
            {"type": "tool-search", "toolCallId": "c2", "state": "input-available", "input": {}},
            {"type": "text", "text": "ünïcödé 😀 \x00 \n\t"},
        ],
        "metadata": {"model": "m", "tokens": 12},
        "created_at": "2024-05-01T12:00:00Z",
    }
    # When it is appended, and a chat-style message too
    await session.append_message(tool_message)
    await session.append_message({"id": "c1", "role": "user", "content": "chat style"})
    # Then get_message and get_history return it unchanged
    assert await session.get_message("t1") == tool_message
    history = await session.get_history()
    assert history[0] == tool_message
    assert history[1] == {
        "id": "c1",
        "role": "user",
        "parts": [{"type": "text", "text": "chat style"}],
    }
    # And a message without id gets a generated one
    await session.append_message({"role": "user", "content": "no id"})
    leaf = await session.get_latest_leaf()
    assert leaf is not None
    assert isinstance(leaf["id"], str)
    assert leaf["id"]
    assert leaf["parts"] == [{"type": "text", "text": "no id"}]
    # And datetimes (a created_at, or deeper) come back as ISO 8601 strings (spec §1.1)
    stamp = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    await session.append_message(
        {
            "id": "d1",
            "role": "user",
            "parts": [],
            "created_at": stamp,
            "meta": {"day": stamp.date()},
        }
    )
    assert await session.get_message("d1") == {
        "id": "d1",
        "role": "user",
        "parts": [],
        "created_at": "2024-05-01T12:00:00+00:00",
        "meta": {"day": "2024-05-01"},
    }
    # But other objects that are not JSON are refused by name, without writing
    with pytest.raises(InvalidInputError, match="'x1' is not JSON: Object of type set"):
        await session.append_message({"id": "x1", "role": "user", "parts": [], "tags": {1}})
    assert await session.get_message("x1") is None


async def test_append_messages_is_one_atomic_chain(ms: Memstream) -> None:
    session = ms.session("batch")
    # Given m0
    await session.append_message(msg("m0"))
    before = await ms.core.log.last_seq(ms.core.commands.session_subject("batch"))
    # When three messages are appended as one chain
    seq = await session.append_messages([msg("a"), msg("b"), msg("c")])
    # Then one event was written and they chain from the latest leaf
    assert seq == before + 1
    assert ids(await session.get_history()) == ["m0", "a", "b", "c"]
    # When a batch contains a bad message, nothing of it is stored
    with pytest.raises(InvalidInputError):
        await session.append_messages([msg("d"), {"id": "e", "role": "user", "parts": "x"}])
    assert await session.get_message("d") is None
    assert ids(await session.get_history()) == ["m0", "a", "b", "c"]


async def test_a_second_client_sees_and_continues_the_session(
    ms: Memstream, settings: Settings
) -> None:
    session = ms.session("shared")
    # Given m0 → m1 written by the first client and projected (reads are read-your-writes
    # per client, so the first client's read is what guarantees the second sees them)
    await session.append_message(msg("m0"))
    await session.append_message(msg("m1"))
    assert ids(await session.get_history()) == ["m0", "m1"]
    other = await open_memstream(settings, workers=False)
    try:
        theirs = other.session("shared")
        # Then a fresh client (cold aggregate cache) reads it
        assert ids(await theirs.get_history()) == ["m0", "m1"]
        # When it adds a child to the tip without naming a parent
        await theirs.append_message(msg("ext-child"))
        # And the first client (whose cached aggregate is now stale) appends without parent
        await session.append_message(msg("m2"))
        # Then both writes landed in order: the stale cache was fast-forwarded, not overwritten
        expected = ["m0", "m1", "ext-child", "m2"]
        assert ids(await session.get_history()) == expected
        assert ids(await theirs.get_history("m2")) == expected
    finally:
        await other.close()


async def test_no_op_and_refusal_decisions_see_other_clients_writes(
    ms: Memstream, settings: Settings
) -> None:
    session = ms.session("stale")
    # Given m0 written and read by the first client (its aggregate is now cached)
    await session.append_message(msg("m0"))
    assert ids(await session.get_history()) == ["m0"]
    other = await open_memstream(settings, workers=False)
    try:
        theirs = other.session("stale")
        # When another client appends p, the first client can name p as a parent
        await theirs.append_message(msg("p"))
        await session.append_message(msg("c"), "p")
        # When the other client deletes c, the first client can delete p (it exists in the log)
        await theirs.delete_messages(["c"])
        await session.delete_messages(["p"])
        assert ids(await session.get_history()) == ["m0"]
        # When the other client clears the session, re-appending m0 is a new message
        await theirs.clear_messages()
        await session.append_message(msg("m0", "after clear"))
        assert await session.get_history() == [msg("m0", "after clear")]
    finally:
        await other.close()
