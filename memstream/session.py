"""The Session API: one conversation as a message tree, written through the log."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any, Protocol, cast

from memstream.compaction import CompactResult
from memstream.context.ports import MemstreamPort
from memstream.context.session_context import SessionContext, block_config
from memstream.context.tools import ToolSet, context_tools
from memstream.domain.errors import InvalidInputError, MemstreamError
from memstream.domain.limits import (
    SEARCH_LIMIT_MAX,
    check_actor,
    check_int,
    check_session_id,
    require_str,
    search_query,
    storable,
)
from memstream.domain.messages import Message
from memstream.domain.session import OMITTED, SessionAggregate
from memstream.domain.system_prompt import ContextBlock
from memstream.home_loop import client_loop, home_loop_methods
from memstream.projections.ports import SessionQueries
from memstream.projections.recent_history import RecentHistory
from memstream.session_compaction import SessionCompaction
from memstream.types import MessageInput, SearchHit, SessionMessage
from memstream.workers.log.aggregate_store import CommandResult
from memstream.workers.log.codec import CommandMeta, decode_event
from memstream.workers.log.event_log import EventLog

logger = logging.getLogger(__name__)


class SessionClient(MemstreamPort, Protocol):
    """What a session uses of its connected memstream: its parts
    (:class:`memstream.core.Core`, which ``Memstream.session()`` hands to the sessions it
    makes; this module does not import it)."""

    @property
    def actor(self) -> str: ...

    @property
    def log(self) -> EventLog: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...


@home_loop_methods(client_loop)
class Session:
    """A session of a memstream instance (lazy: nothing happens until the first call).

    Writes are commands on the log; reads come from the read models after they have caught up
    with this client's last write (read-your-writes).
    """

    def __init__(
        self, ms: SessionClient, session_id: str = "", *, actor: str | None = None
    ) -> None:
        self._ms = ms
        self._session_id = check_session_id(session_id)
        self._actor = None if actor is None else check_actor(actor)
        self._context = SessionContext(self)
        self._compaction = SessionCompaction()

    # -- builder ------------------------------------------------------------------------------

    def for_session(self, session_id: str) -> Session:
        """Select the session id (storage isolation and block keys); returns ``self``."""
        self._context.before_use("for_session")
        self._session_id = check_session_id(session_id)
        return self

    def with_context(
        self,
        label: str,
        *,
        description: str | None = None,
        max_tokens: int | None = None,
        provider: Any = None,
    ) -> Session:
        """Configure a context block; returns ``self``.

        Without ``provider`` the block is the built-in writable block of this session, stored on
        the log (listed under the reference's key, ``label`` or ``label_<session id>``). Nothing
        is read until the session is first used.

        Raises:
            InvalidInputError: bad label (1–64 chars), description or ``max_tokens``, or a
                label configured twice.
        """
        self._context.configure(block_config(label, description, max_tokens, provider))
        return self

    def with_cached_prompt(self, provider: Any = None) -> Session:
        """Persist the frozen system prompt (on the log, or in ``provider``); returns ``self``.

        A new process with the same session id then gets the same frozen prompt.
        """
        self._context.cache_prompt(provider)
        return self

    def on_compaction(self, function: Any) -> Session:
        """Set the compaction function, ``(messages, context) -> {from_message_id,
        to_message_id, summary} | None`` (sync or async; see
        :func:`memstream.create_compact_function`); returns ``self``."""
        self._compaction.set_function(function)
        return self

    def compact_after(self, threshold: float, token_counter: Any = None) -> Session:
        """Compact automatically after an append that takes the session's token estimate over
        ``threshold`` (spec §8.3; ``token_counter({"messages", "system_prompt",
        "context_blocks"})`` replaces the estimate); returns ``self``."""
        self._compaction.set_threshold(threshold, token_counter)
        return self

    def on_compaction_error(self, handler: Any) -> Session:
        """Receive the errors of automatic compaction and of the compaction function itself
        (called with the exception; sync or async); returns ``self``."""
        self._compaction.set_error_handler(handler)
        return self

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def memstream(self) -> SessionClient:
        return self._ms

    @property
    def actor(self) -> str:
        """Who this session's events are recorded as caused by."""
        return self._actor or self._ms.actor

    def command_meta(self) -> CommandMeta:
        """The audit fields of a new command of this session."""
        return CommandMeta(actor=self.actor)

    # -- writes --------------------------------------------------------------------------------

    async def _command(
        self, decide: Callable[[SessionAggregate], Sequence[SessionAggregate.Event]]
    ) -> CommandResult[None]:
        await self._context.ready()
        return await self._ms.commands.session_command(
            self._session_id, decide, self.command_meta()
        )

    async def append_message(self, message: MessageInput, parent_id: Any = OMITTED) -> int:
        """Append a message (omitted parent → latest leaf; ``None`` → new root).

        An id that already exists is a no-op (the first content wins). Returns the log sequence.

        Raises:
            MessageNotFoundError: ``parent_id`` does not exist in this session.
            InvalidInputError: the message breaks a limit (1 MiB JSON, id 1–256 chars, shape).
        """
        result = await self._command(lambda s: s.append_message(message, parent_id))
        if result.events:  # a new message (not a repeated id): maybe compact (§8.3)
            await self._compaction.after_append(self)
        return result.seq

    async def append_messages(
        self, messages: Sequence[MessageInput], parent_id: Any = OMITTED
    ) -> int:
        """Append a chain of messages atomically (one event, ≤ 500 messages)."""
        result = await self._command(lambda s: s.append_messages(messages, parent_id))
        if result.events:
            await self._compaction.after_append(self)
        return result.seq

    async def compact(self, leaf_id: str | None = None) -> CompactResult | None:
        """Compact the path to ``leaf_id`` (default: the active one) with the compaction
        function (spec §8.2): its summary is stored as an overlay, extending the one already on
        that path, and the system prompt is refreshed. ``None`` when nothing was compacted
        (an error of the function goes to ``on_compaction_error``).

        Raises:
            CompactionNotConfiguredError: no compaction function (``on_compaction``).
        """
        return await self._compaction.compact(self, leaf_id)

    async def compaction_prompt(self) -> tuple[str, list[ContextBlock]]:
        """The system prompt a token estimate counts, and the current blocks (§5.3)."""
        if not self._context.configured:
            return "", []
        blocks = await self._context.loaded()
        return await blocks.estimate_prompt(), blocks.get_blocks()

    async def after_compaction(self) -> None:
        """After an overlay was stored: refresh the system prompt (when there is one)."""
        if self._context.configured:
            await self.refresh_system_prompt()

    async def update_message(self, message: Message) -> int:
        """Replace a stored message's content (and its search text).

        Raises:
            MessageNotFoundError: no message with that id in this session.
        """
        return (await self._command(lambda s: s.update_message(message))).seq

    async def delete_messages(self, ids: Iterable[str]) -> int:
        """Delete messages by id (unknown ids are ignored; children are kept)."""
        # Non-lists go to the domain unchanged, which refuses them with InvalidInputError.
        listable = isinstance(ids, Iterable) and not isinstance(ids, str | bytes | Mapping)
        id_list = list(ids) if listable else ids
        return (await self._command(lambda s: s.delete_messages(id_list))).seq

    async def clear_messages(self) -> int:
        """Remove every message, overlay and loaded skill of this session, then refresh the
        system prompt (when the session has context blocks or a cached prompt)."""
        result = await self._command(SessionAggregate.clear_messages)
        if self._context.configured:
            blocks = await self._context.blocks()
            blocks.clear_skill_state()
            await blocks.refresh()
        return result.seq

    async def add_compaction(self, summary: str, from_id: str, to_id: str) -> dict[str, Any]:
        """Store an overlay that reads ``from_id..to_id`` as one summary message."""
        result = await self._command(lambda s: s.add_compaction(summary, from_id, to_id))
        await self._ms.ryw.wait_for("sessions", result.seq)
        # Find ours by id: other writers may have added overlays since.
        added = cast("SessionAggregate.CompactionAdded", result.events[-1])
        compaction_id = added.compaction_id
        return next(c for c in await self.get_compactions() if c["id"] == compaction_id)

    # -- context blocks, system prompt, skills, tools (§6, §7, §9) ------------------------------

    def get_context_block(self, label: str) -> ContextBlock | None:
        """A loaded block, or ``None`` (blocks load on the first freeze, write or ``tools()``)."""
        require_str("label", label)
        blocks = self._context.started
        return None if blocks is None else blocks.get_block(label)

    def get_context_blocks(self) -> list[ContextBlock]:
        """The loaded blocks in configuration order (``[]`` before they load)."""
        blocks = self._context.started
        return [] if blocks is None else blocks.get_blocks()

    async def replace_context_block(self, label: str, content: str) -> ContextBlock:
        """Replace a writable block's content; the frozen prompt is not touched.

        Raises:
            NotFoundError: no block ``label`` (with the reference's text,
                ``Block "x" is readonly``).
            InvalidInputError: the block is readonly or keyed, the content is not a string, or
                it exceeds the block's ``max_tokens`` (``Block "x" exceeds maxTokens: 65 > 10``).
        """
        return await (await self._context.blocks()).set_block(label, content)

    async def append_context_block(self, label: str, content: str) -> ContextBlock:
        """Append to a writable block (a newline between); ``max_tokens`` bounds the result."""
        return await (await self._context.blocks()).append_to_block(label, content)

    async def add_context(
        self,
        label: str,
        *,
        description: str | None = None,
        max_tokens: int | None = None,
        provider: Any = None,
    ) -> ContextBlock:
        """Add a block after the configured ones (call :meth:`refresh_system_prompt` to show it).

        Raises:
            InvalidInputError: the label exists already, or bad arguments.
        """
        return await self._context.add(block_config(label, description, max_tokens, provider))

    def remove_context(self, label: str) -> bool:
        """Drop a block; ``False`` if there was none. The frozen prompt is not touched."""
        return self._context.remove(require_str("label", label))

    async def freeze_system_prompt(self) -> str:
        """The system prompt, rendered once and then frozen (persisted with a cached prompt)."""
        return await (await self._context.blocks()).freeze()

    async def refresh_system_prompt(self) -> str:
        """Reload every block, re-render, and replace the frozen prompt."""
        return await (await self._context.blocks()).refresh()

    def get_loaded_skill_keys(self) -> set[str]:
        """``"label:key"`` of the loaded skills."""
        blocks = self._context.started
        return set() if blocks is None else set(blocks.loaded_skills)

    async def tools(self) -> ToolSet:
        """The AI tools of the current blocks (``{}`` without writable/skill/search blocks)."""
        return context_tools(await self._context.loaded())

    async def execute_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> str:
        """Run one AI tool; failures come back as ``Error: …`` strings, never exceptions."""
        try:
            tools = await self.tools()
        except MemstreamError as error:
            return f"Error: {error}"
        except Exception as error:  # a provider failed loading; a tool call never raises (§9)
            logger.exception("loading the context blocks of %r failed", self._session_id)
            return f"Error: {error}"
        return await tools.execute(name, arguments)

    # -- events --------------------------------------------------------------------------------

    async def subscribe(self, after_seq: int | None = None) -> AsyncIterator[Any]:
        """Yield this session's domain events as they are committed to the log (typed objects
        such as ``MessageAppended``), from ``after_seq + 1`` or, by default, from now on.

        Example:
            async for event in session.subscribe():
                print(type(event).__name__, event.message_id)
        """
        if after_seq is not None:
            check_int("after_seq", after_seq, minimum=0, maximum=2**63 - 1)
        async for entry in self._ms.log.follow(
            self._ms.commands.session_subject(self._session_id), after_seq
        ):
            yield decode_event(entry.payload, entry.headers, entry.subject)

    # -- reads ---------------------------------------------------------------------------------

    async def _queries(self) -> SessionQueries:
        await self._context.ready()
        # The queries read through the read side, and only this session's rows.
        await self._ms.ryw.wait_to_read(
            "sessions", subject=self._ms.commands.session_subject(self._session_id)
        )
        return self._ms.reads.session_queries

    async def get_history(
        self, leaf_id: str | None = None, *, limit: int | None = None
    ) -> list[SessionMessage]:
        """Path root→leaf (latest leaf when ``leaf_id`` is falsy) with overlays applied; with
        ``limit``, its last ``limit`` messages (an overlay counts as one).

        Raises:
            InvalidInputError: ``limit`` is not an integer ≥ 0.
        """
        leaf = _optional_id("leaf_id", leaf_id)
        if limit is not None:
            check_int("limit", limit, minimum=0, maximum=2**63 - 1)
        if leaf is not None and not storable(leaf):
            return []
        queries = await self._queries()
        history = cast(
            "list[SessionMessage]",
            list(queries.history(self._ms.namespace, self._session_id, leaf)),
        )
        if limit is None:
            return history
        return history[len(history) - limit :] if limit else []

    async def get_recent_history(
        self, max_content_bytes: int, min_recent_messages: int = 1
    ) -> RecentHistory:
        """The most recent suffix of the active path within a byte budget.

        Raises:
            InvalidInputError: ``max_content_bytes`` is not an integer ≥ 0, or
                ``min_recent_messages`` is not a finite number.
        """
        check_int("max_content_bytes", max_content_bytes, minimum=0, maximum=2**62)
        if (
            isinstance(min_recent_messages, bool)
            or not isinstance(min_recent_messages, (int, float))
            or not math.isfinite(min_recent_messages)
        ):
            raise InvalidInputError(
                f"min_recent_messages must be a finite number, not {min_recent_messages!r}"
            )
        queries = await self._queries()
        return queries.recent_history(
            self._ms.namespace, self._session_id, max_content_bytes, min_recent_messages
        )

    async def get_history_row_stats(self) -> list[dict[str, Any]]:
        """``{id, role, bytes}`` of each row on the active path, without content."""
        queries = await self._queries()
        return list(queries.row_stats(self._ms.namespace, self._session_id))

    async def get_message(self, id: str) -> SessionMessage | None:  # design.md names it ``id``
        """One message by id, or ``None``."""
        if not storable(require_str("id", id)):
            return None
        queries = await self._queries()
        return cast(
            "SessionMessage | None", queries.message(self._ms.namespace, self._session_id, id)
        )

    async def get_latest_leaf(self) -> SessionMessage | None:
        """The newest childless message, or ``None`` if the session is empty."""
        queries = await self._queries()
        return cast(
            "SessionMessage | None", queries.latest_leaf(self._ms.namespace, self._session_id)
        )

    async def get_path_length(self, leaf_id: str | None = None) -> int:
        """Raw messages on the path to ``leaf_id`` (latest leaf by default)."""
        leaf = _optional_id("leaf_id", leaf_id)
        if leaf is not None and not storable(leaf):
            return 0
        queries = await self._queries()
        return queries.path_length(self._ms.namespace, self._session_id, leaf)

    async def get_branches(self, message_id: str) -> list[SessionMessage]:
        """Children of a message in log order."""
        if not storable(require_str("message_id", message_id)):
            return []
        queries = await self._queries()
        return cast(
            "list[SessionMessage]",
            list(queries.branches(self._ms.namespace, self._session_id, message_id)),
        )

    async def get_compactions(self) -> list[dict[str, Any]]:
        """Stored overlays in log order."""
        queries = await self._queries()
        return [asdict(c) for c in queries.compactions(self._ms.namespace, self._session_id)]

    async def search(self, query: str, limit: int = 20) -> list[SearchHit]:
        """Full-text search in this session (web-search syntax), best match first.

        Returns ``[{id, role, content, created_at}]``. Any string is a query: one with nothing
        searchable in it, or over 4 KiB, returns ``[]``.

        Raises:
            InvalidInputError: ``query`` is not a string; ``limit`` is not 1–500.
        """
        check_int("limit", limit, minimum=1, maximum=SEARCH_LIMIT_MAX)
        text = search_query(query)
        if text is None:
            return []
        queries = await self._queries()
        hits = queries.search(self._ms.namespace, self._session_id, text, limit)
        return [
            SearchHit(id=h["id"], role=h["role"], content=h["content"], created_at=h["created_at"])
            for h in hits
        ]


def _optional_id(name: str, value: object) -> str | None:
    """A leaf id argument: falsy means "the latest leaf"; anything else must be a string."""
    return require_str(name, value) if value else None
