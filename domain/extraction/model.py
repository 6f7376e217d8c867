"""What extraction works on and what it produces: plain values, shared by the offline extractor,
the LLM extractor, the extractor worker and recall."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal

MemoryType = Literal["fact", "event", "instruction", "task"]
MEMORY_TYPES: Final[tuple[MemoryType, ...]] = ("fact", "event", "instruction", "task")
# Types superseded by a newer memory on the same topic key (events and tasks accumulate).
SUPERSEDED_TYPES: Final = frozenset({"fact", "instruction"})


@dataclass(frozen=True, slots=True)
class SourceMessage:
    """One raw message of an ingested conversation. ``timestamp`` is timezone-aware (UTC):
    relative dates in ``content`` are resolved against it."""

    id: str
    session_id: str
    role: str  # "system" | "user" | "assistant"
    content: str
    timestamp: datetime


@dataclass(frozen=True, slots=True)
class ExtractedMemory:
    """One standalone memory extracted from messages (or from one ``remember`` text).

    - ``topic_key``: normalised subject/predicate (e.g. ``"user:lives_in"``); a newer fact or
      instruction with the same key supersedes the older. Never empty.
    - ``summary``: one standalone sentence (third person, resolved dates), ≤ 300 characters.
    - ``content``: the supporting text (the message text it came from, possibly with the turn
      it answers), ≤ 4,000 characters.
    - ``keywords``: distinct lower-case content words (≤ 12).
    - ``queries``: 3–5 search queries the memory answers (prepended to the embedded text).
    - ``source_message_ids``: the ids of the messages it came from (empty for ``remember``).
    - ``event_time``: when the event happened / the task is due (UTC), if the text names a time.
    """

    type: MemoryType
    topic_key: str
    summary: str
    content: str
    keywords: tuple[str, ...] = ()
    queries: tuple[str, ...] = ()
    source_message_ids: tuple[str, ...] = ()
    event_time: datetime | None = None


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """A half-open time window ``[start, end)`` in UTC that a query names."""

    start: datetime
    end: datetime


# Embeds texts into L2-normalised vectors (rows); used for prototype classification when given.
Embed = Callable[[Sequence[str]], Sequence[Sequence[float]]]


@dataclass(frozen=True, slots=True)
class ExtractorInfo:
    """Name and version of an extractor, recorded in every extraction event."""

    name: str
    version: str
    details: dict[str, str] = field(default_factory=dict)
