"""Agent Memory (spec memory.md): profiles in namespaces; ingest, remember, recall, list, get,
delete, delete_session, get_summary, history, get_message.

Every write is a command on the profile's aggregate (``memory.*`` events on the profile's
subject); the extractor worker turns ingests and remembered texts into memories, the projector
and the indexer build the memory and vectors read models, and every read is answered from
them. Limits are checked before anything is published.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from memstream.commands import CommandRunner
from memstream.domain.errors import (
    ExtractionLagError,
    InvalidInputError,
    MemstreamError,
    NotFoundError,
)
from memstream.domain.extraction.model import MEMORY_TYPES
from memstream.domain.limits import check_namespace
from memstream.domain.memory_input import (
    check_ingest,
    check_list_limit,
    check_memory_id,
    check_memory_session_id,
    check_message_ref,
    check_profile_name,
    check_recall,
    check_remember,
    parse_time,
)
from memstream.domain.memory_profile import MemoryProfile, content_id
from memstream.home_loop import client_loop, home_loop_methods
from memstream.projections.ports import MemoryQueries
from memstream.projections.recall.inputs import QueryAnalysis, VectorCache
from memstream.projections.recall.memory_search import query_terms
from memstream.projections.recall.ranking import (
    ANSWER_CANDIDATES,
    ANSWER_CHARS,
    RecallInputs,
    recall,
)
from memstream.projections.recall.summary import summarize
from memstream.projections.vector_projector import MEMORY, MESSAGE
from memstream.read_side import ReadSide
from memstream.read_your_writes import ReadYourWrites
from memstream.settings import Settings
from memstream.summarizers import OpenAICompatibleSummarizer
from memstream.workers.indexer import LazyEncoder
from memstream.workers.log.aggregate_store import CommandResult, Decide, Decided
from memstream.workers.log.codec import CommandMeta

logger = logging.getLogger(__name__)

# How long ``ingest(wait=True)`` and ``remember`` wait for the extractor (and the indexer) at
# most: extraction of 500 long messages with embeddings takes seconds on a small machine.
EXTRACTION_TIMEOUT: Final = 120.0
_POLL: Final = (0.005, 0.1)  # first and longest pause between looks at the extraction
# (``Profile.list`` hides the builtin inside its class: these name the types.)
Records = list[dict[str, Any]]


@dataclass
class RecallModels:
    """The models recall computes with besides the read models: the embedding model (the indexer's
    too, loaded at its first use), query analysis, cached vectors, and the chat model that
    writes answers."""

    settings: Settings
    encoder: LazyEncoder
    analysis: QueryAnalysis
    vector_cache: VectorCache
    _answer_model: Any = field(default=None, repr=False)

    @classmethod
    def of(cls, settings: Settings) -> RecallModels:
        encoder = LazyEncoder(settings.embedding_model)
        return cls(settings, encoder, QueryAnalysis(encoder), VectorCache(encoder.model_name))

    def answer_model(self) -> Any:
        """The chat model of ``MEMSTREAM_LLM_URL``/``_MODEL`` that writes recall answers
        (``None``: none configured, answers are extractive)."""
        settings = self.settings
        if self._answer_model is None and settings.llm_url and settings.llm_model:
            self._answer_model = OpenAICompatibleSummarizer(
                settings.llm_url,
                settings.llm_model,
                api_key=settings.llm_api_key,
                timeout=30.0,
                max_retries=1,
            )
        return self._answer_model


class MemoryClient(Protocol):
    """What Agent Memory uses of its connected memstream: its parts
    (:class:`memstream.core.Core`)."""

    @property
    def actor(self) -> str: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def reads(self) -> ReadSide: ...

    @property
    def ryw(self) -> ReadYourWrites: ...

    @property
    def commands(self) -> CommandRunner: ...

    @property
    def recall(self) -> RecallModels: ...


@home_loop_methods(client_loop)
class AgentMemory:
    """The profiles of one namespace (``ms.agent_memory(namespace)``)."""

    def __init__(self, ms: MemoryClient, namespace: str) -> None:
        self._ms = ms
        self.namespace = check_namespace(namespace)

    async def get_profile(self, name: str) -> Profile:
        """The profile ``name``, created if it does not exist.

        Raises:
            InvalidInputError: a name over 100 characters (or empty).
        """
        name = check_profile_name(name)
        # An existing profile (in the read model as of this client's reads: the log when it
        # connected, and its own writes) needs no command: a process that only reads never
        # loads the profile's aggregate, which is replayed from its events.
        await self._ms.ryw.wait_for("memory")
        if not self._ms.reads.memory_queries.exists(self.namespace, name):
            result: CommandResult[None] = await self._ms.commands.profile_command(
                self.namespace, name, MemoryProfile.create
            )
            await self._ms.ryw.wait_for("memory", result.seq)
        return Profile(self._ms, self.namespace, name)

    async def delete_profile(self, name: str) -> None:
        """Delete the profile with all its memories and messages (an unknown one: nothing)."""
        name = check_profile_name(name)
        result: CommandResult[None] = await self._ms.commands.profile_command(
            self.namespace, name, MemoryProfile.delete
        )
        await self._ms.ryw.wait_for("memory", result.seq)
        await self._ms.ryw.wait_for_profile(self.namespace, name, result.seq)

    async def list_profiles(self) -> Records:
        """Every profile of the namespace: ``{name, created_at, updated_at, memories,
        messages}``, by name."""
        await self._ms.ryw.wait_for("memory")
        return self._ms.reads.memory_queries.profiles(self.namespace)


@home_loop_methods(client_loop)
class Profile:
    """One profile's memory store (``await memory.get_profile(name)``)."""

    def __init__(self, ms: MemoryClient, namespace: str, name: str) -> None:
        self._ms = ms
        self.namespace = namespace
        self.name = name

    def __repr__(self) -> str:
        return f"Profile(namespace={self.namespace!r}, name={self.name!r})"

    @property
    def _queries(self) -> MemoryQueries:
        return self._ms.reads.memory_queries

    async def _command(
        self, decide: Decide[MemoryProfile, Any], command_id: str | None = None
    ) -> CommandResult[Any]:
        meta = CommandMeta(actor=self._ms.actor)
        if command_id is not None:
            meta = CommandMeta(command_id=command_id, actor=self._ms.actor)
        return await self._ms.commands.profile_command(self.namespace, self.name, decide, meta)

    async def _read(self, seq: int | None = None) -> None:
        await self._ms.ryw.wait_for("memory", seq)

    # -- writes ------------------------------------------------------------------------------

    async def ingest(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        session_id: str | None = None,
        wait: bool = True,
    ) -> None:
        """Keep a conversation's messages and extract memories from them. Idempotent: a
        message is its (session_id, role, content), so re-ingesting adds nothing. With
        ``wait`` (default), returns once the memories are recallable.

        Raises:
            InvalidInputError: a limit (1–500 messages; role system|user|assistant; content
                ≤ 32 KB UTF-8; timestamp a datetime or ISO string; session_id 1–64 chars).
            NotFoundError: the profile was deleted.
            ProjectionLagError: ``wait`` and the extraction did not finish in time.
        """
        sid, checked = check_ingest(messages, session_id, datetime.now(UTC))
        ids = [m.id for m in checked]
        command_id = "g-" + content_id(self.namespace, self.name, sid, *ids)

        def decide(profile: MemoryProfile) -> Decided[None]:
            events = profile.ingest(sid, checked)
            generation = profile.generation()
            if not generation:
                return Decided(events, None)
            # The same messages again after the profile removed them (a memory deleted, their
            # session forgotten, the profile deleted): another ingest, another command id.
            mark = f"generation {generation}"
            return Decided(
                events, None, "g-" + content_id(self.namespace, self.name, sid, mark, *ids)
            )

        result = await self._command(decide, command_id)
        if not wait:
            return
        if result.events:
            last: Any = result.events[-1]
            await self._extracted(last.ingest_id, result.seq)
        else:
            await self._read(result.seq)

    async def remember(self, content: str, *, session_id: str | None = None) -> dict[str, Any]:
        """Store one memory explicitly (the extractor classifies and summarises it); returns
        it (as :meth:`get` does).

        Raises:
            InvalidInputError: empty content or over 32 KB UTF-8; session_id over 64 chars.
            NotFoundError: the profile was deleted.
        """
        text, sid = check_remember(content, session_id)
        memory_id = uuid.uuid4().hex
        result = await self._command(lambda p: p.remember(memory_id, text, sid))
        await self._extracted(memory_id, result.seq)
        return await self.get(memory_id)

    async def _extracted(self, source: str, seq: int) -> None:
        """Wait until the extraction of ``source`` (published at ``seq``) is in the memory
        read model and its vectors are indexed."""
        await self._read(seq)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + EXTRACTION_TIMEOUT
        pause = _POLL[0]
        while True:
            where = self._queries.extraction(self.namespace, self.name, source)
            if where is None and self._queries.exists(self.namespace, self.name):
                return  # forgotten meanwhile (delete_session, delete_profile)
            if where is not None and where[1] is not None:
                # Embedding 500 long messages and their memories takes more than a read.
                remaining = max(1.0, deadline - loop.time())
                await self._ms.ryw.wait_for_profile(self.namespace, self.name, where[1], remaining)
                return
            if loop.time() > deadline:
                raise ExtractionLagError(source, self.name, seq, EXTRACTION_TIMEOUT)
            await asyncio.sleep(pause)
            pause = min(pause * 2, _POLL[1])
            await self._read()

    async def delete(self, memory_id: str) -> dict[str, Any]:
        """Delete a memory and the raw messages it came from; returns the deleted memory.

        Raises:
            NotFoundError: no memory ``memory_id`` in this profile.
        """
        memory = await self.get(memory_id)
        result = await self._command(lambda p: p.delete_memory(memory["id"]))
        await self._read(result.seq)
        await self._ms.ryw.wait_for_profile(self.namespace, self.name, result.seq)
        return memory

    async def delete_session(self, session_id: str) -> None:
        """Forget every memory and message of a session (an unknown session: nothing)."""
        sid = check_memory_session_id(session_id)
        result = await self._command(lambda p: p.forget_session(sid))
        await self._read(result.seq)
        await self._ms.ryw.wait_for_profile(self.namespace, self.name, result.seq)

    # -- reads -------------------------------------------------------------------------------

    async def recall(
        self,
        query: str,
        *,
        thinking_level: str = "low",
        response_length: str = "medium",
        reference_date: datetime | str | None = None,
    ) -> dict[str, Any]:
        """``{"answer", "count", "candidates": [{id, type, summary, session_id, score, ...}]}``
        best first; nothing matches: ``{"answer": "", "count": 0, "candidates": []}``.

        Raises:
            InvalidInputError: a query over 1,024 UTF-8 bytes (or empty), an unknown
                thinking_level (low|medium|high) or response_length (short|medium|long).
        """
        text, level, length = check_recall(query, thinking_level, response_length)
        reference = (
            datetime.now(UTC)
            if reference_date is None
            else parse_time("reference_date", reference_date)
        )
        await self._read()
        await self._ms.ryw.wait_for_profile(self.namespace, self.name)
        analysis = self._ms.recall.analysis
        vector = await analysis.embed_query(text)
        cache = self._ms.recall.vector_cache
        inputs = RecallInputs(
            terms=query_terms(text),
            query_vector=vector,
            memory_index=cache.index(self._queries, self.namespace, self.name, MEMORY)
            if vector is not None
            else None,
            message_index=cache.index(self._queries, self.namespace, self.name, MESSAGE)
            if vector is not None
            else None,
            topic_keys=analysis.topic_keys(text),
            window=analysis.window(text, reference),
        )
        result = recall(
            self._queries,
            self.namespace,
            self.name,
            inputs,
            thinking_level=level,
            response_length=length,
        )
        model = self._ms.recall.answer_model()
        if model is not None and result["candidates"]:
            result["answer"] = await synthesized_answer(
                model, text, result["candidates"], length, result["answer"]
            )
        return result

    async def list(
        self,
        *,
        limit: int = 20,
        cursor: str | None = None,
        session_id: str | None = None,
        type: str | None = None,
    ) -> dict[str, Any]:
        """A page of memories, newest first, without ``content``: ``{"memories": [...],
        "cursor": str}`` (pass ``cursor`` back for the next page; no ``cursor`` on the last
        page).

        Raises:
            InvalidInputError: limit outside 1–500, an unknown type or a malformed cursor.
        """
        size = check_list_limit(limit)
        after = _decode_cursor(cursor)
        sid = None if session_id is None else check_memory_session_id(session_id)
        if type is not None and type not in MEMORY_TYPES:
            raise InvalidInputError(
                f"type is {type!r}; it must be one of {', '.join(MEMORY_TYPES)}"
            )
        await self._read()
        rows, more = self._queries.page(
            self.namespace, self.name, size, after, session_id=sid, type=type
        )
        page: dict[str, Any] = {"memories": rows}
        if more is not None:  # absent on the last page (the reference's ``cursor?: string``)
            page["cursor"] = _encode_cursor(more)
        return page

    async def get(self, memory_id: str) -> dict[str, Any]:
        """The memory with ``content`` and ``source_message_ids``.

        Raises:
            NotFoundError: no memory ``memory_id`` in this profile.
        """
        memory_id = check_memory_id(memory_id)
        await self._read()
        memory = self._queries.memory(self.namespace, self.name, memory_id)
        if memory is None:
            raise NotFoundError(f"memory {memory_id!r} does not exist in profile {self.name!r}")
        return memory

    async def get_message(self, message_id: str) -> dict[str, Any]:
        """A raw message: ``{id, session_id, role, content, timestamp}``.

        Raises:
            NotFoundError: no message ``message_id`` in this profile.
        """
        message_id = check_message_ref(message_id)
        await self._read()
        message = self._queries.message(self.namespace, self.name, message_id)
        if message is None:
            raise NotFoundError(f"message {message_id!r} does not exist in profile {self.name!r}")
        return message

    async def history(self, memory_id: str) -> Records:
        """The memory's topic chain, oldest first: what it superseded and what superseded it,
        each with its events (``created``, ``superseded``, ``supersedes``) and ``current``.

        Raises:
            NotFoundError: no memory ``memory_id`` in this profile.
        """
        memory_id = check_memory_id(memory_id)
        await self._read()
        chain = self._queries.history(self.namespace, self.name, memory_id)
        if chain is None:
            raise NotFoundError(f"memory {memory_id!r} does not exist in profile {self.name!r}")
        return chain

    async def get_summary(self, *, session_id: str | None = None) -> dict[str, str]:
        """``{"summary": markdown}``: Key Facts, Recent Events, Active Tasks, Last Session,
        Instructions (empty sections left out)."""
        sid = None if session_id is None else check_memory_session_id(session_id)
        await self._read()
        memories = self._queries.all_memories(self.namespace, self.name)
        return {"summary": summarize(memories, datetime.now(UTC), sid)}


ANSWER_PROMPT: Final = """Answer the question from these memories only. Say nothing that they do not
support; if they do not answer it, reply with an empty line. Be {length}: at most {chars}
characters. Dates are as the memories give them.

Memories (best first):
{memories}

Question: {question}
Answer:"""


async def synthesized_answer(
    model: Callable[[str], Awaitable[str]],
    question: str,
    candidates: Sequence[dict[str, Any]],
    response_length: str,
    fallback: str,
) -> str:
    """The model's answer from the top candidates only, cut to the ``response_length`` budget;
    the extractive ``fallback`` when the model fails (logged)."""
    chars = ANSWER_CHARS[response_length]
    listed = "\n".join(
        f"- [{c['type']}{', ' + c['event_time'][:10] if c.get('event_time') else ''}] "
        f"{c['summary']}"
        for c in candidates[: ANSWER_CANDIDATES[response_length] * 2]
    )
    prompt = ANSWER_PROMPT.format(
        length=response_length, chars=chars, memories=listed, question=question
    )
    try:
        answer = (await model(prompt)).strip()
    except MemstreamError as error:
        logger.warning("recall: the answer model failed (%s); answering extractively", error)
        return fallback
    return answer[:chars]


def _encode_cursor(rid: int) -> str:
    return base64.urlsafe_b64encode(f"m:{rid}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: object) -> int | None:
    if cursor is None:
        return None
    if not isinstance(cursor, str) or len(cursor) > 64:
        raise InvalidInputError("cursor is not a cursor that list() returned")
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, value = text.partition(":")
        rid = int(value)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidInputError("cursor is not a cursor that list() returned") from None
    if kind != "m" or rid < 1:
        raise InvalidInputError("cursor is not a cursor that list() returned")
    return rid
