"""The registry projector: a pure function from an event to session-registry writes.

The registry read model holds one row per registered session (``SessionManager.create``): its
name, model, source, parent, usage counters, end reason and times. Every event of a registered
session's messages touches its ``updated_at`` too (the reference's "touch"), so sessions list
most recently active first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from memstream.domain.session import SessionAggregate
from memstream.domain.session_registry import SessionRecord


@dataclass(frozen=True, slots=True)
class RegisterSession:
    namespace: str
    session_id: str
    name: str
    model: str | None
    source: str | None
    parent_session_id: str | None
    forked_from_message_id: str | None
    at: str
    seq: int
    version: int


@dataclass(frozen=True, slots=True)
class ChangeSession:
    """Set ``name`` or ``end_reason`` and add ``usage`` (input, output, cost) to a registered
    session's row, and touch it; ``version``: the record's version after the event."""

    namespace: str
    session_id: str
    at: str
    seq: int
    version: int
    name: str | None = None
    end_reason: str | None = None
    usage: tuple[int, int, float] | None = None


@dataclass(frozen=True, slots=True)
class TouchSession:
    """An event of the session itself (its messages, its context): the row's last activity,
    if the session is registered. Only the last touch of a session in a batch matters."""

    namespace: str
    session_id: str
    at: datetime
    seq: int


@dataclass(frozen=True, slots=True)
class ForgetSession:
    namespace: str
    session_id: str


RegistryWrite = RegisterSession | ChangeSession | TouchSession | ForgetSession


def project_registry_event(namespace: str, seq: int, event: object) -> list[RegistryWrite]:
    """Writes that apply ``event`` (at stream sequence ``seq``) to the registry read model."""
    if isinstance(event, SessionAggregate.Event):
        # Any change of a session's messages or context touches its row (if registered).
        return [TouchSession(namespace, event.session_id, event.timestamp, seq)]
    if not isinstance(event, SessionRecord.Event):
        return []
    at = event.timestamp.isoformat()
    if isinstance(event, SessionRecord.SessionCreated):
        return [
            RegisterSession(
                namespace,
                event.session_id,
                event.name,
                event.model,
                event.source,
                event.parent_session_id,
                event.forked_from_message_id,
                at,
                seq,
                event.originator_version,
            )
        ]
    version = event.originator_version
    if isinstance(event, SessionRecord.SessionRenamed):
        return [ChangeSession(namespace, event.session_id, at, seq, version, name=event.name)]
    if isinstance(event, SessionRecord.UsageAdded):
        usage = (event.input_tokens, event.output_tokens, event.cost)
        return [ChangeSession(namespace, event.session_id, at, seq, version, usage=usage)]
    if isinstance(event, SessionRecord.SessionEnded):
        return [
            ChangeSession(
                namespace, event.session_id, at, seq, version, end_reason=event.end_reason
            )
        ]
    if isinstance(event, SessionRecord.SessionDeleted):
        return [ForgetSession(namespace, event.session_id)]
    return []


class Touches:
    """The touches of a batch, one per session (the last), written before the batch commits or
    before any other registry write (which a later touch must not overtake)."""

    def __init__(self) -> None:
        self.pending: dict[tuple[str, str], tuple[datetime, int]] = {}  # (time, seq) by session

    def add(self, namespace: str, touch: TouchSession) -> None:
        self.pending[(namespace, touch.session_id)] = (touch.at, touch.seq)

    def take(self) -> list[tuple[str, str, str, int]]:
        """The pending touches as ``(namespace, session id, ISO time, seq)``, then none."""
        taken = [(*key, at.isoformat(), seq) for key, (at, seq) in self.pending.items()]
        self.pending.clear()
        return taken
