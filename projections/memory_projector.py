"""The memory projector: a pure function from an Agent Memory event to read-model writes.

The memory read model holds a namespace's profiles, their raw messages (searchable), their
memories with provenance (source messages), supersession links and event times (searchable),
the history of each memory, and which extraction sources (ingests, remembered texts) are done:
what ``ingest(wait=True)`` waits for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memstream.domain.memory_profile import MemoryProfile


@dataclass(frozen=True, slots=True)
class CreateProfile:
    namespace: str
    profile: str
    at: str
    seq: int


@dataclass(frozen=True, slots=True)
class AddMessages:
    namespace: str
    profile: str
    session_id: str
    messages: list[dict[str, Any]]  # id, role, content, timestamp
    seq: int


@dataclass(frozen=True, slots=True)
class AddSource:
    """An extraction source (an ingest, a remembered text) waiting for the extractor."""

    namespace: str
    profile: str
    source: str
    session_id: str | None
    seq: int


@dataclass(frozen=True, slots=True)
class AddMemories:
    namespace: str
    profile: str
    source: str
    extractor: str  # "name/version"
    memories: list[dict[str, Any]]
    at: str
    seq: int


@dataclass(frozen=True, slots=True)
class Supersede:
    namespace: str
    profile: str
    memory_id: str
    superseded_by: str
    at: str
    seq: int


@dataclass(frozen=True, slots=True)
class DeleteMemory:
    namespace: str
    profile: str
    memory_id: str
    message_ids: list[str]


@dataclass(frozen=True, slots=True)
class ForgetSession:
    namespace: str
    profile: str
    session_id: str


@dataclass(frozen=True, slots=True)
class DeleteProfile:
    namespace: str
    profile: str


MemoryWrite = (
    CreateProfile
    | AddMessages
    | AddSource
    | AddMemories
    | Supersede
    | DeleteMemory
    | ForgetSession
    | DeleteProfile
)


def project_memory_event(namespace: str, seq: int, event: object) -> list[MemoryWrite]:
    """Writes that apply ``event`` (at stream sequence ``seq``) to the memory read model."""
    if not isinstance(event, MemoryProfile.Event):
        return []
    profile = event.profile
    at = event.timestamp.isoformat().replace("+00:00", "Z")
    if isinstance(event, MemoryProfile.ConversationIngested):
        writes: list[MemoryWrite] = [
            AddMessages(namespace, profile, event.session_id, list(event.messages), seq)
        ]
        if event.part == event.parts:
            writes.append(AddSource(namespace, profile, event.ingest_id, event.session_id, seq))
        return writes
    if isinstance(event, MemoryProfile.MemoriesExtracted):
        extractor = f"{event.extractor.get('name', '?')}/{event.extractor.get('version', '?')}"
        return [
            AddMemories(namespace, profile, event.source, extractor, list(event.memories), at, seq)
        ]
    if isinstance(event, MemoryProfile.MemorySuperseded):
        return [Supersede(namespace, profile, event.memory_id, event.superseded_by, at, seq)]
    if isinstance(event, MemoryProfile.MemoryRemembered):
        return [AddSource(namespace, profile, event.memory_id, event.session_id, seq)]
    if isinstance(event, MemoryProfile.MemoryDeleted):
        return [DeleteMemory(namespace, profile, event.memory_id, list(event.message_ids))]
    if isinstance(event, MemoryProfile.SessionForgotten):
        return [ForgetSession(namespace, profile, event.session_id)]
    if isinstance(event, MemoryProfile.ProfileDeleted):
        return [DeleteProfile(namespace, profile)]
    if isinstance(event, MemoryProfile.ProfileCreated):
        return [CreateProfile(namespace, profile, at, seq)]
    return []
