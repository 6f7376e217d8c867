"""The compaction function and its helpers (spec §8.5, test inventory §12.7)."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memstream
from memstream.domain.compaction import (
    align_boundary_backward,
    align_boundary_forward,
    build_summary_prompt,
    call_ids,
    compute_summary_budget,
    find_tail_cut,
    has_tool_calls,
    is_tool_result_for,
    parse_summary_prompt,
    sanitize_tool_pairs,
    truncate_older_messages,
)
from memstream.domain.errors import InvalidInputError
from memstream.domain.tokens import estimate_message_tokens
from memstream.domain.tool_pairs import STUB_RESULT

Message = dict[str, Any]


def text(id: str, body: str, role: str = "user") -> Message:
    return {"id": id, "role": role, "parts": [{"type": "text", "text": body}]}


def chat(count: int, prefix: str = "m", words: int = 8) -> list[Message]:
    """``count`` alternating user/assistant messages of ``words`` words each."""
    return [
        text(f"{prefix}{i}", " ".join(["word"] * words), "user" if i % 2 == 0 else "assistant")
        for i in range(count)
    ]


def call(id: str, call_id: str, name: str = "search", **fields: Any) -> Message:
    part = {"type": f"tool-{name}", "toolCallId": call_id, "toolName": name, "input": {"q": "x"}}
    return {"id": id, "role": "assistant", "parts": [{**part, **fields}]}


def result(id: str, call_id: str, output: object = "found it") -> Message:
    part = {"type": "tool-result", "toolCallId": call_id, "output": output}
    return {"id": id, "role": "tool", "parts": [part]}


class Recorder:
    """A summarize that records its prompts and answers with a fixed summary."""

    def __init__(self, answer: str = "SUMMARY") -> None:
        self.prompts: list[str] = []
        self.answer = answer

    async def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.answer


# ── the compaction function: MUSTs of §8.5 ───────────────────────────────────────────────────


async def test_twenty_messages_with_a_tiny_tail_budget_compact_the_middle() -> None:
    # Given 20 messages, head 1, min tail 2 and a 10-token tail budget
    summarize = Recorder()
    compact = memstream.create_compact_function(
        summarize=summarize, protect_head=1, tail_token_budget=10, min_tail_messages=2
    )
    # When compacted
    outcome = await compact(chat(20))
    # Then the middle m1..m17 is summarised once
    assert outcome is not None
    assert outcome["from_message_id"].startswith("m")
    assert outcome["to_message_id"].startswith("m")
    assert (outcome["from_message_id"], outcome["to_message_id"]) == ("m1", "m17")
    assert outcome["summary"] == "SUMMARY"
    assert len(summarize.prompts) == 1


def tool_heavy() -> list[Message]:
    """Tool messages the heuristic counts at 4 tokens each (their payload sits in a field it
    does not read), though each is some 2,000 characters of JSON."""
    payload = "x" * 2000
    tools = [
        {
            "id": f"tool-{i}",
            "role": "assistant",
            "parts": [{"type": "tool-invocation", "toolInvocation": {"result": payload}}],
        }
        for i in range(10)
    ]
    return [text("m0", "Please run the tools."), *tools, text("m11", "Done?")]


async def test_tool_heavy_history_within_the_heuristic_budget_is_not_compacted() -> None:
    summarize = Recorder()
    compact = memstream.create_compact_function(
        summarize=summarize, protect_head=1, tail_token_budget=1000
    )
    assert await compact(tool_heavy()) is None
    assert summarize.prompts == []


async def test_a_per_message_token_counter_sees_the_tool_payloads() -> None:
    # Given a counter of JSON length per message list
    summarize = Recorder()
    compact = memstream.create_compact_function(
        summarize=summarize,
        protect_head=1,
        tail_token_budget=1000,
        token_counter=lambda messages: len(json.dumps(messages)),
    )
    # When the tool-heavy history is compacted
    outcome = await compact(tool_heavy())
    # Then it starts at the first tool message (the tail keeps the minimum two) and
    # summarize ran once
    assert outcome is not None
    assert outcome["from_message_id"] == "tool-0"
    assert outcome["to_message_id"] == "tool-8"
    assert len(summarize.prompts) == 1


async def test_the_session_counter_from_the_context_drives_the_tail() -> None:
    # Given 12 messages of ~40 heuristic tokens and a tail budget of 1000
    summarize = Recorder()
    compact = memstream.create_compact_function(
        summarize=summarize, protect_head=1, tail_token_budget=1000
    )
    messages = chat(12, words=28)
    seen: list[dict[str, Any]] = []

    def session_counter(request: dict[str, Any]) -> float:
        seen.append(request)
        return estimate_message_tokens(request["messages"]) * 5

    # Then without a context the heuristic keeps everything in the tail
    assert await compact(messages) is None
    # And with the session's counter (×5) the middle is compacted
    outcome = await compact(messages, {"token_counter": session_counter})
    assert outcome is not None
    assert outcome["from_message_id"] == "m1"
    assert len(summarize.prompts) == 1
    # And the counter was asked per message, with an empty prompt and no blocks
    assert seen[0] == {"messages": [messages[-1]], "system_prompt": "", "context_blocks": []}


async def test_a_context_object_with_an_async_counter_works_too() -> None:
    class Context:
        async def token_counter(self, request: dict[str, Any]) -> float:
            return 400.0

    compact = memstream.create_compact_function(
        summarize=Recorder(), protect_head=1, tail_token_budget=1000
    )
    outcome = await compact(chat(12), Context())
    assert outcome is not None
    assert (outcome["from_message_id"], outcome["to_message_id"]) == ("m1", "m9")


async def test_six_messages_with_head_two_and_tail_four_are_not_compacted() -> None:
    summarize = Recorder()
    compact = memstream.create_compact_function(
        summarize=summarize, protect_head=2, tail_token_budget=0, min_tail_messages=4
    )
    assert await compact(chat(6)) is None
    assert summarize.prompts == []


async def test_a_short_chat_never_compacts_with_the_default_budget() -> None:
    summarize = Recorder()
    assert await memstream.create_compact_function(summarize=summarize)(chat(30)) is None
    assert summarize.prompts == []


@pytest.mark.parametrize("blank", ["", "   ", "\n\t\n"])
async def test_a_blank_summary_means_no_compaction(blank: str) -> None:
    compact = memstream.create_compact_function(
        summarize=Recorder(blank), protect_head=1, tail_token_budget=10
    )
    assert await compact(chat(20)) is None


async def test_summarize_may_be_sync() -> None:
    prompts: list[str] = []

    def summarize(prompt: str) -> str:
        prompts.append(prompt)
        return "sync summary"

    compact = memstream.create_compact_function(
        summarize=summarize, protect_head=1, tail_token_budget=10
    )
    outcome = await compact(chat(20))
    assert outcome == {"from_message_id": "m1", "to_message_id": "m17", "summary": "sync summary"}
    assert len(prompts) == 1


async def test_summarize_returning_a_non_string_is_an_error() -> None:
    async def summarize(prompt: str) -> Any:
        return 42

    compact = memstream.create_compact_function(
        summarize=summarize, protect_head=1, tail_token_budget=10
    )
    with pytest.raises(InvalidInputError, match="summarize returned int"):
        await compact(chat(20))


async def test_an_error_in_summarize_reaches_the_caller() -> None:
    # Part A §8: the session hands it to on_compaction_error, so it must not be swallowed here
    async def summarize(prompt: str) -> str:
        raise memstream.UnavailableError("model down")

    compact = memstream.create_compact_function(
        summarize=summarize, protect_head=1, tail_token_budget=10
    )
    with pytest.raises(memstream.UnavailableError, match="model down"):
        await compact(chat(20))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"summarize": "nope"}, "summarize must be callable"),
        ({"protect_head": -1}, "protect_head is -1"),
        ({"protect_head": 1.5}, "protect_head must be an integer"),
        ({"min_tail_messages": True}, "min_tail_messages must be an integer"),
        ({"tail_token_budget": "big"}, "tail_token_budget must be a number"),
        ({"tail_token_budget": -5}, "tail_token_budget is -5"),
        ({"token_counter": 3}, "token_counter must be callable"),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        memstream.create_compact_function(**{"summarize": Recorder(), **options})


async def test_a_counter_returning_nan_counts_nothing() -> None:
    compact = memstream.create_compact_function(
        summarize=Recorder(), protect_head=1, token_counter=lambda m: float("nan")
    )
    assert await compact(chat(20)) is None


async def test_a_counter_returning_text_is_an_error() -> None:
    compact = memstream.create_compact_function(
        summarize=Recorder(),
        protect_head=1,
        token_counter=lambda m: "12",  # type: ignore[arg-type,return-value]
    )
    with pytest.raises(InvalidInputError, match="token_counter returned str"):
        await compact(chat(20))


# ── iterative compaction: the previous summary ───────────────────────────────────────────────


def overlay(id: str, summary: str) -> Message:
    return {
        "id": f"compaction_{id}",
        "role": "assistant",
        "parts": [{"type": "text", "text": summary}],
    }


async def test_an_existing_overlay_makes_the_prompt_an_update() -> None:
    # Given a history whose m1..m5 are already an overlay at index 1 (= protect_head)
    summarize = Recorder("grown")
    compact = memstream.create_compact_function(
        summarize=summarize, protect_head=1, tail_token_budget=10
    )
    history = [text("m0", "hello"), overlay("a", "Earlier: the user likes tea."), *chat(10, "n")]
    # When compacted again
    outcome = await compact(history)
    # Then the overlay message is left out of the range and its text is the previous summary
    assert outcome == {"from_message_id": "n0", "to_message_id": "n7", "summary": "grown"}
    prompt = summarize.prompts[0]
    assert prompt.startswith("You are updating a conversation summary.")
    assert (
        "PREVIOUS SUMMARY:\nEarlier: the user likes tea.\n\nNEW TURNS TO INCORPORATE:\n" in prompt
    )
    assert "compaction_a" not in prompt


async def test_the_previous_summary_is_the_first_overlay_anywhere() -> None:
    summarize = Recorder()
    compact = memstream.create_compact_function(
        summarize=summarize, protect_head=3, tail_token_budget=10
    )
    history = [
        text("m0", "hello"),
        {
            **overlay("first", "First summary"),
            "parts": [
                {"type": "text", "text": "First"},
                {"type": "reasoning", "text": "hidden"},
                {"type": "text", "text": "summary"},
            ],
        },
        *chat(6, "n"),
        overlay("second", "Second summary"),
        *chat(6, "k"),
    ]
    await compact(history)
    assert "PREVIOUS SUMMARY:\nFirst\nsummary\n\nNEW TURNS" in summarize.prompts[0]
    assert "Second summary" not in summarize.prompts[0]


async def test_a_middle_of_only_overlays_is_not_compacted() -> None:
    summarize = Recorder()
    compact = memstream.create_compact_function(
        summarize=summarize, protect_head=1, tail_token_budget=0, min_tail_messages=1
    )
    assert await compact([text("m0", "a"), overlay("x", "s"), text("m2", "b")]) is None
    assert summarize.prompts == []


# ── the prompt, byte for byte ────────────────────────────────────────────────────────────────

PROMPT_MESSAGES: list[Message] = [
    {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Find the report."}]},
    {
        "id": "m2",
        "role": "assistant",
        "parts": [
            {"type": "text", "text": "Searching."},
            {"type": "reasoning", "text": "not shown"},
            {
                "type": "tool-search",
                "toolCallId": "c1",
                "toolName": "search",
                "input": {"q": "report"},
                "output": "report.pdf",
            },
        ],
    },
]
CONTENT = (
    "[user]\nFind the report.\n\n---\n\n"
    '[assistant]\nSearching.\n[Tool: search]\nInput: {"q":"report"}\nOutput: report.pdf'
)
SECTIONS_TEXT = (
    "## Topic\n"
    "[What the conversation is about]\n"
    "\n"
    "## Key Points\n"
    "[Important information, decisions, and conclusions from the conversation]\n"
    "\n"
    "## Current State\n"
    "[Where things stand now — what has been done, what is in progress]\n"
    "\n"
    "## Open Items\n"
    "[Unresolved questions, pending tasks, or next steps discussed]"
)
TAIL_TEXT = (
    "Target ~150 tokens. Be factual — only include information that was explicitly discussed "
    "in the conversation. Do NOT invent file paths, commands, or details that were not "
    "mentioned. Write only the summary body."
)


def test_the_first_summary_prompt_is_the_reference_template() -> None:
    expected = (
        "Create a concise summary of this conversation that preserves the important "
        "information for future context.\n"
        "\n"
        "CONVERSATION TO SUMMARIZE:\n" + CONTENT + "\n"
        "\n"
        "Use this structure:\n"
        "\n" + SECTIONS_TEXT + "\n\n" + TAIL_TEXT
    )
    assert build_summary_prompt(PROMPT_MESSAGES, None, 150) == expected
    assert build_summary_prompt(PROMPT_MESSAGES, "", 150) == expected


def test_the_update_prompt_is_the_reference_template() -> None:
    expected = (
        "You are updating a conversation summary. A previous summary exists below. New "
        "conversation turns have occurred since then and need to be incorporated.\n"
        "\n"
        "PREVIOUS SUMMARY:\n"
        "## Topic\nReports\n"
        "\n"
        "NEW TURNS TO INCORPORATE:\n" + CONTENT + "\n"
        "\n"
        "Update the summary. PRESERVE existing information that is still relevant. ADD new "
        "information. Remove information only if it is clearly obsolete.\n"
        "\n" + SECTIONS_TEXT + "\n\n" + TAIL_TEXT
    )
    assert build_summary_prompt(PROMPT_MESSAGES, "## Topic\nReports", 150) == expected


def test_tool_parts_in_the_prompt() -> None:
    # Given tool parts without a name, with falsy and long and structured values
    message = {
        "id": "m",
        "role": "assistant",
        "parts": [
            {"type": "tool-lookup", "toolCallId": "a", "input": {}, "output": {"n": 1}},
            {"type": "dynamic-tool", "toolCallId": "b", "input": 0, "output": ""},
            {"type": "tool-x", "toolName": "fetch", "input": "y" * 600, "result": "z" * 600},
        ],
    }
    prompt = build_summary_prompt([message], None, 100)
    # Then an empty object input shows (JS truthiness), falsy values do not, the name comes
    # from the type, object outputs are JSON, a result shows as the output, long ones cut at 500
    assert '[assistant]\n\n[Tool: lookup]\nInput: {}\nOutput: {"n":1}\n' in prompt
    assert "[Tool: unknown]\n[Tool: fetch]\n" in prompt
    assert f'Input: "{"y" * 499}\nOutput: {"z" * 500}\n' in prompt


def test_a_prompt_reads_back_into_its_parts() -> None:
    first = parse_summary_prompt(build_summary_prompt(PROMPT_MESSAGES, None, 150))
    assert (first.conversation, first.previous_summary, first.budget) == (CONTENT, None, 150)
    update = parse_summary_prompt(build_summary_prompt(PROMPT_MESSAGES, "old", 321))
    assert (update.conversation, update.previous_summary, update.budget) == (CONTENT, "old", 321)
    other = parse_summary_prompt("Summarise: hello")
    assert (other.conversation, other.previous_summary, other.budget) == (
        "Summarise: hello",
        None,
        None,
    )


def test_the_summary_budget_is_a_fifth_and_at_least_100() -> None:
    assert compute_summary_budget([]) == 100
    assert compute_summary_budget(chat(3)) == 100
    long = [text("m", "x" * 4000)]  # 1000 + 4 tokens
    assert compute_summary_budget(long) == 200


# ── boundaries ───────────────────────────────────────────────────────────────────────────────


def test_tool_part_helpers() -> None:
    message = call("a", "c1")
    assert has_tool_calls(message)
    assert call_ids(message) == {"c1"}
    assert is_tool_result_for(result("r", "c1"), {"c1"})
    assert not is_tool_result_for(result("r", "c2"), {"c1"})
    assert not has_tool_calls(text("t", "hi"))
    assert call_ids({"id": "d", "role": "assistant", "parts": [{"type": "dynamic-tool"}]}) == set()
    assert has_tool_calls({"id": "d", "role": "assistant", "parts": [{"type": "dynamic-tool"}]})


def test_align_forward_moves_past_the_results_of_a_call_ending_the_head() -> None:
    messages = [
        text("u", "go"),
        call("a", "c1"),
        result("r1", "c1"),
        result("r2", "c1"),
        text("v", "ok"),
    ]
    assert align_boundary_forward(messages, 2) == 4
    assert align_boundary_forward(messages, 1) == 1  # the message before is no call
    assert align_boundary_forward(messages, 4) == 4
    assert align_boundary_forward(messages, 0) == 0
    assert align_boundary_forward(messages, 5) == 5


def test_align_forward_ignores_a_user_message_with_tool_parts_before() -> None:
    user_call = {**call("a", "c1"), "role": "user"}
    messages = [user_call, result("r1", "c1"), text("v", "ok")]
    assert align_boundary_forward(messages, 1) == 1


def test_align_backward_keeps_a_result_with_its_call() -> None:
    messages = [text("u", "go"), call("a", "c1"), result("r1", "c1"), text("v", "ok")]
    assert align_boundary_backward(messages, 2) == 1
    assert align_boundary_backward(messages, 1) == 1  # a call starts the tail: fine
    assert align_boundary_backward(messages, 3) == 3
    assert align_boundary_backward(messages, 0) == 0
    assert align_boundary_backward(messages, 4) == 4
    # a result of another call does not move it
    assert align_boundary_backward([*messages[:2], result("r9", "c9")], 2) == 2


def test_tail_cut_keeps_the_last_message_however_large() -> None:
    messages = [*chat(4), text("big", "x" * 4000)]
    assert find_tail_cut(messages, 1, tail_token_budget=10, min_tail_messages=0) == 4


def test_tail_cut_widens_to_the_minimum_tail_and_aligns() -> None:
    messages = [*chat(4), call("a", "c1"), result("r", "c1"), text("z", "end")]
    # budget 0: only the last message by tokens; min tail 2 starts the tail at the result,
    # which moves back to its call
    assert find_tail_cut(messages, 1, tail_token_budget=0, min_tail_messages=2) == 4
    # a minimum tail reaching into the head is not applied
    assert find_tail_cut(messages, 5, tail_token_budget=0, min_tail_messages=4) == 6


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Text messages and tool call/result pairs, in any order."""
    messages: list[Message] = []
    for index, kind in enumerate(draw(st.lists(st.sampled_from("uatp"), max_size=30))):
        words = draw(st.integers(min_value=1, max_value=40))
        if kind == "p":
            messages += [call(f"call{index}", f"c{index}"), result(f"res{index}", f"c{index}")]
        elif kind == "t":
            messages.append(call(f"call{index}", f"c{index}"))  # a call with no result
        else:
            role = "user" if kind == "u" else "assistant"
            messages.append(text(f"m{index}", " ".join(["w"] * words), role))
    return messages


def splits_a_pair(messages: Sequence[Message], boundary: int) -> bool:
    if not 0 < boundary < len(messages):
        return False
    before, after = messages[boundary - 1], messages[boundary]
    return before["role"] == "assistant" and is_tool_result_for(after, call_ids(before))


@settings(max_examples=150, deadline=None)
@given(
    messages=histories(),
    protect_head=st.integers(0, 4),
    min_tail=st.integers(0, 3),
    budget=st.integers(0, 300),
)
async def test_the_range_is_inside_the_middle_and_never_splits_a_pair(
    messages: list[Message], protect_head: int, min_tail: int, budget: int
) -> None:
    summarize = Recorder()
    compact = memstream.create_compact_function(
        summarize=summarize,
        protect_head=protect_head,
        tail_token_budget=budget,
        min_tail_messages=min_tail,
    )
    outcome = await compact(messages)
    if outcome is None:
        return
    ids = [m["id"] for m in messages]
    first, last = ids.index(outcome["from_message_id"]), ids.index(outcome["to_message_id"])
    assert protect_head <= first <= last < len(messages) - 1
    assert len(messages) - 1 - last >= min(min_tail, len(messages) - first)
    assert not splits_a_pair(messages, first)
    assert not splits_a_pair(messages, last + 1)
    assert len(summarize.prompts) == 1


# ── sanitize_tool_pairs ──────────────────────────────────────────────────────────────────────


def test_sanitize_removes_results_whose_call_is_gone() -> None:
    messages = [text("u", "hi"), result("r1", "gone"), text("v", "ok")]
    frozen = copy.deepcopy(messages)
    assert [m["id"] for m in sanitize_tool_pairs(messages)] == ["u", "v"]
    assert messages == frozen


def test_sanitize_keeps_other_parts_of_a_message_with_an_orphan_result() -> None:
    mixed = {
        "id": "r",
        "role": "tool",
        "parts": [{"type": "text", "text": "note"}, result("x", "gone")["parts"][0]],
    }
    assert sanitize_tool_pairs([mixed]) == [
        {"id": "r", "role": "tool", "parts": [{"type": "text", "text": "note"}]}
    ]


def test_sanitize_adds_a_stub_after_a_call_without_result() -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    messages = [call("a", "c1", name="weather"), text("v", "ok")]
    repaired = sanitize_tool_pairs(messages, now=now)
    assert [m["id"] for m in repaired] == ["a", "stub-c1", "v"]
    assert repaired[1] == {
        "id": "stub-c1",
        "role": "assistant",
        "parts": [
            {
                "type": "tool-result",
                "toolCallId": "c1",
                "toolName": "weather",
                "result": STUB_RESULT,
            }
        ],
        "created_at": "2026-01-02T03:04:05+00:00",
    }
    # And a second pass finds nothing to do
    assert sanitize_tool_pairs(repaired, now=now) == repaired


def test_sanitize_leaves_complete_pairs_and_same_part_results_alone() -> None:
    same_part = call("a", "c1", output="done")
    messages = [same_part, call("b", "c2"), result("r2", "c2")]
    assert sanitize_tool_pairs(messages) == messages


@settings(max_examples=100, deadline=None)
@given(histories())
def test_sanitize_never_modifies_its_input_and_is_idempotent(messages: list[Message]) -> None:
    from datetime import UTC, datetime

    now = datetime(2026, 1, 1, tzinfo=UTC)
    frozen = copy.deepcopy(messages)
    once = sanitize_tool_pairs(messages, now=now)
    assert messages == frozen
    assert sanitize_tool_pairs(once, now=now) == once


# ── truncate_older_messages (§12.7) ──────────────────────────────────────────────────────────


def tool_message(id: str, output: object) -> Message:
    return {
        "id": id,
        "role": "assistant",
        "parts": [
            {
                "type": "tool-read",
                "toolCallId": f"tc-{id}",
                "toolName": "read",
                "state": "output-available",
                "input": {},
                "output": output,
            }
        ],
    }


def first_output(message: Message) -> Any:
    return message["parts"][0]["output"]


def test_older_object_outputs_keep_their_shape() -> None:
    output = {"path": "/old.txt", "content": "x" * 1000, "totalLines": 1}
    messages = [tool_message("old", output), text("r1", "recent one"), text("r2", "recent two")]
    truncated = truncate_older_messages(messages, keep_recent=2, max_tool_output_chars=100)
    shortened = first_output(truncated[0])
    assert isinstance(shortened, dict)
    assert set(shortened) >= {"path", "content", "totalLines"}
    assert shortened["path"] == "/old.txt"
    assert "[truncated" in shortened["content"]
    assert len(shortened["content"]) < 1000
    assert len(json.dumps(shortened, separators=(",", ":"))) <= 100


def test_nested_arrays_collapse_to_a_marker() -> None:
    output = {key: list(range(1000)) for key in "abcdefg"}
    messages = [tool_message("old", output), text("r1", "recent one"), text("r2", "recent two")]
    truncated = truncate_older_messages(messages, keep_recent=2, max_tool_output_chars=500)
    shortened = first_output(truncated[0])
    assert len(shortened["a"]) == 1
    assert shortened["a"][0] != ""
    assert shortened["a"][0]["__truncated"] is True
    assert isinstance(shortened["a"][0]["__truncatedChars"], int)


def test_recent_outputs_are_the_same_object() -> None:
    recent = {"path": "/recent.txt", "content": "y" * 1000, "totalLines": 1}
    messages = [text("o1", "old"), text("o2", "old"), tool_message("recent", recent)]
    truncated = truncate_older_messages(messages, keep_recent=2, max_tool_output_chars=100)
    assert first_output(truncated[2]) is recent


def test_string_outputs_stay_strings() -> None:
    messages = [tool_message("old", "z" * 1000), text("r1", "recent one"), text("r2", "recent two")]
    truncated = truncate_older_messages(messages, keep_recent=2, max_tool_output_chars=100)
    output = first_output(truncated[0])
    assert isinstance(output, str)
    assert "[truncated" in output
    assert len(output) <= 100


def test_long_older_texts_are_cut_with_their_length() -> None:
    messages = [text("old", "a" * 50), text("new", "b" * 50)]
    truncated = truncate_older_messages(messages, keep_recent=1, max_text_chars=10)
    assert truncated[0]["parts"][0]["text"] == "a" * 10 + "... [truncated 50 chars]"
    assert truncated[1] == messages[1]


def test_short_outputs_and_texts_are_left_alone() -> None:
    messages = [tool_message("old", {"ok": True}), text("t", "short"), *chat(4)]
    assert truncate_older_messages(messages) == messages


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=300),
    lambda children: (
        st.lists(children, max_size=8) | st.dictionaries(st.text(max_size=5), children, max_size=8)
    ),
    max_leaves=60,
)


@settings(max_examples=100, deadline=None)
@given(
    outputs=st.lists(json_values, min_size=1, max_size=6),
    keep_recent=st.integers(0, 3),
    limit=st.integers(0, 400),
)
def test_truncate_never_modifies_its_input(
    outputs: list[Any], keep_recent: int, limit: int
) -> None:
    messages = [tool_message(f"t{i}", output) for i, output in enumerate(outputs)]
    messages.append(text("long", "q" * 500))
    frozen = copy.deepcopy(messages)
    truncated = truncate_older_messages(
        messages, keep_recent=keep_recent, max_tool_output_chars=limit, max_text_chars=limit
    )
    assert messages == frozen
    assert len(truncated) == len(messages)
    assert [m["id"] for m in truncated] == [m["id"] for m in messages]
