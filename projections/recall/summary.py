"""``get_summary``: everything a profile holds as markdown in the fixed sections of spec
memory.md Part A, each within its share of the length budget, empty sections left out."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from memstream.domain.memory_input import parse_time

SUMMARY_CHARS: Final = 2400
RECENT_DAYS: Final = 30
# (title, share of the budget): Key Facts 25–30 %, Recent Events 25–30 %, Active Tasks 15–20 %,
# Last Session ~15 %, Instructions ~20 % (they add up to more: an empty section gives its room).
SECTIONS: Final = (
    ("Key Facts", 0.28),
    ("Recent Events", 0.27),
    ("Active Tasks", 0.17),
    ("Last Session", 0.15),
    ("Instructions", 0.20),
)


def _when(memory: dict[str, Any]) -> datetime:
    return parse_time("time", memory.get("event_time") or memory["created_at"])


def summarize(
    memories: Sequence[dict[str, Any]], now: datetime, session_id: str | None = None
) -> str:
    """The summary of ``memories`` (a profile's, oldest first) as of ``now``; ``session_id``
    names the Last Session (default: the session of the newest memory that has one)."""
    current = [m for m in memories if m["superseded_by"] is None]
    newest_first = list(reversed(current))
    facts = [m for m in newest_first if m["type"] == "fact"]
    since = now - timedelta(days=RECENT_DAYS)
    events = sorted(
        (m for m in current if m["type"] == "event" and since <= _when(m) <= now + timedelta(1)),
        key=_when,
        reverse=True,
    )
    tasks = [m for m in newest_first if m["type"] == "task"]
    instructions = [m for m in newest_first if m["type"] == "instruction"]
    last = session_id
    if last is None:
        last = next((m["session_id"] for m in newest_first if m["session_id"]), None)
    session = [m for m in current if last is not None and m["session_id"] == last]
    contents = dict(
        zip(
            [title for title, _ in SECTIONS],
            [facts, events, tasks, session, instructions],
            strict=True,
        )
    )
    blocks = []
    for title, share in SECTIONS:
        items = contents[title]
        heading = f"## {title}" + (f" ({last})" if title == "Last Session" and last else "")
        lines = _lines(items, int(SUMMARY_CHARS * share) - len(heading) - 1)
        if lines:
            blocks.append(heading + "\n" + "\n".join(lines))
    return "\n\n".join(blocks)


def _lines(items: Sequence[dict[str, Any]], budget: int) -> list[str]:
    lines: list[str] = []
    used = 0
    for memory in items:
        line = "- " + " ".join(str(memory["summary"]).split())
        if used + len(line) + 1 > budget:
            if not lines and budget > 8:
                lines.append(line[: budget - 1].rsplit(" ", 1)[0] + "…")
            break
        lines.append(line)
        used += len(line) + 1
    return lines
