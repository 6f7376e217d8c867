"""``Session.search`` over 100,000 messages against raw FTS5 ``MATCH`` + ``bm25``, same table."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from bench.fixtures import fill_session
from bench.harness import Row, bench_env, ms, query_figures
from bench.payloads import MessageFactory
from memstream.projections.search_query import to_fts5
from memstream.projections.session_writes import indexed_text
from memstream.projections.sqlite.database import open_database

NAME = "search"
TITLE = "search over 100,000 messages"
TARGET = 1.5
MESSAGES = 100_000
ROUNDS = 7
LIMIT = 20

# From very common to rare, with a phrase, an alternative and an exclusion.
QUERIES = (
    "garlic",
    "sourdough oven",
    '"could you help"',
    "kyoto OR lisbon",
    "python -asyncio",
    "marathon knee recovery",
    "dividends tax",
    "ref04242",
)

# The baseline: rank inside FTS5 on rowids alone, then fetch the winners' rows; the index keeps
# no text (contentless), so a hit's text comes from its message's JSON, as ours does.
_BASELINE = """
SELECT m.id, m.role, m.content, m.created_at
FROM (
    SELECT rowid AS mid, bm25(messages_fts) AS score FROM messages_fts
    WHERE messages_fts MATCH ? ORDER BY score LIMIT ?
) AS hit
JOIN messages AS m ON m.mid = hit.mid
ORDER BY hit.score
"""


def baseline_search(connection: sqlite3.Connection, expression: str) -> list[dict[str, Any]]:
    rows = connection.execute(_BASELINE, (expression, LIMIT)).fetchall()
    return [
        {"id": r[0], "role": r[1], "content": indexed_text(r[2]), "created_at": r[3]} for r in rows
    ]


async def run() -> Row:
    async with bench_env(NAME) as env:
        memstream = await env.memstream()
        try:
            fill = await fill_session(memstream, "big", MessageFactory(seed=6), MESSAGES)
            session = memstream.session("big")
            connection = open_database(env.settings.data_dir / "memstream.db")
            try:
                expressions = {q: to_fts5(q) or "" for q in QUERIES}
                hits = {}
                for query in QUERIES:  # same answers, and a warm cache for both
                    keys = ("id", "role", "content", "created_at")
                    ours_hits = [
                        tuple(h[k] for k in keys) for h in await session.search(query, LIMIT)
                    ]
                    raw_hits = [
                        tuple(h[k] for k in keys)
                        for h in baseline_search(connection, expressions[query])
                    ]
                    assert ours_hits == raw_hits, f"{query!r}: results differ"
                    hits[query] = len(ours_hits)
                ours: dict[str, list[float]] = {q: [] for q in QUERIES}
                baseline: dict[str, list[float]] = {q: [] for q in QUERIES}
                for _ in range(ROUNDS):
                    for query in QUERIES:
                        start = time.perf_counter()
                        await session.search(query, LIMIT)
                        ours[query].append(time.perf_counter() - start)
                        start = time.perf_counter()
                        baseline_search(connection, expressions[query])
                        baseline[query].append(time.perf_counter() - start)
            finally:
                connection.close()
        finally:
            await memstream.close()
    figures = query_figures(ours, baseline)
    return Row(
        TITLE,
        f"{ms(figures.ours)} per query",
        f"{ms(figures.baseline)} per query",
        f"{figures.ratio:.2f}×",
        f"≤ {TARGET}×",
        figures.ratio <= TARGET,
        f"mean of per-query medians over {len(QUERIES)} queries × {ROUNDS} interleaved rounds, "
        f"limit {LIMIT} (the ratio is of total time; the geometric mean of per-query ratios, "
        f"where fixed per-call costs weigh more on sub-millisecond queries, is "
        f"{figures.geometric:.2f}×); ms ours/raw: {figures.detail}; "
        f"session built with append_messages in {fill:.1f} s",
    )
