"""A session's compaction (spec §8.2, §8.3, Part A.8): the function it calls, when it calls it
after an append, and where errors go.

A compaction is stored as an overlay (``session.compaction_added``, the summary inside the
event: replaying the log never calls a model again). A second compaction of a branch extends
the overlay already visible on it ("superseding, not stacking"): one growing overlay per branch.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

from memstream.compaction import CompactFunction, CompactResult, SessionTokenCounter
from memstream.domain.errors import CompactionNotConfiguredError, InvalidInputError
from memstream.domain.messages import COMPACTION_PREFIX, Message
from memstream.domain.system_prompt import ContextBlock
from memstream.domain.tokens import estimate_message_tokens, estimate_string_tokens
from memstream.types import SessionMessage

logger = logging.getLogger(__name__)

NOT_CONFIGURED = "No compaction function registered. Call onCompaction() first."
ErrorHandler = Callable[[BaseException], "Awaitable[None] | None"]


class CompactingSession(Protocol):
    """What a compaction uses of its session."""

    @property
    def session_id(self) -> str: ...

    async def get_history(self, leaf_id: str | None = None) -> list[SessionMessage]: ...

    async def get_compactions(self) -> list[dict[str, Any]]: ...

    async def add_compaction(self, summary: str, from_id: str, to_id: str) -> dict[str, Any]: ...

    async def compaction_prompt(self) -> tuple[str, list[ContextBlock]]:
        """The system prompt an estimate counts and the current blocks (§5.3)."""

    async def after_compaction(self) -> None:
        """Refresh what depends on the history (the system prompt)."""


class SessionCompaction:
    """What ``on_compaction``, ``compact_after`` and ``on_compaction_error`` configured."""

    def __init__(self) -> None:
        self.function: CompactFunction | None = None
        self.threshold: float | None = None
        self.token_counter: SessionTokenCounter | None = None
        self.error_handler: ErrorHandler | None = None
        self._warned = False  # the "over the threshold, nothing compacted" warning, once

    def set_function(self, function: object) -> None:
        if not callable(function):
            raise InvalidInputError("on_compaction needs a function (messages, context) -> result")
        self.function = function

    def set_threshold(self, threshold: object, token_counter: object) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise InvalidInputError(f"threshold must be a number, not {type(threshold).__name__}")
        if not math.isfinite(threshold) or threshold < 0:
            raise InvalidInputError(f"threshold is {threshold!r}; it must be finite and >= 0")
        if token_counter is not None and not callable(token_counter):
            raise InvalidInputError("token_counter must be a function of the prompt's parts")
        self.threshold = float(threshold)
        self.token_counter = token_counter

    def set_error_handler(self, handler: object) -> None:
        if not callable(handler):
            raise InvalidInputError("on_compaction_error needs a function (error) -> None")
        self.error_handler = handler

    async def compact(
        self, session: CompactingSession, leaf_id: str | None = None
    ) -> CompactResult | None:
        """Compact the path to ``leaf_id`` (the active one by default), §8.2. An error of the
        compaction function goes to ``on_compaction_error`` (Part A.8) and gives ``None``.

        Raises:
            CompactionNotConfiguredError: no compaction function.
        """
        function = self.function
        if function is None:
            raise CompactionNotConfiguredError(NOT_CONFIGURED)
        history = cast("list[Message]", await session.get_history(leaf_id))
        try:
            result = await _resolve(function(history, self._context(session)))
        except Exception as error:
            await self.report(error)
            return None
        if result is None:
            return None
        ids = {m.get("id") for m in history}
        to_id = _field(result, "to_message_id")
        if to_id not in ids:
            return None
        visible = [
            c
            for c in await session.get_compactions()
            if COMPACTION_PREFIX + str(c["id"]) in ids
            or (c["from_message_id"] in ids and c["to_message_id"] in ids)
        ]
        from_id = visible[0]["from_message_id"] if visible else _field(result, "from_message_id")
        summary = _field(result, "summary")
        await session.add_compaction(summary, from_id, to_id)
        await session.after_compaction()
        return {"from_message_id": from_id, "to_message_id": to_id, "summary": summary}

    async def after_append(self, session: CompactingSession) -> None:
        """Compact when the estimate is over the threshold (§8.3), after a new message was
        stored. Never raises: errors go to ``on_compaction_error``, or to the log."""
        if self.threshold is None or self.function is None:
            return
        try:
            estimate = await self.estimate(session)
            if estimate <= self.threshold:
                return
            result = await self.compact(session)
        except Exception as error:
            await self.report(error)
            return
        if result is None:
            if not self._warned:
                self._warned = True
                logger.warning(
                    "session %r: %d tokens is over the compaction threshold %g, but the "
                    "compaction function compacted nothing",
                    session.session_id,
                    estimate,
                    self.threshold,
                )
        else:
            self._warned = False

    async def estimate(self, session: CompactingSession) -> int:
        """The session's token estimate (§5.3): history and system prompt."""
        messages = cast("list[Message]", await session.get_history())
        prompt, blocks = await session.compaction_prompt()
        counter = self.token_counter
        if counter is None:
            return estimate_message_tokens(messages) + estimate_string_tokens(prompt)
        counted = await _resolve(
            counter({"messages": messages, "system_prompt": prompt, "context_blocks": blocks})
        )
        if isinstance(counted, bool) or not isinstance(counted, int | float):
            return 0
        return max(0, math.ceil(counted)) if math.isfinite(counted) else 0

    async def report(self, error: BaseException) -> None:
        """Hand a compaction error to the handler (its own errors are logged), or log it."""
        handler = self.error_handler
        if handler is None:
            logger.warning("Session auto-compaction failed: %s", error)
            return
        try:
            await _resolve(handler(error))
        except Exception:
            logger.warning("on_compaction_error handler failed", exc_info=True)

    def _context(self, session: CompactingSession) -> dict[str, Any]:
        counter = self.token_counter
        return {} if counter is None else {"token_counter": counter}


async def _resolve(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _field(result: object, name: str) -> str:
    """A field of a compaction function's result (a mapping or an object), as a string."""
    value = result.get(name) if isinstance(result, dict) else getattr(result, name, None)
    if not isinstance(value, str):
        raise InvalidInputError(f"the compaction function's result has no string {name!r}")
    return value
