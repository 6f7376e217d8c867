"""Compaction overlays applied to a root→leaf path (spec §8.1), as a pure function."""

from __future__ import annotations

from typing import Any

from memstream.domain.messages import is_compaction_message
from memstream.projections.overlays import Compaction, apply_overlays


def path(*ids: str) -> list[dict[str, Any]]:
    return [{"id": i, "role": "user", "parts": [{"type": "text", "text": i}]} for i in ids]


def overlay(cid: str, start: str, end: str, summary: str | None = None) -> Compaction:
    return Compaction(cid, summary or f"summary {cid}", start, end, "2024-01-01T00:00:00+00:00")


def ids(messages: list[dict[str, Any]]) -> list[str]:
    return [m["id"] for m in messages]


def test_no_overlays_returns_the_path_unchanged() -> None:
    messages = path("m0", "m1")
    assert apply_overlays(messages, []) == messages
    assert apply_overlays([], [overlay("c", "m0", "m1")]) == []


def test_overlay_replaces_its_range_by_one_synthetic_message() -> None:
    # Given m0..m5 and an overlay m1..m3
    messages = path(*(f"m{i}" for i in range(6)))
    # When applied
    result = apply_overlays(messages, [overlay("c1", "m1", "m3", "Summary of m1-m3")])
    # Then [m0, compaction_c1, m4, m5], the synthetic message an assistant text
    assert ids(result) == ["m0", "compaction_c1", "m4", "m5"]
    assert result[1] == {
        "id": "compaction_c1",
        "role": "assistant",
        "parts": [{"type": "text", "text": "Summary of m1-m3"}],
    }
    assert is_compaction_message(result[1])
    assert not is_compaction_message(result[0])
    # And the underlying messages are untouched
    assert ids(messages) == [f"m{i}" for i in range(6)]


def test_single_message_overlay() -> None:
    assert ids(apply_overlays(path("m0", "m1", "m2"), [overlay("c", "m1", "m1")])) == [
        "m0",
        "compaction_c",
        "m2",
    ]


def test_later_overlay_from_the_same_start_supersedes() -> None:
    # Given 15 messages, rounds m1..m7 then m1..m12 (log order)
    messages = path(*(f"m{i}" for i in range(15)))
    overlays = [overlay("r1", "m1", "m7"), overlay("r2", "m1", "m12")]
    # Then the later one wins
    assert ids(apply_overlays(messages, overlays)) == ["m0", "compaction_r2", "m13", "m14"]


def test_same_start_tie_goes_to_the_later_in_log_order() -> None:
    # Given two overlays with identical timestamps from m0: "Old" to m2, then "New" to m2
    messages = path("m0", "m1", "m2", "m3")
    overlays = [
        overlay("old", "m0", "m2", "Old summary"),
        overlay("new", "m0", "m2", "New summary"),
    ]
    # Then the later-inserted wins
    result = apply_overlays(messages, overlays)
    assert ids(result) == ["compaction_new", "m3"]
    assert result[0]["parts"][0]["text"] == "New summary"


def test_later_but_shorter_overlay_still_wins() -> None:
    messages = path("m0", "m1", "m2", "m3", "m4")
    overlays = [overlay("long", "m0", "m3"), overlay("short", "m0", "m1")]
    assert ids(apply_overlays(messages, overlays)) == ["compaction_short", "m2", "m3", "m4"]


def test_nested_overlay_inside_a_replaced_range_is_skipped() -> None:
    messages = path(*(f"m{i}" for i in range(6)))
    overlays = [overlay("outer", "m1", "m4"), overlay("inner", "m2", "m3")]
    assert ids(apply_overlays(messages, overlays)) == ["m0", "compaction_outer", "m5"]


def test_consecutive_overlays_both_apply() -> None:
    messages = path(*(f"m{i}" for i in range(6)))
    overlays = [overlay("b", "m3", "m4"), overlay("a", "m0", "m2")]
    assert ids(apply_overlays(messages, overlays)) == ["compaction_a", "compaction_b", "m5"]


def test_overlay_with_an_endpoint_off_the_path_is_ignored() -> None:
    messages = path("m0", "m1", "m2")
    overlays = [
        overlay("from-elsewhere", "x", "m2"),
        overlay("to-elsewhere", "m0", "x"),
        overlay("backwards", "m2", "m0"),
    ]
    assert ids(apply_overlays(messages, overlays)) == ["m0", "m1", "m2"]


def test_backwards_overlay_does_not_hide_a_valid_earlier_one() -> None:
    # A later candidate whose end lies before its start must not override a valid one
    messages = path("m0", "m1", "m2", "m3")
    overlays = [overlay("ok", "m1", "m2"), overlay("backwards", "m1", "m0")]
    assert ids(apply_overlays(messages, overlays)) == ["m0", "compaction_ok", "m3"]


def test_sibling_branch_overlays_stay_on_their_branch() -> None:
    # Given m0 with branches a1..a4 and b1..b3; overlays A1(m0..a2), B(m0..b2), A2(m0..a3)
    overlays = [overlay("A1", "m0", "a2"), overlay("B", "m0", "b2"), overlay("A2", "m0", "a3")]
    branch_a = path("m0", "a1", "a2", "a3", "a4")
    branch_b = path("m0", "b1", "b2", "b3")
    # Then each branch sees its own newest overlay
    assert ids(apply_overlays(branch_a, overlays)) == ["compaction_A2", "a4"]
    assert ids(apply_overlays(branch_b, overlays)) == ["compaction_B", "b3"]


def test_overlay_across_a_long_path() -> None:
    # Given 120 messages and an overlay m10..m100
    messages = path(*(f"m{i}" for i in range(120)))
    result = apply_overlays(messages, [overlay("c", "m10", "m100")])
    # Then m0..m9, the summary, m101..m119
    assert ids(result) == (
        [f"m{i}" for i in range(10)] + ["compaction_c"] + [f"m{i}" for i in range(101, 120)]
    )
