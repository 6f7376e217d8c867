"""The ``examples/`` consumers of the event contract (issue 16, item 7), each run as a process
of its own with nothing but nats-py, json (and sqlite3) against a stream memstream wrote."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from support.processes import script_json

from memstream.client import Memstream
from memstream.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _message(n: int, role: str = "user") -> dict[str, Any]:
    return {"id": f"m{n}", "role": role, "content": f"message {n}"}


def _index(settings: Settings, database: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = script_json(
        EXAMPLES / "session_index.py",
        *("--url", settings.nats_url or "", "--stream", settings.stream),
        *("--prefix", settings.subject_prefix),
        *("--durable", "index", "--database", str(database), "--once", "--json"),
        timeout=60,
    )
    return rows


async def test_the_session_index_keeps_its_own_sqlite_state_and_resumes(
    ms: Memstream, settings: Settings, tmp_path: Path
) -> None:
    # Given sessions with messages, a deletion and a clear (and a block: not a session event)
    a, b = ms.session("a"), ms.session("b")
    await a.append_messages([_message(n) for n in range(4)])
    await a.append_message(_message(4, "assistant"))
    await a.delete_messages(["m1"])
    await b.append_message(_message(0))
    await b.clear_messages()
    await a.add_context("notes")
    await a.replace_context_block("notes", "not a message")
    database = tmp_path / "index.db"
    # When the example indexes the stream in a process of its own, until caught up
    rows = await asyncio.to_thread(_index, settings, database)
    # Then its own database has each session's count and roles
    counts = {(r["session_id"], r["messages"], tuple(r["roles"])) for r in rows}
    assert counts == {("a", 4, ("assistant", "user")), ("b", 0, ("user",))}
    # And run again on its durable consumer, it applies only what is new, exactly once
    await b.append_message(_message(1))
    again = await asyncio.to_thread(_index, settings, database)
    assert {(r["session_id"], r["messages"]) for r in again} == {("a", 4), ("b", 1)}
    with sqlite3.connect(database) as db:
        (applied,) = db.execute("SELECT last_seq FROM position").fetchone()
    assert applied > 0
    assert applied <= await ms.core.log.stream_last_seq()


async def test_daily_tokens_sums_usage_per_day_and_namespace(
    ms: Memstream, settings: Settings
) -> None:
    manager = ms.session_manager()
    await manager.create("One", session_id="one", model="gpt-4o")
    await manager.create("Two", session_id="two")
    await manager.add_usage("one", 1000, 200, 0.0125)
    await manager.add_usage("two", 30, 5, 0.001)
    await manager.add_usage("one", 70, 0, 0.0)
    await ms.session("one").append_message(_message(0))  # not usage: passed over
    rows = await asyncio.to_thread(
        script_json,
        EXAMPLES / "daily_tokens.py",
        *("--url", settings.nats_url or "", "--stream", settings.stream, "--json"),
        *("--prefix", settings.subject_prefix),
    )
    (day,) = rows
    assert day["namespace"] == "default"
    assert (day["input_tokens"], day["output_tokens"], day["events"]) == (1100, 205, 3)
    assert day["cost"] == 0.0135
    # The same totals as memstream's own analytics worker counts
    (total,) = [r for r in await ms.stats() if r["model"] == "gpt-4o"]
    assert (total["input_tokens"], total["output_tokens"]) == (1070, 200)
