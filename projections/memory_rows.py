"""Memory rows as every backend reads them: the columns listed, a row as a memory dict, and the
topic chain a memory's history walks (the SQL around them is each backend's)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

LISTED = (
    "m.rid, m.id, m.type, m.topic_key, m.summary, m.session_id, m.event_time, m.superseded_by, "
    "m.supersedes, m.created_at, m.updated_at, m.extractor"
)
FULL = LISTED + ", m.content, m.keywords, m.queries, m.source"


def memory_from_row(row: Sequence[Any], sources: list[str] | None = None) -> dict[str, Any]:
    """A row of :data:`LISTED` (without content) or :data:`FULL` columns as a memory."""
    memory: dict[str, Any] = {
        "id": row[1],
        "type": row[2],
        "topic_key": row[3],
        "summary": row[4],
        "session_id": row[5],
        "event_time": row[6],
        "superseded_by": row[7],
        "supersedes": row[8],
        "created_at": row[9],
        "updated_at": row[10],
        "extractor": row[11],
    }
    if len(row) > 12:
        memory["content"] = row[12]
        memory["keywords"] = row[13].split() if row[13] else []
        memory["queries"] = row[14].split("\n") if row[14] else []
        memory["source"] = row[15]
        memory["source_message_ids"] = sources or []
    return memory


def topic_chain(memory_id: str, link: Callable[[str, str], str | None]) -> list[str]:
    """The ids of ``memory_id``'s topic chain, oldest first: what it superseded, then what
    superseded it; ``link(id, column)`` reads ``supersedes`` or ``superseded_by`` of a memory
    (``None``: none). A loop (a damaged read model) ends the walk."""
    chain = [memory_id]
    seen = {memory_id}
    for column in ("supersedes", "superseded_by"):
        current = memory_id
        while (found := link(current, column)) is not None and found not in seen:
            current = found
            seen.add(current)
            if column == "supersedes":
                chain.insert(0, current)
            else:
                chain.append(current)
    return chain


def with_events(
    chain: Sequence[str],
    memories: dict[str, dict[str, Any]],
    events: Callable[[str], list[tuple[Any, ...]]],
) -> list[dict[str, Any]]:
    """The memories of ``chain`` that exist, each with its history ``events(id)`` (rows of
    seq, at, action, other id) and whether it is current."""
    result = []
    for memory_id in chain:
        memory = memories.get(memory_id)
        if memory is None:
            continue
        memory["events"] = [
            {"seq": e[0], "at": e[1], "action": e[2], "other_id": e[3]} for e in events(memory_id)
        ]
        memory["current"] = memory["superseded_by"] is None
        result.append(memory)
    return result
