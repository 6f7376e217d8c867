"""The ``up --demo`` tour: a short conversation with a branch, its history, a search, a status."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memstream import Memstream
from memstream.workers.status import PlatformStatus, platform_status

SESSION = "demo"
QUERY = "pastel de nata"
BRANCH_POINT = "demo-2"
# (id, parent id, role, text): demo-5 branches off demo-2, beside demo-3. Fixed ids make a rerun
# on the same data dir a no-op (an existing id is ignored), so `make run` can be repeated.
CONVERSATION: tuple[tuple[str, str | None, str, str], ...] = (
    ("demo-1", None, "user", "I have a weekend in Lisbon. Any tips?"),
    (
        "demo-2",
        "demo-1",
        "assistant",
        "Ride tram 28 early, walk up through the Alfama, and have a pastel de nata in Belém.",
    ),
    ("demo-3", "demo-2", "user", "Where should I eat on Saturday night?"),
    ("demo-4", "demo-3", "assistant", "Book a table in Bairro Alto; try the arroz de marisco."),
    ("demo-5", "demo-2", "user", "Actually, would Porto be better for a short trip?"),
    (
        "demo-6",
        "demo-5",
        "assistant",
        "Porto is smaller and walkable: the Ribeira, the port cellars, and a francesinha.",
    ),
)


@dataclass(frozen=True, slots=True)
class DemoResult:
    """What the demo shows."""

    session_id: str
    branch_point: str
    query: str
    history: list[dict[str, Any]]
    branches: list[dict[str, Any]]
    hits: list[dict[str, Any]]
    status: PlatformStatus


async def run_demo(ms: Memstream) -> DemoResult:
    """Append the demo conversation (idempotently) and read it back."""
    session = ms.session(SESSION)
    for message_id, parent_id, role, text in CONVERSATION:
        message = {"id": message_id, "role": role, "parts": [{"type": "text", "text": text}]}
        await session.append_message(message, parent_id)
    return DemoResult(
        session_id=SESSION,
        branch_point=BRANCH_POINT,
        query=QUERY,
        history=await session.get_history(),
        branches=await session.get_branches(BRANCH_POINT),
        hits=await session.search(QUERY),
        status=await platform_status(ms.log, ms.database),
    )
