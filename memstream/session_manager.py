"""The SessionManager (spec §10): many sessions of one namespace, registered with a name, model,
source, parent and usage; fork, split, cross-session search and the ``session_search`` tool.

Registration, renames, usage, ends and deletions are commands on each session's registry record
(``registry.*`` events, on a subject of their own); messages stay commands on the session. The
``registry`` projection lists registered sessions, most recently active first.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from memstream.context.tools import Tool, ToolSet
from memstream.domain.context import ContextDocument, document_id
from memstream.domain.errors import InvalidInputError, MessageNotFoundError, NotFoundError
from memstream.domain.limits import (
    BATCH_MAX_MESSAGES,
    LIST_LIMIT_MAX,
    SEARCH_LIMIT_MAX,
    check_int,
    check_session_id,
    search_query,
)
from memstream.domain.messages import Message, normalize_message
from memstream.domain.session import OMITTED, SessionAggregate
from memstream.domain.session_registry import SessionRecord, check_name
from memstream.domain.tool_specs import NO_RESULTS, session_search_spec
from memstream.home_loop import client_loop, home_loop_methods
from memstream.session import Session, SessionClient
from memstream.types import SessionMessage
from memstream.workers.log.aggregate_store import Decide

SPLIT_PREFIX = "[Context from previous session]\n\n"
HISTORY_DESCRIPTION = "Cross-session conversation history"
_ALL = 2**62  # a page limit no namespace reaches: list() reads every row in one query
# (The manager's ``list`` method hides the builtin inside its class: these name the types.)
Infos = list[dict[str, Any]]
Messages = list[Message]
StoredMessages = list[SessionMessage]


@home_loop_methods(client_loop)
class SessionManager:
    """Sessions of one namespace by id, with the builder settings applied to each (§10)."""

    def __init__(self, ms: SessionClient) -> None:
        self._ms = ms
        self._contexts: list[tuple[str, dict[str, Any]]] = []
        self._cached_prompt: tuple[bool, Any] = (False, None)
        self._compaction: list[tuple[str, tuple[Any, ...]]] = []
        self._history_label: str | None = None
        self._sessions: dict[str, Session] = {}

    # -- builder ------------------------------------------------------------------------------

    def with_context(
        self,
        label: str,
        *,
        description: str | None = None,
        max_tokens: int | None = None,
        provider: Any = None,
    ) -> SessionManager:
        """A context block for every session (a built-in block is per session:
        ``label_<session id>``); returns ``self``."""
        options = {"description": description, "max_tokens": max_tokens, "provider": provider}
        self._contexts.append((label, options))
        return self

    def with_cached_prompt(self, provider: Any = None) -> SessionManager:
        self._cached_prompt = (True, provider)
        return self

    def on_compaction(self, function: Any) -> SessionManager:
        self._compaction.append(("on_compaction", (function,)))
        return self

    def compact_after(self, threshold: float, token_counter: Any = None) -> SessionManager:
        self._compaction.append(("compact_after", (threshold, token_counter)))
        return self

    def on_compaction_error(self, handler: Any) -> SessionManager:
        self._compaction.append(("on_compaction_error", (handler,)))
        return self

    def with_searchable_history(self, label: str) -> SessionManager:
        """Give every session a read-only block ``label`` that searches all sessions."""
        self._history_label = label
        return self

    # -- sessions -----------------------------------------------------------------------------

    def get_session(self, session_id: str) -> Session:
        """The session ``session_id`` with the manager's settings (one object per id; it is
        not checked to be registered)."""
        session = self._sessions.get(session_id)
        if session is None:
            session = Session(self._ms, check_session_id(session_id))
            for label, options in self._contexts:
                session.with_context(label, **options)
            if self._history_label is not None:
                session.with_context(
                    self._history_label,
                    description=HISTORY_DESCRIPTION,
                    provider=_HistorySearch(self),
                )
            if self._cached_prompt[0]:
                session.with_cached_prompt(self._cached_prompt[1])
            for method, arguments in self._compaction:
                getattr(session, method)(*arguments)
            self._sessions[session_id] = session
        return session

    async def _record(self, session_id: str, decide: Decide[SessionRecord, Any]) -> int:
        result = await self._ms.commands.command(
            self._ms.commands.records, "registry", check_session_id(session_id), decide
        )
        return result.seq

    async def create(
        self,
        name: str,
        *,
        parent_session_id: str | None = None,
        model: str | None = None,
        source: str | None = None,
        session_id: str | None = None,
        forked_from_message_id: str | None = None,
    ) -> dict[str, Any]:
        """Register a new session (a random id unless ``session_id`` is given) and return its
        ``SessionInfo``.

        Raises:
            InvalidInputError: a limit (name ≤ 256 characters, model and source 1–256), or
                ``session_id`` is registered already.
        """
        new_id = check_session_id(session_id) if session_id is not None else str(uuid.uuid4())
        parent = None if parent_session_id is None else check_session_id(parent_session_id)
        seq = await self._record(
            new_id,
            lambda r: r.create(
                name,
                model=model,
                source=source,
                parent_session_id=parent,
                forked_from_message_id=forked_from_message_id,
            ),
        )
        info = await self._info(new_id, seq)
        assert info is not None  # just registered, read after that write
        return info

    async def _info(self, session_id: str, seq: int | None = None) -> dict[str, Any] | None:
        await self._ms.ryw.wait_for("registry", seq)
        return self._ms.reads.read_models.registry.session(self._ms.namespace, session_id)

    async def get(self, session_id: str) -> dict[str, Any] | None:
        """The session's ``SessionInfo``, or ``None`` when it is not registered."""
        return await self._info(check_session_id(session_id))

    async def list(self) -> Infos:
        """Every registered session, most recently active first."""
        await self._ms.ryw.wait_for("registry")
        rows, _ = self._ms.reads.read_models.registry.page(self._ms.namespace, _ALL)
        return rows

    async def list_page(self, *, limit: int = 20, cursor: str | None = None) -> dict[str, Any]:
        """A page of registered sessions, most recently active first: ``{"sessions": [...],
        "cursor": str | None}`` (pass ``cursor`` back for the next page; ``None``: last page).

        Raises:
            InvalidInputError: ``limit`` outside 1–500, or a cursor this did not give.
        """
        check_int("limit", limit, minimum=1, maximum=LIST_LIMIT_MAX)
        before = _cursor_position(cursor)
        await self._ms.ryw.wait_for("registry")
        rows, after = self._ms.reads.read_models.registry.page(self._ms.namespace, limit, before)
        return {"sessions": rows, "cursor": None if after is None else f"r{after}"}

    async def _require(self, session_id: str) -> dict[str, Any]:
        info = await self.get(session_id)
        if info is None:
            raise NotFoundError(f"session {session_id!r} is not registered")
        return info

    async def rename(self, session_id: str, name: str) -> None:
        """Rename a registered session (its ``updated_at`` moves too).

        Raises:
            NotFoundError: the session is not registered.
        """
        await self._record(session_id, lambda r: r.rename(name))

    async def delete(self, session_id: str) -> None:
        """Remove everything of a session (Part A.9), as events: its messages, overlays and
        search rows, its built-in context blocks, its cached prompt and its registration.
        Idempotent."""
        session = self.get_session(session_id)
        await session.clear_messages()  # (which may refresh the cached prompt: removed below)
        for label, options in self._contexts:
            if options.get("provider") is None:
                await self._ms.commands.command(
                    self._ms.commands.blocks,
                    "block",
                    document_id(label, session_id),
                    ContextDocument.delete,
                )
        await self._ms.commands.session_command(session_id, SessionAggregate.clear_system_prompt)
        await self._record(session_id, SessionRecord.delete)
        self._sessions.pop(session_id, None)

    async def add_usage(
        self, session_id: str, input_tokens: int, output_tokens: int, cost: float
    ) -> None:
        """Add to the session's usage counters.

        Raises:
            NotFoundError: the session is not registered.
            InvalidInputError: a negative or non-integer count, or a cost that is not a finite
                number of at least 0.
        """
        await self._record(session_id, lambda r: r.add_usage(input_tokens, output_tokens, cost))

    # -- messages -----------------------------------------------------------------------------

    async def append(self, session_id: str, message: Message, parent_id: Any = OMITTED) -> str:
        """Append a message to the session; returns its id (a message without one gets one)."""
        stored = normalize_message(message)
        await self.get_session(session_id).append_message(stored, parent_id)
        return str(stored["id"])

    async def upsert(self, session_id: str, message: Message, parent_id: Any = OMITTED) -> str:
        """Update the message when its id is stored in the session, else append it."""
        session = self.get_session(session_id)
        stored = normalize_message(message)
        message_id = str(stored["id"])
        if await session.get_message(message_id) is not None:
            await session.update_message(stored)
        else:
            await session.append_message(stored, parent_id)
        return message_id

    async def append_all(
        self, session_id: str, messages: Sequence[Message], parent_id: Any = OMITTED
    ) -> str | None:
        """Append a chain in one event, from ``parent_id`` (default: the latest leaf, Part A.6);
        returns the last message's id (``parent_id`` for an empty list)."""
        if not messages:
            return None if parent_id is OMITTED or parent_id is None else str(parent_id)
        tool_names: dict[str, str] = {}  # a chat-format batch's calls, named in its results
        stored = [normalize_message(m, tool_names) for m in messages]
        await self.get_session(session_id).append_messages(stored, parent_id)
        return str(stored[-1]["id"])

    async def get_history(self, session_id: str, leaf_id: str | None = None) -> StoredMessages:
        return await self.get_session(session_id).get_history(leaf_id)

    async def get_message_count(self, session_id: str) -> int:
        """The length of the session's active path (as the reference counts)."""
        return await self.get_session(session_id).get_path_length()

    async def clear_messages(self, session_id: str) -> None:
        await self.get_session(session_id).clear_messages()

    async def delete_messages(self, session_id: str, message_ids: Iterable[str]) -> None:
        await self.get_session(session_id).delete_messages(message_ids)

    async def get_branches(self, session_id: str, message_id: str) -> StoredMessages:
        return await self.get_session(session_id).get_branches(message_id)

    async def add_compaction(
        self, session_id: str, summary: str, from_id: str, to_id: str
    ) -> dict[str, Any]:
        return await self.get_session(session_id).add_compaction(summary, from_id, to_id)

    async def get_compactions(self, session_id: str) -> Infos:
        return await self.get_session(session_id).get_compactions()

    # -- fork and split -----------------------------------------------------------------------

    async def fork(self, session_id: str, at_message_id: str, name: str) -> dict[str, Any]:
        """A new session holding the path to ``at_message_id`` of ``session_id`` as one chain
        (Part A.7: the messages keep their ids; an overlay on the path becomes a real message;
        no overlays are copied). Returns the new session's ``SessionInfo`` as registered.

        Raises:
            MessageNotFoundError: ``at_message_id`` is not a message of ``session_id`` (the
                reference made an empty session; a fork of nothing is a mistake).
            InvalidInputError: a bad name (1–256 characters).
        """
        check_name(name)
        source = self.get_session(session_id)
        if await source.get_message(at_message_id) is None:
            raise MessageNotFoundError(
                f"no message {at_message_id!r} in session {session_id!r} to fork at"
            )
        info = await self.create(
            name, parent_session_id=session_id, forked_from_message_id=at_message_id
        )
        path = await source.get_history(at_message_id)
        fork = self.get_session(info["id"])
        for start in range(0, len(path), BATCH_MAX_MESSAGES):
            parent = None if start == 0 else path[start - 1]["id"]
            await fork.append_messages(path[start : start + BATCH_MAX_MESSAGES], parent)
        return info

    async def compact_and_split(
        self, session_id: str, summary: str, name: str | None = None
    ) -> dict[str, Any]:
        """End the session (``end_reason = "compaction"``) and start a new one with its
        ``[Context from previous session]`` summary; returns the new ``SessionInfo``.

        Raises:
            NotFoundError: the session is not registered.
        """
        if not isinstance(summary, str):
            raise InvalidInputError(f"summary must be a string, not {type(summary).__name__}")
        old = await self._require(session_id)
        await self._record(session_id, lambda r: r.end("compaction"))
        info = await self.create(
            name or old["name"] or "Compacted",
            parent_session_id=session_id,
            model=old["model"],
            source=old["source"],
        )
        context = {
            "id": str(uuid.uuid4()),
            "role": "assistant",
            "parts": [{"type": "text", "text": SPLIT_PREFIX + summary}],
        }
        await self.get_session(info["id"]).append_message(context, None)
        return await self._require(info["id"])

    # -- search and tools ---------------------------------------------------------------------

    async def search(self, query: str, limit: int = 20) -> Infos:
        """Messages of every session of the namespace matching ``query`` (the one search
        syntax), best first: ``[{id, role, content, created_at, session_id}]``."""
        check_int("limit", limit, minimum=1, maximum=SEARCH_LIMIT_MAX)
        text = search_query(query)
        if text is None:
            return []
        await self._ms.ryw.wait_for("sessions")
        hits = self._ms.reads.read_models.sessions.search(self._ms.namespace, None, text, limit)
        keys = ("id", "role", "content", "created_at", "session_id")
        return [{key: hit[key] for key in keys} for hit in hits]

    def tools(self) -> ToolSet:
        """``session_search`` (only a manager has it, §9.4)."""
        spec = session_search_spec()

        async def run(arguments: Mapping[str, Any]) -> str:
            query = arguments.get("query")
            if not isinstance(query, str):
                raise InvalidInputError("query must be a string")
            hits = await self.search(query, 10)
            if not hits:
                return NO_RESULTS
            return "\n---\n".join(f"[{h['role']}] {h['content']}" for h in hits)

        return ToolSet({spec.name: Tool(spec.name, spec.description, spec.parameters, run)})

    async def execute_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> str:
        return await self.tools().execute(name, arguments)


class _HistorySearch:
    """The read-only search provider of ``with_searchable_history`` (§10)."""

    def __init__(self, manager: SessionManager) -> None:
        self._manager = manager

    async def get(self) -> str | None:
        count = len(await self._manager.list())
        if count == 0:
            return None
        return f"{count} session{'' if count == 1 else 's'} available for search."

    async def search(self, query: str) -> str | None:
        hits = await self._manager.search(query, 10)
        if not hits:
            return None
        return "\n---\n".join(f"[{h['role']}] {h['content']}" for h in hits)


def _cursor_position(cursor: object) -> int | None:
    if cursor is None:
        return None
    if isinstance(cursor, str) and cursor.startswith("r") and cursor[1:].isdigit():
        return int(cursor[1:])
    raise InvalidInputError(f"cursor {cursor!r} is not one a list page gave")
