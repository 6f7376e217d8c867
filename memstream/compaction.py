"""The reference compaction function: summarise the middle of a history, keep head and tail.

``create_compact_function(summarize=...)`` returns the function a session calls with its history
(``Session.on_compaction``). It decides the range with :mod:`memstream.domain.compaction` and
asks ``summarize`` (sync or async, a model or :class:`memstream.ExtractiveSummarizer`) for the
summary; the session stores it as an overlay (spec §8.2), so a second compaction of a branch
grows that one overlay.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypedDict

from memstream.domain.compaction import TailWalk, compaction_start, plan_compaction
from memstream.domain.errors import InvalidInputError
from memstream.domain.limits import check_int
from memstream.domain.tokens import estimate_message_tokens

Summarize = Callable[[str], "str | Awaitable[str]"]
"""``summarize(prompt) -> str``, sync or async."""

MessageTokenCounter = Callable[[list[dict[str, Any]]], "float | Awaitable[float]"]
"""``token_counter(messages) -> tokens``: the compact function calls it with one message."""

SessionTokenCounter = Callable[[dict[str, Any]], "float | Awaitable[float]"]
"""A session's whole-prompt counter: ``token_counter({"messages", "system_prompt",
"context_blocks"}) -> tokens`` (spec §5.3)."""


class CompactResult(TypedDict):
    """The overlay a compaction function asks the session to store."""

    from_message_id: str
    to_message_id: str
    summary: str


class CompactContext(TypedDict, total=False):
    """What a session passes to its compaction function (an object with the same attribute
    works too)."""

    token_counter: SessionTokenCounter


class CompactFunction(Protocol):
    """``await fn(messages, context=None)`` → the overlay to store, or ``None``."""

    async def __call__(
        self, messages: Sequence[Mapping[str, Any]], context: object = None
    ) -> CompactResult | None: ...


def create_compact_function(
    summarize: Summarize,
    protect_head: int = 3,
    tail_token_budget: float = 20000,
    min_tail_messages: int = 2,
    token_counter: MessageTokenCounter | None = None,
) -> CompactFunction:
    """Build the reference compaction function (spec §8.5).

    The returned ``async fn(messages, context=None)`` keeps the first ``protect_head`` messages
    (and the results of a tool call among them), keeps a tail of at most ``tail_token_budget``
    tokens (the last message always; at least ``min_tail_messages`` when the middle allows; never
    starting on a tool result), and asks ``summarize`` for a summary of the rest in the four
    sections Topic / Key Points / Current State / Open Items, about 20% of its size (at least 100
    tokens). If the history holds an overlay message already, the prompt asks to update that
    summary instead. It returns ``None`` when there is nothing to compact or the summary is blank.

    Tail tokens are counted by ``token_counter([message])`` if given; else by the session's
    counter in ``context["token_counter"]``, called per message as
    ``{"messages": [message], "system_prompt": "", "context_blocks": []}``; else by the heuristic
    :func:`memstream.estimate_message_tokens`. Counters may be sync or async; a count that is not
    finite counts 0.

    Example::

        compact = memstream.create_compact_function(summarize=my_llm, protect_head=3)
        session.on_compaction(compact)

    Args:
        summarize: ``summarize(prompt) -> str``, sync or async.
        protect_head: messages at the start never summarised.
        tail_token_budget: tokens the protected tail may hold.
        min_tail_messages: messages at the end never summarised.
        token_counter: tokens of a list of (one) messages, for the tail budget.

    Raises:
        InvalidInputError: an option has the wrong type or a negative value.
    """
    if not callable(summarize):
        raise InvalidInputError(f"summarize must be callable, not {type(summarize).__name__}")
    if token_counter is not None and not callable(token_counter):
        raise InvalidInputError(
            f"token_counter must be callable, not {type(token_counter).__name__}"
        )
    check_int("protect_head", protect_head, minimum=0, maximum=2**31)
    check_int("min_tail_messages", min_tail_messages, minimum=0, maximum=2**31)
    if isinstance(tail_token_budget, bool) or not isinstance(tail_token_budget, int | float):
        raise InvalidInputError(
            f"tail_token_budget must be a number, not {type(tail_token_budget).__name__}"
        )
    if not tail_token_budget >= 0:
        raise InvalidInputError(f"tail_token_budget is {tail_token_budget}; it must be >= 0")

    async def compact(
        messages: Sequence[Mapping[str, Any]], context: object = None
    ) -> CompactResult | None:
        if len(messages) <= protect_head + min_tail_messages:
            return None
        count = _tail_counter(token_counter, context)
        start = compaction_start(messages, protect_head)
        walk = TailWalk(messages, start, tail_token_budget, min_tail_messages)
        for index in walk.indices():
            if not walk.take(await count(messages[index])):
                break
        plan = plan_compaction(messages, start, walk.end())
        if plan is None:
            return None
        summary = await _resolve(summarize(plan.prompt))
        if not isinstance(summary, str):
            raise InvalidInputError(f"summarize returned {type(summary).__name__}, not a string")
        if not summary.strip():
            return None
        return CompactResult(
            from_message_id=plan.from_message_id,
            to_message_id=plan.to_message_id,
            summary=summary,
        )

    return compact


async def _resolve(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _session_counter(context: object) -> SessionTokenCounter | None:
    if isinstance(context, Mapping):
        counter = context.get("token_counter")
    else:
        counter = getattr(context, "token_counter", None)
    return counter if callable(counter) else None


def _tail_counter(
    token_counter: MessageTokenCounter | None, context: object
) -> Callable[[Mapping[str, Any]], Awaitable[float]]:
    """Tokens of one message: the option's counter, else the session's, else the heuristic."""
    session_counter = _session_counter(context)

    async def count(message: Mapping[str, Any]) -> float:
        if token_counter is not None:
            tokens = await _resolve(token_counter([dict(message)]))
        elif session_counter is not None:
            request = {"messages": [dict(message)], "system_prompt": "", "context_blocks": []}
            tokens = await _resolve(session_counter(request))
        else:
            return estimate_message_tokens([message])
        return _finite(tokens)

    return count


def _finite(tokens: object) -> float:
    if isinstance(tokens, bool) or not isinstance(tokens, int | float):
        raise InvalidInputError(f"token_counter returned {type(tokens).__name__}, not a number")
    return float(tokens) if math.isfinite(tokens) else 0.0
