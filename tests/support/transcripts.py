"""Real agent-loop transcripts in the OpenAI Chat Completions and Anthropic Messages shapes."""

from __future__ import annotations

from typing import Any

# An OpenAI agent loop as the Chat Completions API and the openai package give it back
# (``ChatCompletionMessage.model_dump(exclude_none=False)`` keeps refusal/annotations/audio).
OPENAI_LOOP: list[dict[str, Any]] = [
    {"role": "developer", "content": "You are a travel agent. Use tools."},
    {"role": "system", "content": [{"type": "text", "text": "Answer briefly."}]},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What's the weather where this photo was taken?"},
            {
                "type": "image_url",
                "image_url": {"url": "https://example.com/photos/lisbon.jpg", "detail": "low"},
            },
        ],
        "name": "alice",
    },
    {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "annotations": [],
        "audio": None,
        "function_call": None,
        "tool_calls": [
            {
                "id": "call_a1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Lisbon"}'},
            },
            {
                "id": "call_b2",
                "type": "function",
                "function": {"name": "get_time", "arguments": '{"tz":"Europe/Lisbon"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_a1", "content": '{"temp_c": 21, "sky": "clear"}'},
    {
        "role": "tool",
        "tool_call_id": "call_b2",
        "content": [{"type": "text", "text": "14:05"}],
    },
    {
        "role": "assistant",
        "content": "It's 21 °C and clear in Lisbon at 14:05.",
        "refusal": None,
        "annotations": [],
    },
    {  # as ChatCompletionMessage.model_dump() gives a reply without tools
        "role": "assistant",
        "content": "Anything else?",
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "tool_calls": None,
    },
    {"role": "user", "content": "Thanks!"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_c3",
                "type": "function",
                "function": {"name": "log", "arguments": "{not json"},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_c3", "content": "error: bad arguments"},
    {"role": "assistant", "reasoning_content": "The user is done.", "content": "Bye!"},
]

# An Anthropic loop with thinking, parallel tool use, results with images and errors.
ANTHROPIC_LOOP: list[dict[str, Any]] = [
    {"role": "user", "content": "Plan a day in Kyoto; here is my hotel."},
    {
        "role": "user",
        "content": [
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
            },
            {"type": "image", "source": {"type": "url", "url": "https://example.com/map.webp"}},
            {"type": "text", "text": "Near Gion.", "cache_control": {"type": "ephemeral"}},
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Need weather and sights.", "signature": "EqQB..."},
            {"type": "redacted_thinking", "data": "EmwKAhgB..."},
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_01", "name": "weather", "input": {"city": "Kyoto"}},
            {"type": "tool_use", "id": "toolu_02", "name": "sights", "input": {}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "Sunny, 18 °C"},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_02",
                "content": [
                    {"type": "text", "text": "Fushimi Inari"},
                    {
                        "type": "image",
                        "source": {"type": "url", "url": "https://example.com/torii.jpg"},
                    },
                ],
                "is_error": False,
            },
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_03", "name": "book", "input": {"when": "9:00"}}
        ],
    },
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_03", "is_error": True}],
    },
    {
        "role": "assistant",
        "content": [
            {
                "type": "text",
                "text": "Start at Fushimi Inari.",
                "citations": [{"type": "char_location", "cited_text": "x"}],
            }
        ],
    },
    {"role": "user", "content": [{"type": "text", "text": "Great"}]},
]
