"""``get_history`` on a 10,000-message path in PostgreSQL against a hand-written recursive CTE
on a plain psycopg connection (the same rows, the same decoded messages)."""

from __future__ import annotations

import json
from typing import Any

from bench.fixtures import fill_session
from bench.harness import Row
from bench.history import PATH, TARGET, compare, result
from bench.payloads import MessageFactory
from bench.postgres import Connection, needs_postgres, pg_bench_env, plain_connection, settle

NAME = "pg_history"
TITLE = "get_history on a 10,000-message path on PostgreSQL"

# The baseline: one statement that finds the latest leaf and walks its row links to the root,
# then json.loads of each row.
_BASELINE = """
WITH RECURSIVE
leaf AS (
    SELECT m.mid FROM messages AS m JOIN session_keys AS k ON k.sid = m.sid
    WHERE k.namespace = %s AND k.session_id = %s AND m.child_count = 0
    ORDER BY m.position DESC LIMIT 1
),
path (mid, parent_mid, content, depth) AS (
    SELECT m.mid, m.parent_mid, m.content, 0 FROM messages AS m JOIN leaf ON m.mid = leaf.mid
    UNION ALL
    SELECT m.mid, m.parent_mid, m.content, path.depth + 1
    FROM path JOIN messages AS m ON m.mid = path.parent_mid
)
SELECT content FROM path ORDER BY depth DESC
"""


def baseline_history(
    connection: Connection, namespace: str, session_id: str
) -> list[dict[str, Any]]:
    rows = connection.execute(_BASELINE, (namespace, session_id)).fetchall()
    return [json.loads(row[0]) for row in rows]


async def measure(server: str) -> Row:
    async with pg_bench_env(NAME, server) as env:
        memstream = await env.memstream()
        try:
            fill = await fill_session(memstream, "long", MessageFactory(seed=5), PATH)
            assert env.settings.database_url is not None
            settle(env.settings.database_url)
            with plain_connection(env.settings.database_url) as connection:
                ours, baseline = await compare(
                    memstream.session("long"),
                    lambda: baseline_history(connection, "default", "long"),
                )
        finally:
            await memstream.close()
    return result(
        TITLE,
        ours,
        baseline,
        f"PostgreSQL read model; the baseline on its own psycopg connection; session built "
        f"with append_messages in {fill:.1f} s, then VACUUM ANALYZE",
    )


async def run() -> Row | list[Row]:
    return await needs_postgres(TITLE, f"≤ {TARGET:.0f}×", measure)
