"""The context projector: a pure function from an event to context read-model writes.

Context read models: built-in block documents, cached (frozen) system prompts, search-block
entries with their full-text index, and the skills loaded in each session.
"""

from __future__ import annotations

from dataclasses import dataclass

from memstream.domain.context import ContextDocument, SearchIndex
from memstream.domain.session import SessionAggregate


@dataclass(frozen=True, slots=True)
class WriteBlock:
    namespace: str
    key: str
    label: str
    session_id: str | None
    content: str
    seq: int
    updated_at: str
    version: int  # the document's aggregate version after this write (what restores it)


@dataclass(frozen=True, slots=True)
class WritePrompt:
    namespace: str
    session_id: str
    prompt: str
    seq: int
    frozen_at: str


@dataclass(frozen=True, slots=True)
class IndexEntry:
    namespace: str
    block_key: str
    entry_key: str
    content: str
    seq: int
    updated_at: str
    version: int  # the search block's aggregate version after this entry


@dataclass(frozen=True, slots=True)
class LoadSkill:
    namespace: str
    session_id: str
    label: str
    key: str
    seq: int


@dataclass(frozen=True, slots=True)
class UnloadSkill:
    namespace: str
    session_id: str
    label: str
    key: str


@dataclass(frozen=True, slots=True)
class ClearSkills:
    namespace: str
    session_id: str


@dataclass(frozen=True, slots=True)
class DropBlock:
    namespace: str
    session_id: str | None
    label: str


@dataclass(frozen=True, slots=True)
class DropPrompt:
    namespace: str
    session_id: str


ContextWrite = (
    WriteBlock
    | WritePrompt
    | IndexEntry
    | LoadSkill
    | UnloadSkill
    | ClearSkills
    | DropBlock
    | DropPrompt
)


def project_context_event(namespace: str, seq: int, event: object) -> list[ContextWrite]:
    """Writes that apply ``event`` (at stream sequence ``seq``) to the context read models."""
    if isinstance(event, ContextDocument.ContextBlockWritten):
        return [
            WriteBlock(
                namespace,
                event.key,
                event.label,
                event.session_id,
                event.content,
                seq,
                event.timestamp.isoformat(),
                event.originator_version,
            )
        ]
    if isinstance(event, SearchIndex.SearchEntryIndexed):
        return [
            IndexEntry(
                namespace,
                event.key,
                event.entry_key,
                event.content,
                seq,
                event.timestamp.isoformat(),
                event.originator_version,
            )
        ]
    if isinstance(event, SessionAggregate.SystemPromptFrozen):
        return [
            WritePrompt(namespace, event.session_id, event.prompt, seq, event.timestamp.isoformat())
        ]
    if isinstance(event, ContextDocument.ContextBlockDeleted):
        return [DropBlock(namespace, event.session_id, event.label)]
    if isinstance(event, SessionAggregate.SystemPromptCleared):
        return [DropPrompt(namespace, event.session_id)]
    if isinstance(event, SessionAggregate.SkillLoaded):
        return [LoadSkill(namespace, event.session_id, event.label, event.key, seq)]
    if isinstance(event, SessionAggregate.SkillUnloaded):
        return [UnloadSkill(namespace, event.session_id, event.label, event.key)]
    if isinstance(event, SessionAggregate.MessagesCleared):
        return [ClearSkills(namespace, event.session_id)]
    return []
