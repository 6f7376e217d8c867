"""A session's compaction on a real log (spec §8.2, §8.3, Part A.8): ``compact()``,
``compact_after``, ``on_compaction_error``, and the reference compaction function end to end."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
from support.messages import msg

from memstream import (
    CompactionNotConfiguredError,
    ExtractiveSummarizer,
    StaticContext,
    create_compact_function,
)
from memstream.client import Memstream
from memstream.domain.messages import is_compaction_message
from memstream.settings import Settings
from memstream.workers.admin.rebuild import verify

# Every behaviour here holds on both read-model backends (issue 14).
pytestmark = pytest.mark.both_backends


def ids(messages: Sequence[dict[str, Any]]) -> list[str]:
    return [m["id"] for m in messages]


def fixed(result: dict[str, Any] | None, calls: list[list[str]] | None = None) -> Any:
    """A compaction function that returns ``result`` (and records the histories it saw)."""

    async def compact(messages: Sequence[dict[str, Any]], context: object = None) -> Any:
        if calls is not None:
            calls.append(ids(messages))
        return result

    return compact


async def test_compact_without_a_function_is_an_error_naming_it(ms: Memstream) -> None:
    session = ms.session("none")
    await session.append_message(msg("m0"))
    with pytest.raises(CompactionNotConfiguredError, match="No compaction function registered"):
        await session.compact()


async def test_a_compaction_extends_the_overlay_already_on_the_path(ms: Memstream) -> None:
    # Given m0..m9 with an overlay m1..m5
    session = ms.session("grow")
    await session.append_messages([msg(f"m{i}") for i in range(10)])
    await session.add_compaction("first", "m1", "m5")
    # When the function asks for m6..m8
    calls: list[list[str]] = []
    session.on_compaction(
        fixed({"from_message_id": "m6", "to_message_id": "m8", "summary": "s2"}, calls)
    )
    result = await session.compact()
    # Then it saw the overlaid history, and the stored overlay runs from the first one's start
    assert calls[0][:2] == ["m0", calls[0][1]]
    assert calls[0][1].startswith("compaction_")
    assert result == {"from_message_id": "m1", "to_message_id": "m8", "summary": "s2"}
    compactions = await session.get_compactions()
    assert [(c["from_message_id"], c["to_message_id"]) for c in compactions] == [
        ("m1", "m5"),
        ("m1", "m8"),
    ]
    history = await session.get_history()
    assert ids(history)[0] == "m0"
    assert [m["parts"][0]["text"] for m in history if is_compaction_message(m)] == ["s2"]
    assert ids(history)[2:] == ["m9"]


async def test_nothing_is_stored_for_no_result_or_a_range_off_the_path(ms: Memstream) -> None:
    session = ms.session("nothing")
    await session.append_messages([msg(f"m{i}") for i in range(5)])
    session.on_compaction(fixed(None))
    assert await session.compact() is None
    session.on_compaction(fixed({"from_message_id": "m1", "to_message_id": "x", "summary": "s"}))
    assert await session.compact() is None
    assert await session.get_compactions() == []


async def test_an_error_of_the_function_reaches_the_handler_and_the_append_is_kept(
    ms: Memstream,
) -> None:
    # Given a session whose compaction function fails, compacting after any new message
    errors: list[BaseException] = []

    async def failing(messages: Sequence[dict[str, Any]], context: object = None) -> Any:
        raise RuntimeError("the model is down")

    session = (
        ms.session("failing")
        .on_compaction(failing)
        .compact_after(0)
        .on_compaction_error(errors.append)
    )
    # When a message is appended
    await session.append_message(msg("m0"))
    # Then the handler got the function's error (Part A.8), and the message is stored
    assert [str(e) for e in errors] == ["the model is down"]
    assert ids(await session.get_history()) == ["m0"]
    # And a manual compact() reports the same way and returns None
    assert await session.compact() is None
    assert len(errors) == 2


async def test_a_failing_handler_never_fails_the_append(ms: Memstream) -> None:
    def handler(error: BaseException) -> None:
        raise ValueError("handler broke")

    async def failing(messages: Sequence[dict[str, Any]], context: object = None) -> Any:
        raise RuntimeError("boom")

    session = ms.session("h").on_compaction(failing).compact_after(0).on_compaction_error(handler)
    await session.append_message(msg("m0"))
    await session.append_message(msg("m1"))
    assert ids(await session.get_history()) == ["m0", "m1"]


async def test_compact_after_compacts_over_the_threshold_only(ms: Memstream) -> None:
    calls: list[list[str]] = []
    result = {"from_message_id": "m1", "to_message_id": "m2", "summary": "short"}
    # Below the threshold: no call; no threshold or no function: no call
    quiet = ms.session("quiet").on_compaction(fixed(result, calls)).compact_after(10_000)
    await quiet.append_messages([msg(f"m{i}") for i in range(4)])
    bare = ms.session("bare").on_compaction(fixed(result, calls))
    await bare.append_message(msg("m0"))
    assert calls == []
    # Over it (a 400-character read-only block alone is 100 tokens): compacted after the append
    loud = (
        ms.session("loud")
        .with_context("rules", provider=StaticContext("x" * 400))
        .on_compaction(fixed(result, calls))
        .compact_after(50)
    )
    await loud.append_message(msg("m0"))
    await loud.append_message(msg("m1"))
    await loud.append_message(msg("m2"))
    assert len(calls) == 3
    assert [(c["from_message_id"], c["to_message_id"]) for c in await loud.get_compactions()] == [
        ("m1", "m2")
    ]
    # And a repeated id (no new message) does not trigger it
    await loud.append_message(msg("m2"))
    assert len(calls) == 3


async def test_a_counter_that_gives_nan_never_compacts(ms: Memstream) -> None:
    calls: list[list[str]] = []
    seen: list[dict[str, Any]] = []

    def counter(parts: dict[str, Any]) -> float:
        seen.append(parts)
        return math.nan

    session = (
        ms.session("nan")
        .with_context("rules", provider=StaticContext("be brief"))
        .on_compaction(
            fixed({"from_message_id": "m0", "to_message_id": "m0", "summary": "s"}, calls)
        )
        .compact_after(1, token_counter=counter)
    )
    await session.append_message(msg("m0"))
    assert calls == []
    assert ids(seen[0]["messages"]) == ["m0"]
    assert "be brief" in seen[0]["system_prompt"]
    assert [b.label for b in seen[0]["context_blocks"]] == ["rules"]


async def test_the_reference_function_compacts_twice_into_one_overlay_and_replays(
    ms: Memstream, settings: Settings
) -> None:
    # Given a long conversation and the reference function with the offline summarizer
    summarize = ExtractiveSummarizer()
    prompts: list[str] = []

    async def recording(prompt: str) -> str:
        prompts.append(prompt)
        return await summarize(prompt)

    compact = create_compact_function(recording, protect_head=1, tail_token_budget=40)
    session = ms.session("long").on_compaction(compact)
    topics = ["Lisbon trams", "pastel de nata", "Sintra palaces", "fado houses", "Belem tower"]
    for i in range(20):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"Turn {i} talks about {topics[i % 5]} and what to do on day {i // 4 + 1}."
        await session.append_message(msg(f"m{i}", text, role))
    # When it is compacted, more is said, and it is compacted again
    first = await session.compact()
    assert first is not None
    assert first["from_message_id"] == "m1"
    for i in range(20, 30):
        await session.append_message(msg(f"m{i}", f"Turn {i} plans {topics[i % 5]}.", "user"))
    second = await session.compact()
    assert second is not None
    # Then the second grew the same overlay (same start), from a prompt with the first summary
    assert second["from_message_id"] == "m1"
    assert "PREVIOUS SUMMARY:\n" + first["summary"] in prompts[1]
    history = await session.get_history()
    overlays = [m for m in history if is_compaction_message(m)]
    assert len(overlays) == 1
    assert overlays[0]["parts"][0]["text"] == second["summary"]
    assert ids(history)[0] == "m0"
    assert ids(history)[-1] == "m29"
    # And the summaries are in the log: a rebuild from it gives the same read model, and
    # never calls the summarizer
    calls_before = len(prompts)
    results = await verify(ms.core.log, ms.core.reads.copy)
    assert all(r.ok for r in results), results
    assert len(prompts) == calls_before


async def test_a_compaction_on_a_sibling_branch_does_not_extend_the_other_branch(
    ms: Memstream,
) -> None:
    # Given m0 with two branches, a1..a3 and b1..b3, and an overlay a1..a2 on branch a
    session = ms.session("branches")
    await session.append_message(msg("m0"))
    await session.append_messages([msg("a1"), msg("a2"), msg("a3")], "m0")
    await session.append_messages([msg("b1"), msg("b2"), msg("b3")], "m0")
    await session.add_compaction("branch a", "a1", "a2")
    # When branch b is compacted at its leaf
    session.on_compaction(fixed({"from_message_id": "b1", "to_message_id": "b2", "summary": "b"}))
    result = await session.compact("b3")
    # Then its overlay starts on its own branch, and each branch reads its own summary
    assert result == {"from_message_id": "b1", "to_message_id": "b2", "summary": "b"}
    assert [m["parts"][0]["text"] for m in await session.get_history("b3")][1] == "b"
    assert [m["parts"][0]["text"] for m in await session.get_history("a3")][1] == "branch a"


async def test_estimates_never_store_a_prompt_and_reuse_a_frozen_one(ms: Memstream) -> None:
    calls: list[list[str]] = []
    result = {"from_message_id": "m0", "to_message_id": "m1", "summary": "s"}
    # Given a cached prompt that was never frozen, and a threshold the session stays under
    quiet = (
        ms.session("quiet-prompt")
        .with_context("rules", provider=StaticContext("x" * 400))
        .with_cached_prompt()
        .on_compaction(fixed(result, calls))
        .compact_after(10**6)
    )
    await quiet.append_message(msg("m0"))
    await quiet.append_message(msg("m1"))
    # Then estimating stored no prompt
    await ms.wait_for("context")
    assert ms.core.reads.context_queries.cached_prompt(ms.namespace, "quiet-prompt") is None
    # Given a frozen 400-character prompt whose block is then made short
    block = {"text": "y" * 400}

    class Mutable:
        def get(self) -> str:
            return block["text"]

    frozen = (
        ms.session("frozen-prompt")
        .with_context("rules", provider=Mutable())
        .on_compaction(fixed(result, calls))
        .compact_after(50)
    )
    await frozen.freeze_system_prompt()
    block["text"] = "short"
    # When two short messages are appended, Then the frozen prompt is what is counted
    await frozen.append_message(msg("m0"))
    await frozen.append_message(msg("m1"))
    assert calls, "the frozen 400-character prompt should have put the session over 50"


async def test_a_custom_counter_sees_the_history_prompt_and_blocks(ms: Memstream) -> None:
    seen: list[dict[str, Any]] = []

    def counter(parts: dict[str, Any]) -> int:
        seen.append(parts)
        return 11

    calls: list[list[str]] = []
    session = (
        ms.session("counted")
        .with_context("memory", description="Facts")
        .on_compaction(
            fixed({"from_message_id": "m0", "to_message_id": "m1", "summary": "s"}, calls)
        )
        .compact_after(10, token_counter=counter)
    )
    await session.replace_context_block("memory", "likes green tea")
    await session.append_message(msg("m0"))
    await session.append_message(msg("m1"))
    last = seen[-1]
    assert ids(last["messages"]) == ["m0", "m1"]
    assert "likes green tea" in last["system_prompt"]
    assert last["context_blocks"][0].label == "memory"
    assert len(calls) == 2  # 11 > 10 after each append
    assert len(await session.get_compactions()) >= 1


async def test_a_failing_store_of_the_overlay_reaches_the_handler_once(ms: Memstream) -> None:
    errors: list[BaseException] = []
    bad = {"from_message_id": "m0", "to_message_id": "m0", "summary": 12}  # not a string
    session = (
        ms.session("bad-result")
        .on_compaction(fixed(bad))
        .compact_after(0)
        .on_compaction_error(errors.append)
    )
    await session.append_message(msg("m0"))
    assert len(errors) == 1
    assert "summary" in str(errors[0])
    assert ids(await session.get_history()) == ["m0"]
    assert await session.get_compactions() == []


async def test_a_compaction_belongs_to_its_session(ms: Memstream) -> None:
    a, b = ms.session("scoped-a"), ms.session("scoped-b")
    for session in (a, b):
        await session.append_messages([msg("m0"), msg("m1"), msg("m2")])
    a.on_compaction(fixed({"from_message_id": "m0", "to_message_id": "m1", "summary": "s"}))
    assert await a.compact() is not None
    assert ids(await b.get_history()) == ["m0", "m1", "m2"]
    assert await b.get_compactions() == []
    assert len(await a.get_compactions()) == 1
