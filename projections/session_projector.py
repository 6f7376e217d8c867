"""The session projector: a pure function from a session event to read-model writes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memstream.domain.messages import decode_message, searchable_text
from memstream.domain.purge_log import PurgeLog
from memstream.domain.session import SessionAggregate

# Positions order messages within the log: stream sequence, then index inside a batch event.
BATCH_SLOTS = 1024


@dataclass(frozen=True, slots=True)
class InsertMessage:
    namespace: str
    session_id: str
    message_id: str
    parent_id: str | None
    role: str
    content: str
    text: str
    position: int
    created_at: str


@dataclass(frozen=True, slots=True)
class UpdateMessage:
    namespace: str
    session_id: str
    message_id: str
    content: str
    text: str


@dataclass(frozen=True, slots=True)
class DeleteMessages:
    namespace: str
    session_id: str
    message_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClearSession:
    namespace: str
    session_id: str


@dataclass(frozen=True, slots=True)
class InsertCompaction:
    namespace: str
    session_id: str
    compaction_id: str
    summary: str
    from_message_id: str
    to_message_id: str
    position: int
    created_at: str


@dataclass(frozen=True, slots=True)
class RecordPosition:
    """The session's last event so far: its stream sequence and aggregate version (what a writer
    restoring the session from this read model publishes after)."""

    namespace: str
    session_id: str
    seq: int
    version: int


def missing_versions(position: RecordPosition, last: int | None) -> str | None:
    """A line naming the versions of a session missing between the last one a read model
    applied (``last``; ``None``: none known) and ``position``'s, or ``None`` when none is.

    Every event of a session carries the next version of its aggregate, so a gap is an event
    the log that was read does not hold: a server's copy that lost acknowledged events (a
    damaged store), or an event that became a dead letter here."""
    if last is None or position.version <= last + 1:
        return None
    missing = (
        str(last + 1) if position.version == last + 2 else f"{last + 1}-{position.version - 1}"
    )
    return (
        f"session {position.session_id!r} ({position.namespace}): its event at sequence "
        f"{position.seq} has version {position.version}, the read model's last is {last}: "
        f"version {missing} is missing from the log that was read (a server's damaged copy? "
        f"a dead letter?); run `memstream doctor`"
    )


# Sessions whose last version a writer keeps (the rest are read again when they come back).
VERSIONS_KEPT = 4096


def next_version(
    versions: dict[tuple[str, str], int],
    position: RecordPosition,
    stored: Callable[[tuple[str, str]], int | None],
) -> str | None:
    """Record ``position``'s version as its session's last in ``versions`` (a writer's cache;
    ``stored(key)`` reads the read model's when the cache has none) and return
    :func:`missing_versions` of it."""
    key = (position.namespace, position.session_id)
    last = versions.get(key)
    if last is None:
        last = stored(key)
    if len(versions) >= VERSIONS_KEPT:
        versions.clear()
    versions[key] = position.version
    return missing_versions(position, last)


@dataclass(frozen=True, slots=True)
class RecordPrompt:
    """The session's frozen system prompt (decision state kept next to the messages;
    ``None``: cleared)."""

    namespace: str
    session_id: str
    prompt: str | None


@dataclass(frozen=True, slots=True)
class RecordSkill:
    """A skill (``"label:key"``) was loaded into, or unloaded from, the session."""

    namespace: str
    session_id: str
    skill: str
    loaded: bool


@dataclass(frozen=True, slots=True)
class ForgetPurged:
    """Events were purged (``purge.events_purged``): remove every row of a session of
    ``namespace`` whose last event is at one of ``sequences`` (its subject was erased; a cleared
    session still has its key and decision state, which a rebuild would not have)."""

    namespace: str
    sequences: tuple[int, ...]


SessionWrite = (
    InsertMessage
    | UpdateMessage
    | DeleteMessages
    | ClearSession
    | InsertCompaction
    | RecordPosition
    | RecordPrompt
    | RecordSkill
    | ForgetPurged
)


def indexed_text(content: str) -> str:
    """The text a message row with JSON ``content`` has in the full-text index. The index keeps
    no copy of it (contentless): removing a row's terms takes this text again, so it must stay
    a function of the content alone (a change to it needs the sessions projection rebuilt)."""
    return searchable_text(decode_message(content) or {})


def _insert(namespace: str, event: Any, entry: dict[str, Any], position: int) -> InsertMessage:
    content: str = entry["message_json"]
    message = decode_message(content) or {}
    return InsertMessage(
        namespace=namespace,
        session_id=event.session_id,
        message_id=entry["message_id"],
        parent_id=entry["parent_id"],
        role=str(message.get("role", "")),
        content=content,
        text=searchable_text(message),
        position=position,
        created_at=event.timestamp.isoformat(),
    )


def project_session_event(namespace: str, seq: int, event: object) -> list[SessionWrite]:
    """Writes that apply ``event`` (at stream sequence ``seq``) to the session read models.

    Every session event also records the session's position (its last sequence and version),
    so that the read model is a snapshot commands can be decided on: its rows as of that
    position, plus the events after it.
    """
    if isinstance(event, PurgeLog.EventsPurged):
        return [ForgetPurged(namespace, tuple(event.sequences))]
    if not isinstance(event, SessionAggregate.Event):
        return []
    position = RecordPosition(namespace, event.session_id, seq, event.originator_version)
    return [*_writes(namespace, seq, event), position]


def _writes(namespace: str, seq: int, event: SessionAggregate.Event) -> list[SessionWrite]:
    base = seq * BATCH_SLOTS
    if isinstance(event, SessionAggregate.MessageAppended):
        entry = {
            "message_id": event.message_id,
            "parent_id": event.parent_id,
            "message_json": event.message_json,
        }
        return [_insert(namespace, event, entry, base)]
    if isinstance(event, SessionAggregate.MessagesAppended):
        return [_insert(namespace, event, e, base + i) for i, e in enumerate(event.entries)]
    if isinstance(event, SessionAggregate.MessageUpdated):
        message = decode_message(event.message_json) or {}
        return [
            UpdateMessage(
                namespace,
                event.session_id,
                event.message_id,
                event.message_json,
                searchable_text(message),
            )
        ]
    if isinstance(event, SessionAggregate.MessagesDeleted):
        return [DeleteMessages(namespace, event.session_id, tuple(event.message_ids))]
    if isinstance(event, SessionAggregate.MessagesCleared):
        return [ClearSession(namespace, event.session_id)]
    if isinstance(event, SessionAggregate.CompactionAdded):
        return [
            InsertCompaction(
                namespace,
                event.session_id,
                event.compaction_id,
                event.summary,
                event.from_message_id,
                event.to_message_id,
                base,
                event.timestamp.isoformat(),
            )
        ]
    if isinstance(event, SessionAggregate.SystemPromptFrozen):
        return [RecordPrompt(namespace, event.session_id, event.prompt)]
    if isinstance(event, SessionAggregate.SystemPromptCleared):
        return [RecordPrompt(namespace, event.session_id, None)]
    if isinstance(event, SessionAggregate.SkillLoaded | SessionAggregate.SkillUnloaded):
        loaded = isinstance(event, SessionAggregate.SkillLoaded)
        return [RecordSkill(namespace, event.session_id, f"{event.label}:{event.key}", loaded)]
    return []
