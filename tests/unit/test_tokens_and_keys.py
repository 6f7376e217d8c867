"""Token estimates (spec §5.1–5.2) and entry keys (§9.1): the reference test vectors, exactly."""

from __future__ import annotations

import pytest

from memstream.domain.entry_keys import entry_key, fnv1a_base36
from memstream.domain.tokens import estimate_message_tokens, estimate_string_tokens, js_round


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("a", 2),
        ("hello", 2),
        ("Hello world", 3),
        ("a b c", 4),
        ("User likes coffee.", 5),
        ("You are helpful.", 4),
        ("one two three four five six seven eight nine ten!!!", 13),
        ("x" * 400, 100),
        ("word " * 50, 65),
        ("😀😀😀😀", 2),
        ("  leading and trailing  ", 6),
    ],
)
def test_estimate_string_tokens_vectors(text: str, tokens: int) -> None:
    assert estimate_string_tokens(text) == tokens


def test_ten_words_of_48_chars_is_13() -> None:
    text = "aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjj"
    assert (len(text), len(text.split())) == (48, 10)
    assert estimate_string_tokens(text) == 13


def test_reasoning_part_increases_message_estimate() -> None:
    # Given a message with text, and the same message with a reasoning part too
    plain = {"id": "m", "role": "assistant", "parts": [{"type": "text", "text": "Hi there"}]}
    reasoning = {"type": "reasoning", "text": "Let me think about this carefully."}
    thoughtful = {**plain, "parts": [*plain["parts"], reasoning]}
    # Then the reasoning counts
    assert estimate_message_tokens([thoughtful]) > estimate_message_tokens([plain])
    assert estimate_message_tokens([plain]) == 4 + estimate_string_tokens("Hi there")


def test_tool_parts_count_input_and_output_as_compact_json() -> None:
    part = {"type": "tool-search", "input": {"q": "x"}, "output": "result text"}
    expected = 4 + estimate_string_tokens('{"q":"x"}') + estimate_string_tokens("result text")
    assert estimate_message_tokens([{"id": "t", "role": "assistant", "parts": [part]}]) == expected


def test_js_round_rounds_halves_up() -> None:
    assert [js_round(0.5), js_round(1.5), js_round(2.5), js_round(2.4999)] == [1, 2, 3, 2]


@pytest.mark.parametrize(
    ("title", "content", "key"),
    [
        (None, "no key", "no-key-1nprufp"),
        ("Pirate style", "Talk like a pirate", "pirate-style"),
        (None, "Just content, no desc", "just-content-no-desc-cgko96"),
        (None, "用户喜欢咖啡", "entry-2mzjev"),
        ("日本", "whatever", "entry-qmsg4k"),
        ("  ", "abc", "abc-7aigaz"),
    ],
)
def test_entry_key_vectors(title: str | None, content: str, key: str) -> None:
    assert entry_key(title, content) == key


def test_fnv1a_vectors_and_prefix_collisions() -> None:
    assert fnv1a_base36("") == "ztntfp"
    assert fnv1a_base36("a") == "1r9wi7g"
    shared = "p" * 60
    assert entry_key(None, shared + "one") != entry_key(None, shared + "two")
