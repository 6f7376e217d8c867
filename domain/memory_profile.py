"""An Agent Memory profile: the aggregate that decides its ingests, extractions, supersessions
and deletions (spec memory.md Part B).

One :class:`MemoryProfile` per (namespace, profile name), on a subject of its own
(``<prefix>.<namespace>.profile.<name>``). Its state is what decisions need and nothing more:
which raw messages it holds (content addresses, by session), which extraction sources are done,
and per memory its type, topic key, session, sources and supersession links. Memory text lives
in the events and the read models, never here.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from eventsourcing.domain import Aggregate

from memstream.domain.aggregates import empty_aggregate, next_event
from memstream.domain.errors import InvalidInputError, NotFoundError
from memstream.domain.extraction.model import SUPERSEDED_TYPES
from memstream.domain.memory_input import IngestMessage

_NAMESPACE = uuid.UUID("2b0f64a4-9f3d-4e4e-8f60-7c2d61f3a9e1")
# An ingest's messages are split over events of at most this many bytes of message JSON (the
# embedded server takes 8 MiB per message; 500 × 32 KB is 16 MB). The parts are published as
# one atomic batch.
PART_MAX_BYTES: Final = 2 * 1024 * 1024
E = TypeVar("E", bound=Aggregate.Event)


def profile_aggregate_id(namespace: str, profile: str) -> uuid.UUID:
    """The deterministic aggregate id of a profile."""
    return uuid.uuid5(_NAMESPACE, f"{namespace}\x00{profile}")


def content_id(*parts: str) -> str:
    """A 128-bit hex digest of ``parts`` (length-prefixed, so no two tuples collide)."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()[:32]


@dataclass(slots=True)
class MemoryState:
    """What decisions need of one memory."""

    type: str
    topic_key: str
    session_id: str | None
    sources: tuple[str, ...]
    supersedes: str | None = None
    superseded_by: str | None = None


def older_id(memory: MemoryState) -> str:
    assert memory.supersedes is not None
    return memory.supersedes


def _nth(aggregate: Aggregate, offset: int, event_class: type[E], **fields: Any) -> E:
    """``event_class`` as the ``offset``-th event (1: the next) of one decision."""
    event = next_event(aggregate, event_class, **fields)
    object.__setattr__(event, "originator_version", aggregate.version + offset)
    return event


class MemoryProfile(Aggregate):
    """A profile's decision state (``exists`` from its creation until it is deleted)."""

    class Event(Aggregate.Event):
        profile: str

    class ProfileCreated(Event):
        def apply(self, aggregate: Any) -> None:
            aggregate.reset()
            aggregate.exists = True

    class ConversationIngested(Event):
        """Raw messages of one ingest (or one part of it: ``part`` of ``parts``)."""

        ingest_id: str
        session_id: str
        part: int
        parts: int
        messages: list[dict[str, Any]]

        def apply(self, aggregate: Any) -> None:
            for message in self.messages:
                aggregate.messages[message["id"]] = self.session_id
            if self.part == self.parts:
                aggregate.pending[self.ingest_id] = self.session_id

    class MemoryRemembered(Event):
        memory_id: str
        content: str
        session_id: str | None

        def apply(self, aggregate: Any) -> None:
            aggregate.pending[self.memory_id] = self.session_id

    class MemoriesExtracted(Event):
        """What the extractor made of one source (an ingest or a remembered text): memories
        as plain objects (``id``, ``type``, ``topic_key``, ``summary``, ``content``,
        ``keywords``, ``queries``, ``source_message_ids``, ``event_time``, ``session_id``)."""

        source: str
        extractor: dict[str, Any]
        memories: list[dict[str, Any]]

        def apply(self, aggregate: Any) -> None:
            aggregate.pending.pop(self.source, None)
            aggregate.done.add(self.source)
            for memory in self.memories:
                aggregate.memories[memory["id"]] = MemoryState(
                    memory["type"],
                    memory["topic_key"],
                    memory.get("session_id"),
                    tuple(memory.get("source_message_ids") or ()),
                )
                if memory["type"] in SUPERSEDED_TYPES:
                    aggregate.topics[memory["topic_key"]] = memory["id"]

    class MemorySuperseded(Event):
        memory_id: str
        superseded_by: str

        def apply(self, aggregate: Any) -> None:
            old = aggregate.memories.get(self.memory_id)
            new = aggregate.memories.get(self.superseded_by)
            if old is not None:
                old.superseded_by = self.superseded_by
            if new is not None:
                new.supersedes = self.memory_id

    class MemoryDeleted(Event):
        """A memory and the raw messages it came from (``message_ids``) are gone."""

        memory_id: str
        message_ids: list[str]

        def apply(self, aggregate: Any) -> None:
            aggregate.removals += 1
            for message_id in self.message_ids:
                aggregate.messages.pop(message_id, None)
            aggregate.unlink(self.memory_id)

    class SessionForgotten(Event):
        session_id: str

        def apply(self, aggregate: Any) -> None:
            aggregate.removals += 1
            aggregate.messages = {
                m: s for m, s in aggregate.messages.items() if s != self.session_id
            }
            aggregate.pending = {k: s for k, s in aggregate.pending.items() if s != self.session_id}
            for memory_id, memory in list(aggregate.memories.items()):
                if memory.session_id == self.session_id:
                    aggregate.unlink(memory_id)

    class ProfileDeleted(Event):
        def apply(self, aggregate: Any) -> None:
            aggregate.removals += 1
            aggregate.reset()

    profile: str
    exists: bool
    messages: dict[str, str]  # raw message id -> its session id
    pending: dict[str, str | None]  # extraction sources not extracted yet -> session id
    done: set[str]  # extraction sources extracted
    memories: dict[str, MemoryState]
    topics: dict[str, str]  # topic key -> current memory (facts and instructions)
    # How many events removed raw messages (a memory deleted with its sources, a session
    # forgotten, the profile deleted), over the profile's whole log: see generation().
    removals: int

    @classmethod
    def empty(cls, namespace: str, profile: str) -> MemoryProfile:
        """A profile with no events yet (it does not exist)."""
        aggregate = empty_aggregate(cls, profile_aggregate_id(namespace, profile))
        aggregate.profile = profile
        aggregate.removals = 0
        aggregate.reset()
        return aggregate

    def reset(self) -> None:
        self.exists = False
        self.messages = {}
        self.pending = {}
        self.done = set()
        self.memories = {}
        self.topics = {}

    def generation(self) -> str:
        """``""`` until the profile first removed raw messages; then a mark that changes with
        each removal. Ingests of the same messages before and after a removal are different
        ingests (the messages were gone in between): their ids, and the command ids derived
        from them, must differ, or the log's duplicate window and the extractor's record of
        done sources would drop the later one."""
        return str(self.removals) if self.removals else ""

    def unlink(self, memory_id: str) -> None:
        """Remove a memory; what it superseded becomes current again (if it is still here)."""
        memory = self.memories.pop(memory_id, None)
        if memory is None:
            return
        older = self.memories.get(memory.supersedes or "")
        newer = self.memories.get(memory.superseded_by or "")
        if older is not None:
            older.superseded_by = memory.superseded_by if newer is not None else None
        if newer is not None:
            newer.supersedes = memory.supersedes if older is not None else None
        if self.topics.get(memory.topic_key) == memory_id:
            if older is not None:
                self.topics[memory.topic_key] = older_id(memory)
            else:
                del self.topics[memory.topic_key]

    # -- decisions -------------------------------------------------------------------------

    def _require(self) -> None:
        if not self.exists:
            raise NotFoundError(f"profile {self.profile!r} does not exist")

    def create(self) -> list[Aggregate.Event]:
        """Create the profile (nothing to do when it exists)."""
        if self.exists:
            return []
        return [next_event(self, self.ProfileCreated, profile=self.profile)]

    def ingest(self, session_id: str, messages: list[IngestMessage]) -> list[Aggregate.Event]:
        """Record the messages the profile does not hold yet (none: nothing to do), split into
        parts of at most :data:`PART_MAX_BYTES`. The ingest's id is the content address of its
        new messages: an ingest decided twice is one ingest."""
        self._require()
        new = [m for m in messages if m.id not in self.messages]
        if not new:
            return []
        generation = self.generation()
        marks = (f"generation {generation}",) if generation else ()
        ingest_id = "i-" + content_id(self.profile, session_id, *marks, *(m.id for m in new))
        parts: list[list[dict[str, Any]]] = [[]]
        size = 0
        for message in new:
            item = message.as_dict()
            item_size = len(json.dumps(item, ensure_ascii=False).encode("utf-8"))
            if parts[-1] and size + item_size > PART_MAX_BYTES:
                parts.append([])
                size = 0
            parts[-1].append(item)
            size += item_size
        events: list[Aggregate.Event] = []
        for number, items in enumerate(parts, start=1):
            event = _nth(
                self,
                number,
                self.ConversationIngested,
                profile=self.profile,
                ingest_id=ingest_id,
                session_id=session_id,
                part=number,
                parts=len(parts),
                messages=items,
            )
            events.append(event)
        return events

    def remember(
        self, memory_id: str, content: str, session_id: str | None
    ) -> list[Aggregate.Event]:
        """Record a text to remember as memory ``memory_id`` (the extractor classifies it)."""
        self._require()
        if memory_id in self.memories or memory_id in self.pending or memory_id in self.done:
            raise InvalidInputError(f"memory {memory_id!r} exists already")
        return [
            next_event(
                self,
                self.MemoryRemembered,
                profile=self.profile,
                memory_id=memory_id,
                content=content,
                session_id=session_id,
            )
        ]

    def record_extraction(
        self, source: str, extractor: dict[str, Any], memories: list[dict[str, Any]]
    ) -> list[Aggregate.Event]:
        """Record what the extractor made of ``source`` (once: a source extracted before, or
        one no longer pending — its messages were forgotten meanwhile — records nothing).
        Memories whose source messages are gone are left out. A fact or instruction on a topic
        that has a current memory supersedes it."""
        if not self.exists or source in self.done or source not in self.pending:
            return []
        kept = [
            memory
            for memory in memories
            if all(m in self.messages for m in memory.get("source_message_ids") or ())
        ]
        events: list[Aggregate.Event] = [
            next_event(
                self,
                self.MemoriesExtracted,
                profile=self.profile,
                source=source,
                extractor=extractor,
                memories=kept,
            )
        ]
        heads = dict(self.topics)
        for memory in kept:
            if memory["type"] not in SUPERSEDED_TYPES:
                continue
            old = heads.get(memory["topic_key"])
            heads[memory["topic_key"]] = memory["id"]
            if old and old != memory["id"]:
                events.append(
                    _nth(
                        self,
                        len(events) + 1,
                        self.MemorySuperseded,
                        profile=self.profile,
                        memory_id=old,
                        superseded_by=memory["id"],
                    )
                )
        return events

    def delete_memory(self, memory_id: str) -> list[Aggregate.Event]:
        """Delete a memory and the raw messages it came from.

        Raises:
            NotFoundError: the profile holds no memory ``memory_id``.
        """
        memory = self.memories.get(memory_id) if self.exists else None
        if memory is None:
            raise NotFoundError(f"memory {memory_id!r} does not exist in profile {self.profile!r}")
        return [
            next_event(
                self,
                self.MemoryDeleted,
                profile=self.profile,
                memory_id=memory_id,
                message_ids=[m for m in memory.sources if m in self.messages],
            )
        ]

    def forget_session(self, session_id: str) -> list[Aggregate.Event]:
        """Forget a session's messages and memories (an unknown session: nothing to do)."""
        if not self.exists:
            return []
        held = (
            session_id in self.messages.values()
            or session_id in self.pending.values()
            or any(m.session_id == session_id for m in self.memories.values())
        )
        if not held:
            return []
        return [
            next_event(self, self.SessionForgotten, profile=self.profile, session_id=session_id)
        ]

    def delete(self) -> list[Aggregate.Event]:
        """Delete the profile with everything it holds (an unknown profile: nothing to do)."""
        if not self.exists:
            return []
        return [next_event(self, self.ProfileDeleted, profile=self.profile)]
