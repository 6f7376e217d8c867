"""Compaction overlays applied to a path at read time (branch-local; never mutate messages)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memstream.domain.messages import Message, compaction_message


@dataclass(frozen=True, slots=True)
class Compaction:
    """A stored overlay: ``from_message_id..to_message_id`` reads as one summary message."""

    id: str
    summary: str
    from_message_id: str
    to_message_id: str
    created_at: str


def apply_overlays(path: Sequence[Message], overlays: Sequence[Compaction]) -> list[Message]:
    """Replace overlaid ranges of a root→leaf path by synthetic summary messages.

    ``overlays`` are in log order; among candidates starting at the same message the last one
    wins. An overlay whose end is not on the path at or after its start is ignored.
    """
    if not overlays or not path:
        return list(path)
    index_of = {message["id"]: i for i, message in enumerate(path)}
    by_start: dict[str, list[Compaction]] = {}
    for overlay in overlays:
        if overlay.from_message_id in index_of and overlay.to_message_id in index_of:
            by_start.setdefault(overlay.from_message_id, []).append(overlay)
    out: list[Message] = []
    i = 0
    while i < len(path):
        chosen: Compaction | None = None
        for candidate in by_start.get(path[i]["id"], ()):
            if index_of[candidate.to_message_id] >= i:
                chosen = candidate
        if chosen is None:
            out.append(path[i])
            i += 1
        else:
            out.append(compaction_message(chosen.id, chosen.summary))
            i = index_of[chosen.to_message_id] + 1
    return out
