"""``Session.search`` over 100,000 messages in 100 sessions on PostgreSQL against a raw
``websearch_to_tsquery`` query with the session filter, same table, same hits."""

from __future__ import annotations

from typing import Any

from bench.fixtures import fill_sessions
from bench.harness import Row
from bench.payloads import MessageFactory
from bench.postgres import Connection, needs_postgres, pg_bench_env, plain_connection, settle
from bench.search import LIMIT, TARGET, compare, result
from memstream.projections.postgres.schema import TEXT_SEARCH
from memstream.projections.session_projector import indexed_text

NAME = "pg_search"
TITLE = "search over 100,000 messages in 100 sessions on PostgreSQL"
SESSIONS = 100
PER_SESSION = 1_000

# The baseline: the session's key, then its messages matching the query ranked by ts_rank_cd
# (ties by row), in one statement; a hit's text comes from its message's JSON, as ours does.
_BASELINE = f"""
SELECT m.id, m.role, m.content, m.created_at
FROM messages AS m, websearch_to_tsquery('{TEXT_SEARCH}', %(q)s) AS q
WHERE m.sid = (SELECT sid FROM session_keys WHERE namespace = %(ns)s AND session_id = %(id)s)
AND m.search @@ q
ORDER BY ts_rank_cd(m.search, q) DESC, m.mid LIMIT %(limit)s
"""


def session_of(round_: int) -> str:
    """The session searched in a round: a different one each round, spread over the table."""
    return f"chat-{(round_ * 37 + 11) % SESSIONS:03d}"


def baseline_search(connection: Connection, session_id: str, query: str) -> list[dict[str, Any]]:
    rows = connection.execute(
        _BASELINE, {"q": query, "ns": "default", "id": session_id, "limit": LIMIT}
    ).fetchall()
    return [
        {"id": r[0], "role": r[1], "content": indexed_text(r[2]), "created_at": r[3]} for r in rows
    ]


async def measure(server: str) -> Row:
    factory = MessageFactory(seed=23)
    async with pg_bench_env(NAME, server) as env:
        memstream = await env.memstream()
        try:
            fill = await fill_sessions(memstream, factory, SESSIONS, PER_SESSION)
            assert env.settings.database_url is not None
            settle(env.settings.database_url)
            with plain_connection(env.settings.database_url) as connection:
                ours, baseline, hits = await compare(
                    lambda query, round_: memstream.session(session_of(round_)).search(
                        query, LIMIT
                    ),
                    lambda query, round_: baseline_search(connection, session_of(round_), query),
                )
        finally:
            await memstream.close()
    return result(
        TITLE,
        ours,
        baseline,
        f"each round searches another of the {SESSIONS} sessions of {PER_SESSION:,} messages "
        f"({hits} hits over the rounds, equal in both); the baseline on its own psycopg "
        f"connection; {SESSIONS} sessions built with append_messages in {fill:.1f} s, then "
        "VACUUM ANALYZE (what autovacuum does within a minute)",
    )


async def run() -> Row | list[Row]:
    return await needs_postgres(TITLE, f"≤ {TARGET}×", measure)
