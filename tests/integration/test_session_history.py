"""History, branches, compaction overlays and byte-budgeted reads through the log
(spec §3.5–§3.8, §3.10, §8.1; §12.1–§12.2 inventory: chunked hydration, overlays, recent history).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from support.messages import ids, msg

from memstream.client import Memstream, open_memstream
from memstream.domain.messages import is_compaction_message
from memstream.projections.recent_history import RecentHistory
from memstream.session import Session
from memstream.settings import Settings

# Every behaviour here holds on both read-model backends (issue 14).
pytestmark = pytest.mark.both_backends


def json_bytes(message: dict[str, Any]) -> int:
    return len(json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode())


async def chain(session: Session, names: list[str], parent: Any = ..., **kw: Any) -> None:
    """Append a chain atomically (order within the chain is the list order)."""
    messages = [msg(n, **kw) for n in names]
    if parent is ...:
        await session.append_messages(messages)
    else:
        await session.append_messages(messages, parent)


# -- history across sizes --------------------------------------------------------------------


async def test_history_order_for_50_51_and_120_messages(ms: Memstream) -> None:
    # Given exactly 50 messages appended one by one
    fifty = ms.session("h50")
    for i in range(50):
        await fifty.append_message(msg(f"m{i}"))
    # And 51 and 120 messages appended as chains
    fifty_one, one_twenty = ms.session("h51"), ms.session("h120")
    await chain(fifty_one, [f"m{i}" for i in range(51)])
    await chain(one_twenty, [f"m{i}" for i in range(120)])
    # Then each history is in root→leaf order and complete
    for session, count in ((fifty, 50), (fifty_one, 51), (one_twenty, 120)):
        history = await session.get_history()
        assert ids(history) == [f"m{i}" for i in range(count)]
        assert history[-1] == msg(f"m{count - 1}")
        assert await session.get_path_length() == count
    assert await one_twenty.get_path_length("m59") == 60


async def test_history_follows_the_selected_branch_across_a_long_path(ms: Memstream) -> None:
    session = ms.session("long-branch")
    # Given a 31-message trunk m0..m30, a 30-message branch a31..a60 off m30,
    # and a newer competing branch b11..b20 off m10
    await chain(session, [f"m{i}" for i in range(31)])
    await chain(session, [f"a{i}" for i in range(31, 61)], "m30")
    await chain(session, [f"b{i}" for i in range(11, 21)], "m10")
    trunk = [f"m{i}" for i in range(31)]
    # Then the latest leaf is the newer branch's tip
    assert (await session.get_latest_leaf() or {})["id"] == "b20"
    assert ids(await session.get_history()) == trunk[:11] + [f"b{i}" for i in range(11, 21)]
    # And the 61-long branch reads whole when selected
    selected = await session.get_history("a60")
    assert ids(selected) == trunk + [f"a{i}" for i in range(31, 61)]
    assert len(selected) == 61
    assert await session.get_path_length("a60") == 61
    assert ids(await session.get_branches("m10")) == ["m11", "b11"]
    assert ids(await session.get_branches("m30")) == ["a31"]


async def test_a_session_longer_than_10000_messages_is_read_whole(ms: Memstream) -> None:
    session = ms.session("beyond-10000")
    # Given 10,500 messages in one chain, appended in atomic batches of 500 (reads used to stop
    # 10,000 rows up from the leaf)
    names = [f"m{i}" for i in range(10_500)]
    for start in range(0, len(names), 500):
        await chain(session, names[start : start + 500])
    # Then nothing is cut: history, path length and row stats run from the root to the leaf
    history = await session.get_history()
    assert ids(history) == names
    assert (history[0], history[-1]) == (msg("m0"), msg("m10499"))
    assert await session.get_path_length() == 10_500
    stats = await session.get_history_row_stats()
    assert ids(stats) == names
    # And a recent window is the tail, its total the whole path's bytes; a big one is everything
    recent = await session.get_recent_history(0, 10)
    assert ids(recent.messages) == names[-10:]
    assert recent.truncated is True
    assert recent.total_content_bytes == sum(s["bytes"] for s in stats)
    whole = await session.get_recent_history(10**12)
    assert ids(whole.messages) == names
    assert whole.truncated is False
    # When a branch grows off a message deep in it, and an overlay spans 10,200 of its messages
    await session.append_message(msg("b"), "m10400")
    overlay = await session.add_compaction("summary", "m100", "m10300")
    # Then both branches read through the overlay, and path lengths count the raw messages
    assert ids(await session.get_branches("m10400")) == ["m10401", "b"]
    summary = f"compaction_{overlay['id']}"
    assert ids(await session.get_history()) == [*names[:100], summary, *names[10_301:10_401], "b"]
    assert ids(await session.get_history("m10499")) == [*names[:100], summary, *names[10_301:]]
    assert await session.get_path_length() == 10_402
    assert await session.get_path_length("m10499") == 10_500


async def test_large_messages_are_intact(ms: Memstream) -> None:
    session = ms.session("large")
    # Given a 200 000-character message (multi-byte characters included)
    text = ("0123456789abcdéf😀" * 12_000)[:200_000]
    await session.append_message(msg("big", text))
    # And four ~900 KB rows after it (several MB on one path)
    rows = [msg(f"r{i}", chr(ord("a") + i) * 900_000) for i in range(4)]
    for row in rows:
        await session.append_message(row)
    # Then history returns every row byte-for-byte
    history = await session.get_history()
    assert history[0]["parts"][0]["text"] == text
    assert history[1:] == rows
    assert await session.get_message("big") == msg("big", text)
    # And row stats count each row's UTF-8 JSON bytes
    stats = await session.get_history_row_stats()
    assert [s["bytes"] for s in stats] == [json_bytes(m) for m in history]
    assert sum(s["bytes"] for s in stats) > 3_600_000
    # And a byte budget over the multi-MB path keeps the leaf plus what fits
    recent = await session.get_recent_history(2_000_000)
    assert ids(recent.messages) == ["r2", "r3"]
    assert recent.truncated is True
    assert recent.total_content_bytes == sum(s["bytes"] for s in stats)


# -- compaction overlays ------------------------------------------------------------------------


async def test_add_compaction_replaces_the_range_when_reading(ms: Memstream) -> None:
    session = ms.session("overlay")
    # Given m0..m5
    await chain(session, [f"m{i}" for i in range(6)])
    # When an overlay m1..m3 is added
    compaction = await session.add_compaction("Summary of m1-m3", "m1", "m3")
    # Then it is returned with its stored fields
    assert set(compaction) == {"id", "summary", "from_message_id", "to_message_id", "created_at"}
    assert compaction["summary"] == "Summary of m1-m3"
    assert (compaction["from_message_id"], compaction["to_message_id"]) == ("m1", "m3")
    assert isinstance(compaction["created_at"], str)
    assert compaction["created_at"]
    assert await session.get_compactions() == [compaction]
    # And history reads [m0, summary, m4, m5] with an assistant text message for the summary
    history = await session.get_history()
    assert ids(history) == ["m0", f"compaction_{compaction['id']}", "m4", "m5"]
    assert history[1] == {
        "id": f"compaction_{compaction['id']}",
        "role": "assistant",
        "parts": [{"type": "text", "text": "Summary of m1-m3"}],
    }
    assert is_compaction_message(history[1])
    # And the underlying rows are untouched: raw path length, get_message, row stats
    assert await session.get_path_length() == 6
    assert await session.get_message("m2") == msg("m2")
    assert ids(await session.get_history_row_stats()) == [f"m{i}" for i in range(6)]
    # When the overlay's end is deleted, the overlay stops applying
    await session.delete_messages(["m3"])
    assert ids(await session.get_history("m2")) == ["m0", "m1", "m2"]


async def test_iterative_compaction_newer_overlay_from_same_start_wins(ms: Memstream) -> None:
    session = ms.session("iterative")
    # Given 15 messages, a round m1..m7 and then a round m1..m12
    await chain(session, [f"m{i}" for i in range(15)])
    first = await session.add_compaction("Summary round 1", "m1", "m7")
    second = await session.add_compaction("Summary round 2", "m1", "m12")
    # Then history shows only the second, and both rows are kept
    history = await session.get_history()
    assert ids(history) == ["m0", f"compaction_{second['id']}", "m13", "m14"]
    assert history[1]["parts"][0]["text"] == "Summary round 2"
    assert [c["id"] for c in await session.get_compactions()] == [first["id"], second["id"]]


async def test_overlays_with_the_same_range_the_later_inserted_wins(ms: Memstream) -> None:
    session = ms.session("tie")
    # Given m0..m3 and two overlays of m0..m2 written back to back
    await chain(session, ["m0", "m1", "m2", "m3"])
    await session.add_compaction("Old summary", "m0", "m2")
    await session.add_compaction("New summary", "m0", "m2")
    # Then the later one (in log order) is shown, then m3
    history = await session.get_history()
    assert len(history) == 2
    assert history[0]["parts"][0]["text"] == "New summary"
    assert history[1]["id"] == "m3"


async def test_sibling_branch_overlays_stay_isolated(ms: Memstream) -> None:
    session = ms.session("siblings")
    # Given m0 with branch a1..a4 and branch b1..b3
    await session.append_message(msg("m0"))
    await chain(session, ["a1", "a2", "a3", "a4"], "m0")
    await chain(session, ["b1", "b2", "b3"], "m0")
    # When overlays A1(m0..a2), B(m0..b2), A2(m0..a3) are added in that order
    await session.add_compaction("A1", "m0", "a2")
    b = await session.add_compaction("B", "m0", "b2")
    a2 = await session.add_compaction("A2", "m0", "a3")
    # Then each branch shows its own newest overlay
    assert ids(await session.get_history("a4")) == [f"compaction_{a2['id']}", "a4"]
    assert ids(await session.get_history("b3")) == [f"compaction_{b['id']}", "b3"]
    assert ids(await session.get_history()) == [f"compaction_{b['id']}", "b3"]


async def test_overlay_across_a_long_path_and_overlays_are_per_session(ms: Memstream) -> None:
    session, other = ms.session("overlay-120"), ms.session("overlay-other")
    # Given 120 messages in one session and two in another that reuse the ids m10/m100
    await chain(session, [f"m{i}" for i in range(120)])
    await chain(other, ["m10", "m100"])
    # When an overlay m10..m100 is added to the first session
    compaction = await session.add_compaction("middle", "m10", "m100")
    # Then the first reads m0..m9, summary, m101..m119
    assert ids(await session.get_history()) == (
        [f"m{i}" for i in range(10)]
        + [f"compaction_{compaction['id']}"]
        + [f"m{i}" for i in range(101, 120)]
    )
    assert await session.get_path_length() == 120
    # And the other session is unaffected
    assert ids(await other.get_history()) == ["m10", "m100"]
    assert await other.get_compactions() == []


async def test_overlays_with_unknown_or_reversed_endpoints_are_inert(ms: Memstream) -> None:
    session = ms.session("inert")
    # Given m0..m3 and overlays whose endpoints are unknown or reversed
    await chain(session, ["m0", "m1", "m2", "m3"])
    await session.add_compaction("unknown start", "ghost", "m2")
    await session.add_compaction("unknown end", "m0", "ghost")
    await session.add_compaction("reversed", "m2", "m1")
    # Then they are stored but history is raw
    assert len(await session.get_compactions()) == 3
    assert ids(await session.get_history()) == ["m0", "m1", "m2", "m3"]


async def test_add_compaction_returns_its_own_overlay_under_concurrent_writers(
    ms: Memstream, settings: Settings
) -> None:
    # Given a session written by two clients at once
    session = ms.session("concurrent")
    await chain(session, ["m0", "m1"])
    await session.get_history()
    other = await open_memstream(settings, workers=False)
    try:
        theirs = other.session("concurrent")
        # When both add compactions concurrently
        requests = [(session if i % 2 else theirs, f"summary {i}") for i in range(10)]
        results = await asyncio.gather(
            *(s.add_compaction(text, "m0", "m1") for s, text in requests)
        )
        # Then each call returns the overlay it stored, and all ten are stored
        assert [r["summary"] for r in results] == [text for _, text in requests]
        assert len({r["id"] for r in results}) == 10
        stored = await session.get_compactions()
        assert {c["id"] for c in stored} == {r["id"] for r in results}
    finally:
        await other.close()


# -- byte-budgeted recent history and row stats ---------------------------------------------------


async def test_recent_history_of_an_empty_session(ms: Memstream) -> None:
    result = await ms.session("recent-empty").get_recent_history(1000)
    assert result == RecentHistory([], False, 0)
    assert dataclasses.is_dataclass(result)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.truncated = True  # type: ignore[misc]


async def test_recent_history_budgets(ms: Memstream) -> None:
    session = ms.session("recent")
    # Given m0..m9 of about 1 KB each
    await chain(session, [f"m{i}" for i in range(10)], text="x" * 1000)
    stats = await session.get_history_row_stats()
    size = stats[0]["bytes"]
    total = sum(s["bytes"] for s in stats)
    assert all(s["bytes"] == size for s in stats)
    # When the whole path fits
    full = await session.get_recent_history(10 * size)
    # Then everything is returned untruncated
    assert ids(full.messages) == [f"m{i}" for i in range(10)]
    assert (full.truncated, full.total_content_bytes) == (False, total)
    # When the budget is 3 KB
    recent = await session.get_recent_history(3000)
    # Then the window is a contiguous suffix ending at m9, shorter than 10, within budget
    window = ids(recent.messages)
    assert window[-1] == "m9"
    assert window == [f"m{i}" for i in range(10 - len(window), 10)]
    assert 1 <= len(window) < 10
    assert len(window) * size <= 3000
    assert recent.truncated is True
    assert recent.total_content_bytes == total
    # When the budget is 2 KB but at least 4 messages are wanted → m6..m9
    floor = await session.get_recent_history(2000, 4)
    assert ids(floor.messages) == ["m6", "m7", "m8", "m9"]
    assert floor.truncated is True
    # When more messages are wanted than the path has → the whole path, untruncated
    everything = await session.get_recent_history(0, 50)
    assert len(everything.messages) == 10
    assert everything.truncated is False
    # When the budget is 0, the leaf alone
    assert ids((await session.get_recent_history(0)).messages) == ["m9"]


async def test_recent_history_always_includes_the_leaf(ms: Memstream) -> None:
    session = ms.session("huge-leaf")
    # Given a small message then a 50 KB leaf
    await session.append_message(msg("small", "hi"))
    await session.append_message(msg("huge", "z" * 50_000))
    # When the budget is 1 KB
    result = await session.get_recent_history(1000)
    # Then only the leaf is returned, truncated
    assert ids(result.messages) == ["huge"]
    assert result.truncated is True
    assert result.total_content_bytes == json_bytes(msg("small", "hi")) + json_bytes(
        msg("huge", "z" * 50_000)
    )


async def test_recent_history_applies_overlays_inside_the_window_only(ms: Memstream) -> None:
    session = ms.session("recent-overlay")
    # Given m0..m9 of equal size, an overlay m7..m8 and an overlay m2..m8
    await chain(session, [f"m{i}" for i in range(10)], text="y" * 500)
    inside = await session.add_compaction("inside", "m7", "m8")
    await session.add_compaction("reaches outside", "m2", "m8")
    size = (await session.get_history_row_stats())[0]["bytes"]
    # When the window is the last three rows
    result = await session.get_recent_history(3 * size)
    # Then the inside overlay applies; the one starting outside the window is ignored
    assert ids(result.messages) == [f"compaction_{inside['id']}", "m9"]
    # And the full history applies the overlay that starts earlier (later in log order)
    assert [m["parts"][0]["text"] for m in (await session.get_history())[2:3]] == [
        "reaches outside"
    ]


async def test_recent_history_follows_the_active_branch(ms: Memstream) -> None:
    session = ms.session("recent-branch")
    # Given m0 → m1 → m2 and a newer branch m1 → x
    await chain(session, ["m0", "m1", "m2"])
    await session.append_message(msg("x"), "m1")
    # Then the budgeted read is the active path m0, m1, x
    result = await session.get_recent_history(10**6)
    assert ids(result.messages) == ["m0", "m1", "x"]
    assert result.total_content_bytes == sum(
        s["bytes"] for s in await session.get_history_row_stats()
    )


async def test_row_stats_ids_roles_and_sizes(ms: Memstream) -> None:
    session = ms.session("stats")
    # Given an empty session, stats are empty
    assert await session.get_history_row_stats() == []
    # Given a small user message, a big assistant message and a tool message
    await session.append_message(msg("small", "hi", role="user"))
    await session.append_message(msg("big", "b" * 10_000, role="assistant"))
    await session.append_message({"id": "t", "role": "tool", "parts": []})
    # Then stats are root→leaf with stored roles and UTF-8 JSON sizes, without content
    stats = await session.get_history_row_stats()
    assert [(s["id"], s["role"]) for s in stats] == [
        ("small", "user"),
        ("big", "assistant"),
        ("t", "tool"),
    ]
    assert all(set(s) == {"id", "role", "bytes"} and s["bytes"] > 0 for s in stats)
    assert stats[1]["bytes"] > stats[0]["bytes"] + 9000
    assert stats[0]["bytes"] == json_bytes(msg("small", "hi", role="user"))
