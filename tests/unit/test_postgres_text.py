"""Text as PostgreSQL stores it: NUL and the escape marker round-trip exactly."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memstream.projections.postgres.text import loaded, searchable, stored

_tricky = st.text(
    alphabet=st.sampled_from(
        ["\x00", "\ue000", "\ue001", "\ue002", "\ue003", "\ud800", "\udfff", "\U000f0000", "a"]
    )
)


@given(st.one_of(st.text(), _tricky))
def test_stored_text_loads_back_exactly_and_is_valid_utf8_without_nul(text: str) -> None:
    kept = stored(text)
    assert "\x00" not in kept
    kept.encode("utf-8")  # no lone surrogate left
    assert loaded(kept) == text


@given(st.one_of(st.text(), _tricky), st.one_of(st.text(), _tricky))
def test_equal_texts_stay_equal_and_different_ones_different(a: str, b: str) -> None:
    assert (stored(a) == stored(b)) == (a == b)


def test_ordinary_text_is_passed_through() -> None:
    text = "plain words, ✓ émoji 🙂"
    assert stored(text) is text
    assert loaded(text) is text
    assert stored(None) is None
    assert loaded(None) is None


def test_search_text_only_loses_its_nuls() -> None:
    assert searchable("a\x00b") == "a b"
    assert searchable("ab") == "ab"
