"""Chat-format messages through a real session (issue 15, item 1): appended as the OpenAI and
Anthropic APIs give them, read back in either shape, searched, branched and updated."""

from __future__ import annotations

import copy

import pytest
from support.transcripts import ANTHROPIC_LOOP, OPENAI_LOOP

from memstream.client import Memstream
from memstream.domain.errors import InvalidInputError
from memstream.formats import to_anthropic, to_openai

pytestmark = pytest.mark.both_backends


async def test_an_openai_loop_appended_one_by_one_and_as_a_batch_reads_back_exactly(
    ms: Memstream,
) -> None:
    one_by_one = ms.session("openai-single")
    for message in copy.deepcopy(OPENAI_LOOP):
        await one_by_one.append_message(message)
    batch = ms.session("openai-batch")
    await batch.append_messages(copy.deepcopy(OPENAI_LOOP))
    for session in (one_by_one, batch):
        history = await session.get_history()
        assert to_openai(history) == OPENAI_LOOP
    # a batch names each result's tool from its call; alone, a result's call is not in view
    batch_results = [
        m["parts"][0]["toolName"] for m in await batch.get_history() if m["role"] == "tool"
    ]
    assert batch_results == ["get_weather", "get_time", "log"]
    # text is searchable, tool arguments are not (spec §1.2)
    hits = await batch.search("Lisbon")  # (not "Europe/Lisbon" in a call's arguments)
    assert [h["content"] for h in hits] == ["It's 21 °C and clear in Lisbon at 14:05."]


async def test_an_anthropic_loop_reads_back_exactly_and_a_malformed_batch_writes_nothing(
    ms: Memstream,
) -> None:
    session = ms.session("anthropic")
    await session.append_messages(copy.deepcopy(ANTHROPIC_LOOP))
    assert to_anthropic(await session.get_history()) == ANTHROPIC_LOOP
    before = await session.get_history()
    bad = [
        {"role": "user", "content": "fine"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t9", "name": "f"}]},
    ]
    with pytest.raises(
        InvalidInputError, match=r"messages\[1\] of 2: .*content\[0\]\.input is missing"
    ):
        await session.append_messages(bad)
    assert await session.get_history() == before


async def test_a_converted_message_is_updated_and_branched_like_any_other(ms: Memstream) -> None:
    session = ms.session("branching")
    await session.append_message({"id": "q", "role": "user", "content": "Pick a city"})
    await session.append_message(
        {"id": "a1", "role": "assistant", "content": None, "tool_calls": []}, "q"
    )
    await session.append_message(
        {"id": "a2", "role": "assistant", "content": [{"type": "text", "text": "Porto"}]}, "q"
    )
    assert to_openai(await session.get_history()) == [
        {"role": "user", "content": "Pick a city"},
        {"role": "assistant", "content": [{"type": "text", "text": "Porto"}]},
    ]
    await session.update_message(
        {"id": "a1", "role": "assistant", "content": "Lisbon", "refusal": None}
    )
    assert to_openai(await session.get_history("a1")) == [
        {"role": "user", "content": "Pick a city"},
        {"role": "assistant", "content": "Lisbon", "refusal": None},
    ]
