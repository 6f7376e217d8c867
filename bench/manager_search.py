"""``SessionManager.search`` over 100 sessions × 1,000 messages against a raw FTS5 ``MATCH`` +
``bm25`` over the namespace's sessions, same table, same dicts."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from bench.fixtures import fill_sessions
from bench.harness import Row, bench_env, median, ms, query_figures
from bench.payloads import MessageFactory
from bench.search import QUERIES
from memstream.domain.limits import search_query
from memstream.projections.search_query import to_fts5
from memstream.projections.session_projector import indexed_text
from memstream.projections.sqlite.database import open_database
from memstream.projections.sqlite.session_queries import SqliteSessionQueries

NAME = "manager_search"
TITLE = "SessionManager.search over 100 sessions × 1,000 messages"
TARGET = 1.5
SESSIONS = 100
PER_SESSION = 1_000
ROUNDS = 7
LIMIT = 20
KEYS = ("id", "role", "content", "created_at", "session_id")

# The baseline: rank inside FTS5 on rowids alone, keeping the namespace's sessions by the high
# bits of the row id (a message's mid is its session's sid << 32 | ordinal, see mid_range), then
# fetch the winners' rows and session ids. The index keeps no text: a hit's text comes from its
# message's JSON, as ours does.
_BASELINE = """
SELECT m.id, m.role, m.content, m.created_at, k.session_id
FROM (
    SELECT rowid AS mid, bm25(messages_fts) AS score FROM messages_fts
    WHERE messages_fts MATCH :q
    AND (rowid >> 32) IN (SELECT sid FROM session_keys WHERE namespace = :ns)
    ORDER BY score LIMIT :limit
) AS hit
JOIN messages AS m ON m.mid = hit.mid
JOIN session_keys AS k ON k.sid = m.sid
ORDER BY hit.score
"""


def baseline_search(
    connection: sqlite3.Connection, namespace: str, expression: str
) -> list[dict[str, Any]]:
    rows = connection.execute(_BASELINE, {"q": expression, "ns": namespace, "limit": LIMIT})
    return [
        {
            "id": r[0],
            "role": r[1],
            "content": indexed_text(r[2]),
            "created_at": r[3],
            "session_id": r[4],
        }
        for r in rows
    ]


async def run() -> Row:
    factory = MessageFactory(seed=23)
    async with bench_env(NAME) as env:
        memstream = await env.memstream()
        try:
            fill = await fill_sessions(memstream, factory, SESSIONS, PER_SESSION)
            manager = memstream.session_manager()
            namespace = memstream.namespace
            connection = open_database(env.settings.data_dir / "memstream.db")
            try:
                texts = {q: search_query(q) or "" for q in QUERIES}
                expressions = {q: to_fts5(texts[q]) or "" for q in QUERIES}
                hits = {}
                for query in QUERIES:  # same answers, and a warm cache for both
                    ours_hits = await manager.search(query, LIMIT)
                    raw_hits = baseline_search(connection, namespace, expressions[query])
                    assert ours_hits == raw_hits, f"{query!r}: results differ"
                    assert all(list(h) == list(KEYS) for h in ours_hits), "another dict shape"
                    hits[query] = len(ours_hits)
                ours: dict[str, list[float]] = {q: [] for q in QUERIES}
                baseline: dict[str, list[float]] = {q: [] for q in QUERIES}
                # Where ours spends it: our read-model query alone on the baseline's connection.
                statement: dict[str, list[float]] = {q: [] for q in QUERIES}
                queries = SqliteSessionQueries(connection)
                for _ in range(ROUNDS):
                    for query in QUERIES:
                        start = time.perf_counter()
                        await manager.search(query, LIMIT)
                        ours[query].append(time.perf_counter() - start)
                        start = time.perf_counter()
                        baseline_search(connection, namespace, expressions[query])
                        baseline[query].append(time.perf_counter() - start)
                        start = time.perf_counter()
                        queries.search(namespace, None, texts[query], LIMIT)
                        statement[query].append(time.perf_counter() - start)
            finally:
                connection.close()
        finally:
            await memstream.close()
    figures = query_figures(ours, baseline)
    statement_mean = sum(median(v) for v in statement.values()) / len(QUERIES)
    return Row(
        TITLE,
        f"{ms(figures.ours)} per query",
        f"{ms(figures.baseline)} per query",
        f"{figures.ratio:.2f}×",
        f"≤ {TARGET}×",
        figures.ratio <= TARGET,
        f"mean of per-query medians over {len(QUERIES)} queries × {ROUNDS} interleaved rounds, "
        f"limit {LIMIT}, hits {sum(hits.values())} (the ratio is of total time; the geometric "
        f"mean of per-query ratios is {figures.geometric:.2f}×); ms ours/raw: {figures.detail}; "
        f"SqliteSessionQueries.search alone on the baseline's connection "
        f"{ms(statement_mean)} per query (the query itself, without the API around it); "
        f"{SESSIONS} sessions built with append_messages in {fill:.1f} s",
    )
