"""OpenAI Chat Completions and Anthropic Messages messages stored as parts and given back exactly
(issue 15, item 1): real transcripts of agent loops, and every malformed field named."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.transcripts import ANTHROPIC_LOOP, OPENAI_LOOP

from memstream.domain.errors import InvalidInputError
from memstream.domain.messages import decode_message, encode_message, normalize_message
from memstream.domain.tokens import estimate_message_tokens
from memstream.domain.tool_pairs import sanitize_tool_pairs
from memstream.formats import from_anthropic, from_openai, to_anthropic, to_openai


def _stored(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """As a session stores and reads them back: normalised in one batch, JSON and back."""
    names: dict[str, str] = {}
    stored = [normalize_message(copy.deepcopy(m), names) for m in messages]
    back = [decode_message(encode_message(m)) for m in stored]
    assert all(m is not None for m in back)
    return [m for m in back if m is not None]


def test_an_openai_agent_loop_round_trips_exactly() -> None:
    stored = _stored(OPENAI_LOOP)
    assert to_openai(stored) == OPENAI_LOOP
    # stored as parts a session understands: a call and its results pair up, named
    call = stored[3]
    assert [p["type"] for p in call["parts"]] == ["dynamic-tool", "dynamic-tool"]
    assert call["parts"][0]["input"] == {"city": "Lisbon"}
    assert call["parts"][0]["toolName"] == "get_weather"
    results = stored[4:6]
    assert [r["parts"][0]["toolName"] for r in results] == ["get_weather", "get_time"]
    assert [r["parts"][0]["toolCallId"] for r in results] == ["call_a1", "call_b2"]
    assert stored[2]["parts"][1] == {
        "type": "file",
        "mediaType": "image/jpeg",
        "url": "https://example.com/photos/lisbon.jpg",
        "providerMetadata": {"openai": {"image_url": {"detail": "low"}}},
    }
    assert stored[-1]["parts"][0] == {"type": "reasoning", "text": "The user is done."}
    # a reply as the openai package dumps it (absent fields as None) is text, kept exactly
    assert stored[7]["parts"] == [{"type": "text", "text": "Anything else?"}]
    # compaction's sanitizer keeps the pairs (nothing stubbed, nothing dropped)
    assert sanitize_tool_pairs(stored) == stored


def test_an_anthropic_agent_loop_round_trips_exactly() -> None:
    stored = _stored(ANTHROPIC_LOOP)
    assert to_anthropic(stored) == ANTHROPIC_LOOP
    thinking = stored[2]["parts"][0]
    assert thinking == {
        "type": "reasoning",
        "text": "Need weather and sights.",
        "providerMetadata": {"anthropic": {"signature": "EqQB..."}},
    }
    assert stored[2]["parts"][1] == {
        "type": "data-anthropic",
        "data": {"type": "redacted_thinking", "data": "EmwKAhgB..."},
    }
    assert stored[1]["parts"][0]["url"] == "data:image/png;base64,iVBORw0KGgo="
    assert stored[1]["parts"][0]["mediaType"] == "image/png"
    results = stored[3]["parts"]
    assert [(p["toolName"], p["state"]) for p in results] == [
        ("weather", "output-available"),
        ("sights", "output-available"),
    ]
    assert stored[5]["parts"][0]["state"] == "output-error"
    assert sanitize_tool_pairs(stored) == stored


def test_reasoning_and_tool_io_count_in_token_estimates() -> None:
    plain = _stored([{"role": "assistant", "content": "Bye!"}])
    reasoning = _stored([OPENAI_LOOP[-1]])
    assert estimate_message_tokens(reasoning) > estimate_message_tokens(plain)
    assert estimate_message_tokens(_stored(OPENAI_LOOP[3:5])) > 8


def test_each_format_converts_into_the_other() -> None:
    # An OpenAI loop given to Anthropic: the system prompt is left out, results become
    # user messages of tool_result blocks, calls become tool_use blocks with parsed input.
    anthropic = to_anthropic(_stored(OPENAI_LOOP[2:7]))
    assert anthropic[0]["content"][1] == {
        "type": "image",
        "source": {"type": "url", "url": "https://example.com/photos/lisbon.jpg"},
    }
    assert anthropic[1] == {
        "role": "assistant",
        "content": [
            {
                "type": "tool_use",
                "id": "call_a1",
                "name": "get_weather",
                "input": {"city": "Lisbon"},
            },
            {
                "type": "tool_use",
                "id": "call_b2",
                "name": "get_time",
                "input": {"tz": "Europe/Lisbon"},
            },
        ],
    }
    assert anthropic[2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "call_a1",
                "content": '{"temp_c": 21, "sky": "clear"}',
            }
        ],
    }
    assert anthropic[4] == {
        "role": "assistant",
        "content": "It's 21 °C and clear in Lisbon at 14:05.",
    }
    # An Anthropic loop given to OpenAI: tool_use → tool_calls, tool_result → tool messages
    # (an error result's absent content is empty), thinking is left out.
    openai = to_openai(_stored(ANTHROPIC_LOOP[2:6]))
    assert openai[0]["tool_calls"][0] == {
        "id": "toolu_01",
        "type": "function",
        "function": {"name": "weather", "arguments": '{"city":"Kyoto"}'},
    }
    assert [m["role"] for m in openai] == ["assistant", "tool", "tool", "assistant", "tool"]
    assert openai[1] == {"role": "tool", "tool_call_id": "toolu_01", "content": "Sunny, 18 °C"}
    assert json.loads(openai[2]["content"])[0] == {"type": "text", "text": "Fushimi Inari"}
    assert openai[4] == {"role": "tool", "tool_call_id": "toolu_03", "content": ""}


def test_reference_shape_messages_convert_like_the_ai_sdk() -> None:
    # The AI SDK's combined tool part (call and output in one assistant message)
    history = [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "2+2?"}]},
        {
            "id": "a1",
            "role": "assistant",
            "parts": [
                {"type": "reasoning", "text": "easy"},
                {
                    "type": "tool-calc",
                    "toolCallId": "c1",
                    "state": "output-available",
                    "input": {"expr": "2+2"},
                    "output": 4,
                },
                {"type": "text", "text": "4"},
            ],
        },
    ]
    assert to_openai(history) == [
        {"role": "user", "content": "2+2?"},
        {
            "role": "assistant",
            "content": "4",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "calc", "arguments": '{"expr":"2+2"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "4"},
    ]
    assert to_anthropic(history) == [
        {"role": "user", "content": "2+2?"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "c1", "name": "calc", "input": {"expr": "2+2"}},
                {"type": "text", "text": "4"},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "4"}]},
    ]


def test_the_string_convenience_is_stored_as_before() -> None:
    stored = normalize_message({"id": "m1", "role": "user", "content": "hi", "name": "bob"})
    assert stored == {
        "id": "m1",
        "role": "user",
        "parts": [{"type": "text", "text": "hi"}],
        "name": "bob",
    }
    assert to_openai([stored]) == [{"role": "user", "content": "hi", "name": "bob"}]
    assert to_anthropic([stored]) == [{"role": "user", "content": "hi"}]


def test_explicit_converters_keep_a_given_id_and_make_one_otherwise() -> None:
    given_id = from_openai({"id": "m7", "role": "assistant", "content": None, "tool_calls": []})
    assert given_id["id"] == "m7"
    assert to_openai([given_id]) == [{"role": "assistant", "content": None, "tool_calls": []}]
    fresh = from_anthropic({"role": "user", "content": "hello"})
    assert isinstance(fresh["id"], str)
    assert len(fresh["id"]) == 32
    assert from_anthropic({"role": "user", "content": "x"})["id"] != fresh["id"]


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (
            {"role": "tool", "content": [{"type": "text", "text": "4"}]},
            "OpenAI message: tool_call_id must be a non-empty string, not missing",
        ),
        (
            {"role": "tool", "tool_call_id": "c", "content": None},
            "content must be a string or a list, not missing",
        ),
        (
            {"role": "assistant", "content": None, "tool_calls": {}},
            "tool_calls must be a list, not dict",
        ),
        (
            {"role": "assistant", "content": None, "tool_calls": [3]},
            "tool_calls[0] must be a dict, not int",
        ),
        (
            {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "id": "c"}]},
            "tool_calls[0].function must be a dict, not missing",
        ),
        (
            {
                "id": "m9",
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"type": "function", "id": "c", "function": {"name": "f", "arguments": {}}}
                ],
            },
            "OpenAI message 'm9': tool_calls[0].function.arguments must be a string, not dict",
        ),
        (
            {"role": "user", "content": [{"type": "text"}], "name": "x"},
            "content[0].text must be a string, not missing",
        ),
        (
            {"role": "user", "content": [{"text": "x"}], "refusal": None},
            "content[0].type must be a string",
        ),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": "u"}]},
            "content[0].image_url.url must be a string",
        ),
        (
            {"role": "user", "content": "x", "tool_calls": []},
            "tool_calls are only for role 'assistant'",
        ),
        ({"role": "narrator", "content": None}, "role must be one of"),
        (
            {"role": "user", "content": [{"type": "tool_use", "name": "f", "input": {}}]},
            "Anthropic message: content[0].id must be a non-empty string",
        ),
        (
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f"}]},
            "content[0].input is missing",
        ),
        (
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": 5}]},
            "content[0].tool_use_id must be a non-empty string, not int",
        ),
        (
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "content": 5}],
            },
            "content[0].content must be a string or a list, not int",
        ),
        (
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "no"}],
            },
            "content[0].is_error must be a boolean, not str",
        ),
        (
            {"role": "assistant", "content": [{"type": "thinking", "signature": "s"}]},
            "content[0].thinking must be a string, not missing",
        ),
        (
            {"role": "user", "content": [{"type": "image", "source": "x"}]},
            "content[0].source must be a dict, not str",
        ),
    ],
)
def test_a_malformed_message_names_the_field(message: dict[str, Any], error: str) -> None:
    with pytest.raises(InvalidInputError) as raised:
        normalize_message(message)
    assert error in str(raised.value)


def test_explicit_converters_check_the_role_of_their_format() -> None:
    with pytest.raises(InvalidInputError, match="role must be 'user' or 'assistant', not 'system'"):
        from_anthropic({"role": "system", "content": "x"})
    with pytest.raises(InvalidInputError, match="content must be a string or a list of blocks"):
        from_anthropic({"role": "user", "content": None})
    with pytest.raises(InvalidInputError, match="message must be a dict, not list"):
        from_openai([])  # type: ignore[arg-type]


_text = st.text(max_size=20)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def _openai_messages(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1, 6))):
        role = draw(st.sampled_from(["system", "developer", "user", "assistant", "tool"]))
        if role == "tool":
            content: Any = draw(
                _text
                | st.lists(st.builds(lambda t: {"type": "text", "text": t}, _text), max_size=2)
            )
            out.append({"role": role, "tool_call_id": f"c{index}", "content": content})
            continue
        message: dict[str, Any] = {"role": role}
        shape = draw(st.sampled_from(["string", "null", "absent", "list"]))
        if shape == "string":
            message["content"] = draw(_text)
        elif shape == "null":
            message["content"] = None
        elif shape == "list":
            message["content"] = draw(
                st.lists(
                    st.builds(lambda t: {"type": "text", "text": t}, _text)
                    | st.builds(
                        lambda u: {"type": "image_url", "image_url": {"url": f"https://x/{u}.png"}},
                        st.integers(0, 9),
                    )
                    | st.builds(
                        lambda d: {
                            "type": "input_audio",
                            "input_audio": {"data": d, "format": "wav"},
                        },
                        _text,
                    ),
                    max_size=3,
                )
            )
        if role == "assistant" and draw(st.booleans()):
            message["tool_calls"] = [
                {
                    "id": f"c{index}-{n}",
                    "type": "function",
                    "function": {
                        "name": "f",
                        "arguments": draw(st.builds(json.dumps, _json) | _text),
                    },
                }
                for n in range(draw(st.integers(0, 2)))
            ]
        if role == "assistant" and "tool_calls" not in message and draw(st.booleans()):
            message.update(tool_calls=None, refusal=None, audio=None, function_call=None)
        if shape == "absent" and "tool_calls" not in message:
            message["content"] = None
        if draw(st.booleans()):
            message["name"] = draw(_text)
        out.append(message)
    return out


@settings(max_examples=150, deadline=None)
@given(_openai_messages())
def test_any_openai_conversation_round_trips(messages: list[dict[str, Any]]) -> None:
    assert to_openai(_stored(messages)) == messages


@st.composite
def _anthropic_messages(draw: st.DrawFn) -> list[dict[str, Any]]:
    text = st.builds(lambda t: {"type": "text", "text": t}, _text)
    image = st.builds(
        lambda d: {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/gif", "data": d},
        },
        st.text("abcXYZ0189+/=", max_size=12),
    )
    use = st.builds(
        lambda i, v: {"type": "tool_use", "id": f"t{i}", "name": "f", "input": v},
        st.integers(0, 5),
        st.dictionaries(_text, _json, max_size=2),
    )
    result = st.builds(
        lambda i, c: {"type": "tool_result", "tool_use_id": f"t{i}", "content": c},
        st.integers(0, 5),
        _text | st.lists(text, max_size=2),
    )
    thinking = st.builds(
        lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, _text, _text
    )
    out = []
    for _ in range(draw(st.integers(1, 6))):
        role = draw(st.sampled_from(["user", "assistant"]))
        blocks = (
            st.one_of(text, image, result) if role == "user" else st.one_of(text, use, thinking)
        )
        content = draw(_text | st.lists(blocks, max_size=3))
        out.append({"role": role, "content": content})
    return out


@settings(max_examples=150, deadline=None)
@given(_anthropic_messages())
def test_any_anthropic_conversation_round_trips(messages: list[dict[str, Any]]) -> None:
    assert to_anthropic(_stored(messages)) == messages
