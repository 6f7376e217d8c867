"""The ``up --demo`` tour: a conversation with a branch, its history, a search, a context block
written by the model's tool and the frozen system prompt, and the platform status."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memstream import Memstream, StaticContext, admin
from memstream.admin import PlatformStatus
from memstream.types import SearchHit, SessionMessage

SESSION = "demo"
QUERY = "pastel de nata"
BRANCH_POINT = "demo-2"
MEMORY_QUESTION = "What does the traveller eat?"
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
    history: list[SessionMessage]
    branches: list[SessionMessage]
    hits: list[SearchHit]
    tool_reply: str
    prompt: str
    memory_question: str
    recall: dict[str, Any]
    status: PlatformStatus


async def run_demo(ms: Memstream) -> DemoResult:
    """Append the demo conversation (idempotently) and read it back."""
    session = (
        ms.session(SESSION)
        .with_context("soul", provider=StaticContext("You are a friendly travel assistant."))
        .with_context("memory", description="Learned facts", max_tokens=200)
        .with_cached_prompt()
    )
    for message_id, parent_id, role, text in CONVERSATION:
        message = {"id": message_id, "role": role, "parts": [{"type": "text", "text": text}]}
        await session.append_message(message, parent_id)
    # The model remembers a fact with its set_context tool; the prompt is frozen once.
    tool_reply = await session.execute_tool(
        "set_context", {"label": "memory", "content": "Travels light; loves pastries."}
    )
    prompt = await session.freeze_system_prompt()
    for projection in ("sessions", "context"):
        await ms.wait_for(projection)
    # Agent Memory: the user's side of the conversation goes into a profile (an idempotent
    # ingest), typed memories come out, and recall answers from them.
    profile = await ms.agent_memory("default").get_profile("demo-traveller")
    await profile.ingest(
        [{"role": "user", "content": text} for _, _, role, text in CONVERSATION if role == "user"]
        + [{"role": "user", "content": "I am vegetarian, so no seafood for me."}],
        session_id=SESSION,
    )
    return DemoResult(
        session_id=SESSION,
        branch_point=BRANCH_POINT,
        query=QUERY,
        history=await session.get_history(),
        branches=await session.get_branches(BRANCH_POINT),
        hits=await session.search(QUERY),
        tool_reply=tool_reply,
        prompt=prompt,
        memory_question=MEMORY_QUESTION,
        recall=await profile.recall(MEMORY_QUESTION),
        status=await admin.status(ms),
    )
