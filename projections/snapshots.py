"""Snapshots of aggregates as a read model holds them (any backend): what a writer restores an
aggregate from instead of replaying its subject, and the window its lazy lookups may use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memstream.domain.context import ContextDocument, SearchIndex, StoredEntries
from memstream.domain.message_index import StoredMessages, StoredMessagesMoved
from memstream.domain.session import SessionAggregate
from memstream.domain.session_registry import SessionRecord


class LookupWindow:
    """Where a snapshot's lazy lookups may run: inside a reading (``low`` None: any position),
    or guarded (the recorded position within ``low..high``, checked by each lookup)."""

    __slots__ = ("high", "low")

    def __init__(self) -> None:
        self.low: int | None = None
        self.high = 0

    def admit(self, seq: int | None, what: str) -> None:
        """Check a guarded lookup's recorded position (nothing to check inside a reading).

        Raises:
            StoredMessagesMoved: ``what`` is at ``seq`` (``None``: gone or renumbered), outside
                the positions the lookup may use.
        """
        if self.low is not None and (seq is None or not self.low <= seq <= self.high):
            raise StoredMessagesMoved(f"{what} is at {seq}")


@dataclass(frozen=True, slots=True)
class SessionSnapshot:
    """A session as the read model holds it: at stream sequence ``seq`` (0: no event yet)."""

    namespace: str
    session_id: str
    seq: int
    version: int
    frozen_prompt: str | None
    loaded_skills: tuple[str, ...]
    messages: StoredMessages

    def restore(self) -> SessionAggregate:
        """The Session aggregate as of :attr:`seq` (valid inside the reading it came from, and
        in later readings while the session's recorded position stays the same)."""
        return SessionAggregate.restore(
            self.namespace,
            self.session_id,
            version=self.version,
            messages=self.messages,
            frozen_prompt=self.frozen_prompt,
            loaded_skills=self.loaded_skills,
        )

    def rebind(self, session: SessionAggregate) -> None:
        """Point a session restored earlier at this reading's rows (same content at the same
        position, but a rebuilt read model numbers its rows anew)."""
        session.messages.rebind(self.messages)


@dataclass(frozen=True, slots=True)
class DocumentSnapshot:
    """A built-in block as the read model holds it: after stream sequence ``seq`` (0: never
    written)."""

    namespace: str
    identity: str
    seq: int
    version: int
    content: str | None

    def restore(self) -> ContextDocument:
        if self.seq == 0:
            return ContextDocument.empty(self.namespace, self.identity)
        return ContextDocument.restore(
            self.namespace, self.identity, content=self.content, version=self.version
        )

    def rebind(self, aggregate: ContextDocument) -> None:
        pass  # a document holds its whole content: nothing is looked up later


@dataclass(frozen=True, slots=True)
class SearchSnapshot:
    """A search block as the read model holds it: after stream sequence ``seq`` (0: empty)."""

    namespace: str
    key: str
    seq: int
    version: int
    entries: StoredEntries

    def restore(self) -> SearchIndex:
        if self.seq == 0:
            return SearchIndex.empty(self.namespace, self.key)
        return SearchIndex.restore(
            self.namespace, self.key, version=self.version, entries=self.entries
        )

    def rebind(self, aggregate: SearchIndex) -> None:
        aggregate.digests.rebind(self.entries)


@dataclass(frozen=True, slots=True)
class RecordSnapshot:
    """A session's registry record as the read model holds it: after stream sequence ``seq``
    (0: not registered, or removed: its few events are replayed)."""

    namespace: str
    session_id: str
    seq: int
    version: int
    state: dict[str, Any]

    def restore(self) -> SessionRecord:
        if self.seq == 0:
            return SessionRecord.empty(self.namespace, self.session_id)
        return SessionRecord.restore(self.namespace, self.session_id, self.version, **self.state)

    def rebind(self, aggregate: SessionRecord) -> None:
        pass  # a record holds its whole state: nothing is looked up later
