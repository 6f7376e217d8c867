"""The vectors projector: a pure function from an Agent Memory event to the texts to embed and
the vectors to remove.

Embeddings are derived data: the indexer computes them from the texts the log holds (a memory's
summary, search queries and content; a raw message's content), records the model's name with
each vector, and computes them again on a rebuild (extraction output, by contrast, is never
re-run: it is in the log).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from memstream.domain.memory_profile import MemoryProfile

if TYPE_CHECKING:
    from memstream.projections.ports import TextEncoder

MEMORY: Final = "memory"
MESSAGE: Final = "message"
# What of a text is embedded (the bundled model reads 256 word pieces, about 1,000 characters).
TEXT_MAX_CHARS: Final = 2000


@dataclass(frozen=True, slots=True)
class EmbedTexts:
    """Vectors to store: ``items`` are ``(id, session_id, text)`` of one kind."""

    namespace: str
    profile: str
    kind: str
    items: Sequence[tuple[str, str | None, str]]
    seq: int


@dataclass(frozen=True, slots=True)
class DropVectors:
    """Vectors to remove: by ids of a kind, by session, or (neither) the whole profile's."""

    namespace: str
    profile: str
    kind: str | None = None
    ids: tuple[str, ...] = ()
    session_id: str | None = None


VectorWrite = EmbedTexts | DropVectors


def memory_text(memory: dict[str, Any]) -> str:
    """What is embedded of a memory: the queries it answers and its summary, then its content
    unless it came from messages (their own vectors carry it, and recall maps them back to
    the memory: embedding it twice cost more than the messages themselves)."""
    parts = [str(memory.get("summary") or "")]
    parts.extend(str(query) for query in memory.get("queries") or ())
    if not memory.get("source_message_ids"):
        parts.append(str(memory.get("content") or ""))
    return "\n".join(part for part in parts if part)[:TEXT_MAX_CHARS]


def project_vector_event(namespace: str, seq: int, event: object) -> list[VectorWrite]:
    """Writes that apply ``event`` (at stream sequence ``seq``) to the vectors read model."""
    if not isinstance(event, MemoryProfile.Event):
        return []
    profile = event.profile
    if isinstance(event, MemoryProfile.ConversationIngested):
        items: list[tuple[str, str | None, str]] = [
            (str(m["id"]), event.session_id, str(m["content"])[:TEXT_MAX_CHARS])
            for m in event.messages
            if str(m.get("content") or "").strip()
        ]
        return [EmbedTexts(namespace, profile, MESSAGE, items, seq)] if items else []
    if isinstance(event, MemoryProfile.MemoriesExtracted):
        made = [(str(m["id"]), m.get("session_id"), memory_text(m)) for m in event.memories]
        return [EmbedTexts(namespace, profile, MEMORY, made, seq)] if made else []
    if isinstance(event, MemoryProfile.MemoryDeleted):
        return [
            DropVectors(namespace, profile, MEMORY, ids=(event.memory_id,)),
            DropVectors(namespace, profile, MESSAGE, ids=tuple(event.message_ids)),
        ]
    if isinstance(event, MemoryProfile.SessionForgotten):
        return [DropVectors(namespace, profile, session_id=event.session_id)]
    if isinstance(event, MemoryProfile.ProfileDeleted):
        return [DropVectors(namespace, profile)]
    return []


class PreparedVectors:
    """The texts of a batch's events embedded together before its transaction begins (a model
    takes seconds; nothing of the read model is locked meanwhile), then handed out per write."""

    def __init__(self, encoder: TextEncoder) -> None:
        self.encoder = encoder
        self.ready: dict[tuple[int, str, str], Any] = {}  # (seq, kind, id) -> vector

    def prepare(self, events: Sequence[tuple[str, int, object]]) -> None:
        """Embed the texts of a batch's events ``(namespace, seq, event)`` at once."""
        self.ready.clear()
        keys: list[tuple[int, str, str]] = []
        texts: list[str] = []
        for namespace, seq, event in events:
            for write in project_vector_event(namespace, seq, event):
                if isinstance(write, EmbedTexts):
                    for item_id, _, text in write.items:
                        keys.append((seq, write.kind, item_id))
                        texts.append(text)
        if texts:
            self.ready = dict(zip(keys, self.encoder.encode(texts), strict=True))

    def vectors(self, seq: int, write: EmbedTexts) -> list[Any]:
        """The vectors of ``write``'s items: prepared, or embedded now (an event the batch's
        preparation did not see)."""
        keys = [(seq, write.kind, item_id) for item_id, _, _ in write.items]
        if all(key in self.ready for key in keys):
            return [self.ready[key] for key in keys]
        return list(self.encoder.encode([text for _, _, text in write.items]))
