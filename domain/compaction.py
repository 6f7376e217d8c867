"""Compaction, decided purely: which middle of a history to summarise, and the prompt for it.

The reference algorithm (spec §8.5): protect ``protect_head`` messages at the start and a tail
bounded by a token budget at the end, never split an assistant tool call from its results, and
summarise the middle with a structured prompt that updates the previous summary when the history
already holds an overlay. :mod:`memstream.compaction` adds the summariser call (the only I/O).

Where the reference renders a tool part badly, the summary prompt improves on it (the templates
themselves are byte for byte): a part without ``toolName`` is named from its ``tool-<name>``
type, a part without ``output`` shows its ``result`` (spec §1.1 has both), and an object output
is shown as compact JSON instead of ``[object Object]`` (spec §13 item 13, as later reference
versions do).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from memstream.domain.messages import is_compaction_message
from memstream.domain.tokens import compact_json, estimate_message_tokens
from memstream.domain.tool_pairs import (
    as_text,
    call_ids,
    calls_tools,
    has_tool_calls,
    is_tool_result_for,
    parts_of,
    sanitize_tool_pairs,
    tool_name,
    tool_parts,
)
from memstream.domain.truncation import truncate_older_messages

__all__ = [
    "CompactionPlan",
    "SummaryRequest",
    "TailWalk",
    "align_boundary_backward",
    "align_boundary_forward",
    "build_summary_prompt",
    "call_ids",
    "compaction_start",
    "compute_summary_budget",
    "find_tail_cut",
    "has_tool_calls",
    "is_tool_result_for",
    "parse_summary_prompt",
    "plan_compaction",
    "render_message",
    "sanitize_tool_pairs",
    "text_of",
    "truncate_older_messages",
]

SUMMARY_BUDGET_MIN: Final = 100
SUMMARY_BUDGET_RATIO: Final = 0.2
TOOL_TEXT_MAX_CHARS: Final = 500
MESSAGE_SEPARATOR: Final = "\n\n---\n\n"

SECTIONS: Final = (
    "## Topic\n[What the conversation is about]\n\n"
    "## Key Points\n[Important information, decisions, and conclusions from the conversation]\n\n"
    "## Current State\n[Where things stand now — what has been done, what is in progress]\n\n"
    "## Open Items\n[Unresolved questions, pending tasks, or next steps discussed]"
)
SECTION_TITLES: Final = ("Topic", "Key Points", "Current State", "Open Items")
_TAIL: Final = (
    "Target ~{budget} tokens. Be factual — only include information that was explicitly "
    "discussed in the conversation. Do NOT invent file paths, commands, or details that were "
    "not mentioned. Write only the summary body."
)
_FIRST_HEAD: Final = (
    "Create a concise summary of this conversation that preserves the important information "
    "for future context.\n\nCONVERSATION TO SUMMARIZE:\n"
)
_FIRST_MIDDLE: Final = "\n\nUse this structure:\n\n"
_UPDATE_HEAD: Final = (
    "You are updating a conversation summary. A previous summary exists below. New "
    "conversation turns have occurred since then and need to be incorporated.\n\n"
    "PREVIOUS SUMMARY:\n"
)
_UPDATE_TURNS: Final = "\n\nNEW TURNS TO INCORPORATE:\n"
_UPDATE_MIDDLE: Final = (
    "\n\nUpdate the summary. PRESERVE existing information that is still relevant. ADD new "
    "information. Remove information only if it is clearly obsolete.\n\n"
)
_TAIL_RE: Final = re.compile(r"\n\nTarget ~(\d+) tokens\. Be factual — [^\n]*\Z")

TokenCount = Callable[[Mapping[str, Any]], float]


# ── boundaries ────────────────────────────────────────────────────────────────────────────────


def align_boundary_forward(messages: Sequence[Mapping[str, Any]], index: int) -> int:
    """Move a head/middle boundary past the results of a tool call that ends the head.

    If ``messages[index - 1]`` is an assistant message with tool calls, ``index`` advances while
    ``messages[index]`` is a result for one of those calls. Out-of-range indexes come back as is.
    """
    if not 0 < index < len(messages):
        return index
    previous = messages[index - 1]
    if calls_tools(previous):
        ids = call_ids(previous)
        while index < len(messages) and is_tool_result_for(messages[index], ids):
            index += 1
    return index


def align_boundary_backward(messages: Sequence[Mapping[str, Any]], index: int) -> int:
    """Move a middle/tail boundary back so the tail never starts on an orphaned tool result.

    Steps back while ``messages[index]`` is a result of the assistant tool call just before it;
    stops on an assistant message with tool calls. Out-of-range indexes come back as is.
    """
    if not 0 < index < len(messages):
        return index
    while index > 0:
        message = messages[index]
        if calls_tools(message):
            break
        previous = messages[index - 1]
        if calls_tools(previous) and is_tool_result_for(message, call_ids(previous)):
            index -= 1
            continue
        break
    return index


def _heuristic_count(message: Mapping[str, Any]) -> float:
    return estimate_message_tokens([message])


class TailWalk:
    """Step 4 of spec §8.5: walk back from the last message, keeping a tail within a budget.

    Fed one count at a time (:meth:`take`), so a caller may count with an async counter; the
    walk itself decides. The last message is always kept; then messages are kept while the tail
    stays within ``tail_token_budget``; :meth:`end` widens the tail to ``min_tail_messages`` and
    aligns it to tool groups.
    """

    def __init__(
        self,
        messages: Sequence[Mapping[str, Any]],
        start: int,
        tail_token_budget: float,
        min_tail_messages: int,
    ) -> None:
        self._messages = messages
        self._start = start
        self._budget = tail_token_budget
        self._min_tail = min_tail_messages
        self._accumulated = 0.0
        self._cut = len(messages)

    def indices(self) -> range:
        """The indexes to count, last first (stop at the first :meth:`take` that says so)."""
        return range(len(self._messages) - 1, max(self._start, 0) - 1, -1)

    def take(self, tokens: float) -> bool:
        """Offer the next message's count; False when it does not fit (the walk is over)."""
        if self._accumulated + tokens > self._budget and self._cut < len(self._messages):
            return False
        self._accumulated += tokens
        self._cut -= 1
        return True

    def end(self) -> int:
        """Where the protected tail starts: the end of the middle to summarise."""
        min_cut = len(self._messages) - self._min_tail
        cut = min(self._cut, min_cut) if min_cut >= self._start else self._cut
        return align_boundary_backward(self._messages, cut)


def find_tail_cut(
    messages: Sequence[Mapping[str, Any]],
    start: int,
    tail_token_budget: float = 20000,
    min_tail_messages: int = 2,
    count: TokenCount | None = None,
) -> int:
    """Where the protected tail starts (spec §8.5 step 4), counting with a sync ``count``.

    Args:
        messages: the history (overlays applied).
        start: where the middle starts (after the protected head).
        tail_token_budget: tokens the tail may hold (the last message is kept regardless).
        min_tail_messages: the tail keeps at least this many messages when the middle allows.
        count: tokens of one message; the heuristic of spec §5.2 when ``None``.
    """
    walk = TailWalk(messages, start, tail_token_budget, min_tail_messages)
    counter = count or _heuristic_count
    for index in walk.indices():
        if not walk.take(counter(messages[index])):
            break
    return walk.end()


# ── the middle and its prompt ─────────────────────────────────────────────────────────────────


def compute_summary_budget(messages: Sequence[Mapping[str, Any]]) -> int:
    """Tokens to ask the summary for: 20% of what it replaces, at least 100."""
    tokens = estimate_message_tokens(messages)
    return max(SUMMARY_BUDGET_MIN, math.floor(tokens * SUMMARY_BUDGET_RATIO))


def text_of(message: Mapping[str, Any]) -> str:
    """The ``text`` of the message's text parts, joined by newlines."""
    return "\n".join(
        as_text(part.get("text")) for part in parts_of(message) if part.get("type") == "text"
    )


def _js_truthy(value: object) -> bool:
    """JavaScript truthiness: empty objects and arrays are true, ``0``, ``""``, NaN false."""
    if value is None or value is False:
        return False
    if isinstance(value, int | float):
        return value == value and value != 0  # NaN is the one value not equal to itself
    if isinstance(value, str):
        return value != ""
    return True


def _tool_lines(part: Mapping[str, Any]) -> str:
    lines = [f"[Tool: {tool_name(part)}]"]
    tool_input = part.get("input")
    if _js_truthy(tool_input):
        lines.append(f"Input: {compact_json(tool_input)[:TOOL_TEXT_MAX_CHARS]}")
    output = part["output"] if part.get("output") is not None else part.get("result")
    if _js_truthy(output):
        shown = output if isinstance(output, str) else compact_json(output)
        lines.append(f"Output: {shown[:TOOL_TEXT_MAX_CHARS]}")
    return "\n".join(lines)


def render_message(message: Mapping[str, Any]) -> str:
    """One message as the summary prompt shows it: ``[role]``, its text, then its tool parts."""
    tools = "\n".join(_tool_lines(part) for part in tool_parts(message))
    rendered = f"[{as_text(message.get('role'))}]\n{text_of(message)}"
    return f"{rendered}\n{tools}" if tools else rendered


def build_summary_prompt(
    messages: Sequence[Mapping[str, Any]], previous_summary: str | None, budget: int
) -> str:
    """The prompt asking a model to summarise ``messages`` in about ``budget`` tokens.

    With a non-empty ``previous_summary`` it asks to update that summary with the new turns;
    both templates are the reference's, byte for byte.
    """
    content = MESSAGE_SEPARATOR.join(render_message(message) for message in messages)
    tail = _TAIL.format(budget=budget)
    if previous_summary:
        return (
            f"{_UPDATE_HEAD}{previous_summary}{_UPDATE_TURNS}{content}"
            f"{_UPDATE_MIDDLE}{SECTIONS}\n\n{tail}"
        )
    return f"{_FIRST_HEAD}{content}{_FIRST_MIDDLE}{SECTIONS}\n\n{tail}"


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """What a summary prompt asks for, read back out of it (for a summariser without a model)."""

    conversation: str
    previous_summary: str | None
    budget: int | None


def parse_summary_prompt(prompt: str) -> SummaryRequest:
    """Read :func:`build_summary_prompt` output back; any other text is all conversation."""
    match = _TAIL_RE.search(prompt)
    if match is None:
        return SummaryRequest(prompt, None, None)
    budget = int(match.group(1))
    body = prompt[: match.start()]
    if body.startswith(_FIRST_HEAD) and body.endswith(_FIRST_MIDDLE + SECTIONS):
        conversation = body[len(_FIRST_HEAD) : -len(_FIRST_MIDDLE + SECTIONS)]
        return SummaryRequest(conversation, None, budget)
    if body.startswith(_UPDATE_HEAD) and body.endswith(_UPDATE_MIDDLE + SECTIONS):
        inner = body[len(_UPDATE_HEAD) : -len(_UPDATE_MIDDLE + SECTIONS)]
        # the summary is ours or a model's; the turns are rendered by us, so split at the last
        previous, _, conversation = inner.rpartition(_UPDATE_TURNS)
        return SummaryRequest(conversation, previous, budget)
    return SummaryRequest(prompt, None, budget)


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """The middle of a history to summarise, with the prompt that asks for its summary."""

    middle: tuple[Mapping[str, Any], ...]
    previous_summary: str | None
    budget: int

    @property
    def from_message_id(self) -> str:
        return str(self.middle[0]["id"])

    @property
    def to_message_id(self) -> str:
        return str(self.middle[-1]["id"])

    @property
    def prompt(self) -> str:
        return build_summary_prompt(self.middle, self.previous_summary, self.budget)


def compaction_start(messages: Sequence[Mapping[str, Any]], protect_head: int) -> int:
    """Where the middle starts: after ``protect_head`` messages and their tool results."""
    return align_boundary_forward(messages, protect_head)


def plan_compaction(
    messages: Sequence[Mapping[str, Any]], start: int, end: int
) -> CompactionPlan | None:
    """Steps 5–8 of spec §8.5: the middle ``messages[start:end]`` without overlay messages,
    the previous summary (the text of the first overlay message anywhere in ``messages``) and
    the summary budget; ``None`` when there is nothing to summarise."""
    if end <= start:
        return None
    middle = tuple(m for m in messages[start:end] if not is_compaction_message(m))
    if not middle:
        return None
    overlay = next((m for m in messages if is_compaction_message(m)), None)
    previous = text_of(overlay) if overlay is not None else None
    return CompactionPlan(middle, previous, compute_summary_budget(middle))
