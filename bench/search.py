"""``Session.search`` over 100,000 messages against raw FTS5 ``MATCH`` + ``bm25``, same table."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from bench.fixtures import fill_session
from bench.harness import Row, bench_env, ms, query_figures
from bench.payloads import MessageFactory
from memstream.projections.search_query import to_fts5
from memstream.projections.session_projector import indexed_text
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


KEYS = ("id", "role", "content", "created_at")
Hits = list[tuple[Any, ...]]


async def compare(
    ours: Callable[[str, int], Awaitable[Sequence[Mapping[str, Any]]]],
    baseline: Callable[[str, int], Sequence[Mapping[str, Any]]],
    rounds: int = ROUNDS,
) -> tuple[dict[str, list[float]], dict[str, list[float]], int]:
    """Seconds per call of ``ours(query, round)`` and ``baseline(query, round)`` for each of
    :data:`QUERIES`, interleaved, after checking that both return the same hits in every round
    (which also warms the caches of both); and the hits counted over those checks."""
    hits = 0
    for round_ in range(rounds):
        for query in QUERIES:
            ours_hits = [tuple(h[k] for k in KEYS) for h in await ours(query, round_)]
            raw_hits = [tuple(h[k] for k in KEYS) for h in baseline(query, round_)]
            assert ours_hits == raw_hits, f"{query!r} (round {round_}): results differ"
            hits += len(ours_hits)
    ours_times: dict[str, list[float]] = {q: [] for q in QUERIES}
    raw_times: dict[str, list[float]] = {q: [] for q in QUERIES}
    for round_ in range(rounds):
        for query in QUERIES:
            start = time.perf_counter()
            await ours(query, round_)
            ours_times[query].append(time.perf_counter() - start)
            start = time.perf_counter()
            baseline(query, round_)
            raw_times[query].append(time.perf_counter() - start)
    return ours_times, raw_times, hits


def result(
    title: str, ours: dict[str, list[float]], baseline: dict[str, list[float]], notes: str
) -> Row:
    figures = query_figures(ours, baseline)
    return Row(
        title,
        f"{ms(figures.ours)} per query",
        f"{ms(figures.baseline)} per query",
        f"{figures.ratio:.2f}×",
        f"≤ {TARGET}×",
        figures.ratio <= TARGET,
        f"mean of per-query medians over {len(QUERIES)} queries × {ROUNDS} interleaved rounds, "
        f"limit {LIMIT} (the ratio is of total time; the geometric mean of per-query ratios, "
        f"where fixed per-call costs weigh more on sub-millisecond queries, is "
        f"{figures.geometric:.2f}×); ms ours/raw: {figures.detail}; {notes}",
    )


async def run() -> Row:
    async with bench_env(NAME) as env:
        memstream = await env.memstream()
        try:
            fill = await fill_session(memstream, "big", MessageFactory(seed=6), MESSAGES)
            session = memstream.session("big")
            connection = open_database(env.settings.data_dir / "memstream.db")
            try:
                expressions = {q: to_fts5(q) or "" for q in QUERIES}
                ours, baseline, _ = await compare(
                    lambda query, _: session.search(query, LIMIT),
                    lambda query, _: baseline_search(connection, expressions[query]),
                )
            finally:
                connection.close()
        finally:
            await memstream.close()
    return result(TITLE, ours, baseline, f"session built with append_messages in {fill:.1f} s")
