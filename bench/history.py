"""``get_history`` on a 10,000-message path against a hand-written recursive CTE."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from bench.fixtures import fill_session
from bench.harness import Row, bench_env, median, ms
from bench.payloads import MessageFactory
from memstream.projections.sqlite.database import open_database
from memstream.session import Session

NAME = "history"
TITLE = "get_history on a 10,000-message path"
TARGET = 2.0
PATH = 10_000
ROUNDS = 15

# The baseline: one statement that finds the latest leaf and walks to the root, then json.loads.
_BASELINE = """
WITH RECURSIVE
leaf (sid, id) AS (
    SELECT m.sid, m.id FROM messages AS m JOIN session_keys AS k ON k.sid = m.sid
    WHERE k.namespace = ? AND k.session_id = ? AND m.child_count = 0
    ORDER BY m.position DESC LIMIT 1
),
path (sid, parent_id, content, depth) AS (
    SELECT m.sid, m.parent_id, m.content, 0
    FROM messages AS m JOIN leaf ON m.sid = leaf.sid AND m.id = leaf.id
    UNION ALL
    SELECT m.sid, m.parent_id, m.content, path.depth + 1
    FROM path JOIN messages AS m ON m.sid = path.sid AND m.id = path.parent_id
)
SELECT content FROM path ORDER BY depth DESC
"""


def baseline_history(
    connection: sqlite3.Connection, namespace: str, session_id: str
) -> list[dict[str, Any]]:
    rows = connection.execute(_BASELINE, (namespace, session_id)).fetchall()
    return [json.loads(row[0]) for row in rows]


async def compare(
    session: Session, baseline: Callable[[], list[dict[str, Any]]]
) -> tuple[list[float], list[float]]:
    """Seconds per call of ``get_history`` and of ``baseline``, interleaved, after checking that
    both return the same path."""
    expected = await session.get_history()
    assert len(expected) == PATH, f"history has {len(expected)} messages"
    assert baseline() == expected, "the baseline's history differs"
    ours: list[float] = []
    raw: list[float] = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        await session.get_history()
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        baseline()
        raw.append(time.perf_counter() - start)
    return ours, raw


def result(title: str, ours: list[float], baseline: list[float], notes: str) -> Row:
    ratio = median(ours) / median(baseline)
    return Row(
        title,
        ms(median(ours)),
        ms(median(baseline)),
        f"{ratio:.2f}×",
        f"≤ {TARGET:.0f}×",
        ratio <= TARGET,
        f"median of {ROUNDS} interleaved calls; both decode the JSON of every message; {notes}",
    )


async def run() -> Row:
    async with bench_env(NAME) as env:
        memstream = await env.memstream()
        try:
            fill = await fill_session(memstream, "long", MessageFactory(seed=5), PATH)
            # The same connection settings (WAL, 64 MiB page cache) as memstream's own reader.
            connection = open_database(env.settings.data_dir / "memstream.db")
            try:
                ours, baseline = await compare(
                    memstream.session("long"),
                    lambda: baseline_history(connection, "default", "long"),
                )
            finally:
                connection.close()
        finally:
            await memstream.close()
    return result(TITLE, ours, baseline, f"session built with append_messages in {fill:.1f} s")
