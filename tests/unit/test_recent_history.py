"""The byte-budgeted window of ``get_recent_history`` (spec §3.10), as a pure function."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstream.projections.recent_history import RecentHistory, recent_window


def test_empty_path_starts_at_zero() -> None:
    assert recent_window([], 100, 1) == 0


def test_everything_fits() -> None:
    assert recent_window([10, 10, 10], 30, 1) == 0
    assert recent_window([10, 10, 10], 10_000, 1) == 0


def test_longest_suffix_within_budget() -> None:
    # Given 10 rows of 1000 bytes and a 3000-byte budget
    # Then the window is the last three
    assert recent_window([1000] * 10, 3000, 1) == 7
    assert recent_window([1000] * 10, 2999, 1) == 8


def test_leaf_is_always_included_even_over_budget() -> None:
    # Given a 50 KB leaf and a 1 KB budget
    assert recent_window([100, 100, 50_000], 1000, 1) == 2
    assert recent_window([50_000], 0, 1) == 0


def test_window_stops_at_the_first_row_that_does_not_fit() -> None:
    # Given a big row between small ones: the window is contiguous, it does not skip the big row
    assert recent_window([1, 1, 5000, 1, 1], 100, 1) == 3


def test_min_recent_messages_is_a_floor() -> None:
    # Given 10×1000 bytes, budget 2000, at least 4 → m6..m9
    assert recent_window([1000] * 10, 2000, 4) == 6
    # And more than the path → the whole path
    assert recent_window([1000] * 3, 0, 10) == 0


def test_min_recent_messages_below_one_counts_as_one_and_fractions_floor() -> None:
    assert recent_window([1000] * 5, 0, 0) == 4
    assert recent_window([1000] * 5, 0, -3) == 4
    assert recent_window([1000] * 5, 0, 2.9) == 3


def test_after_the_floor_the_budget_still_extends_the_window() -> None:
    # 2 rows forced (used=2000), then one more fits a 3000 budget
    assert recent_window([1000] * 6, 3000, 2) == 3


def test_recent_history_is_a_frozen_dataclass() -> None:
    result = RecentHistory([], False, 0)
    assert dataclasses.is_dataclass(result)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.truncated = True  # type: ignore[misc]


@given(
    st.lists(st.integers(min_value=1, max_value=10_000), max_size=60),
    st.integers(min_value=0, max_value=100_000),
    st.integers(min_value=-2, max_value=70),
)
def test_window_properties(sizes: list[int], budget: int, minimum: int) -> None:
    start = recent_window(sizes, budget, minimum)
    if not sizes:
        assert start == 0
        return
    window = sizes[start:]
    floor = max(1, minimum)
    # The leaf is always in; the window honours the floor (when the path is long enough)
    assert len(window) >= min(floor, len(sizes))
    # Beyond the floor, the window is within budget
    if len(window) > floor:
        assert sum(window) <= budget
    # And it is maximal: one more row would break both the budget and the floor
    if start > 0:
        assert len(window) >= floor
        assert sum(window) + sizes[start - 1] > budget
