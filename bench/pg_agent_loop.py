"""The agent loop over 50 interleaved sessions with PostgreSQL read models, against the
architecture's floor doing the same job by hand with PostgreSQL.

The floor, per step: an awaited JetStream publish of the same message JSON (the log), then in
PostgreSQL (one transaction, committed as the server is configured) the message's tree row with
its ``tsvector`` (GIN-indexed, the same text search configuration as ours), then a
recursive-CTE walk from the new leaf to the root with every message's JSON decoded; its
statements are planned for the table as it grows (``plan_cache_mode = force_custom_plan``). Ours:
``Session.append_message`` and ``Session.get_history`` with the projector in this process
writing to PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from nats.js import JetStreamContext

from bench.agent_loop import compare, result
from bench.harness import RAW_SUBJECT, Row, raw_stream
from bench.payloads import payload
from bench.postgres import needs_postgres, pg_bench_env, plain_connection
from memstream.projections.postgres.schema import TEXT_SEARCH

NAME = "pg_agent_loop"
TITLE = "agent loop: append one message, read the history (50 sessions) on PostgreSQL"
TARGET = 0.6

_SCHEMA = """
CREATE SCHEMA floor;
CREATE TABLE floor.messages (
    mid BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session TEXT NOT NULL,
    id TEXT NOT NULL,
    parent_mid BIGINT,
    content TEXT NOT NULL,
    search tsvector NOT NULL,
    UNIQUE (session, id)
);
CREATE INDEX floor_messages_search ON floor.messages USING GIN (search);
"""
_INSERT = (
    "INSERT INTO floor.messages (session, id, parent_mid, content, search) "
    f"VALUES (%s, %s, %s, %s, to_tsvector('{TEXT_SEARCH}', %s)) RETURNING mid"
)
_PATH = """
WITH RECURSIVE path (mid, parent_mid, content, depth) AS (
    SELECT mid, parent_mid, content, 0 FROM floor.messages WHERE mid = %s
    UNION ALL
    SELECT m.mid, m.parent_mid, m.content, path.depth + 1
    FROM path JOIN floor.messages AS m ON m.mid = path.parent_mid
)
SELECT content FROM path ORDER BY depth DESC
"""


class PgFloor:
    """The hand-written floor: publish, insert the row with its vector, walk the path."""

    def __init__(self, js: JetStreamContext, url: str) -> None:
        self.js = js
        self.db = plain_connection(url)  # the text search configuration is memstream's
        self.db.execute(_SCHEMA)
        # Plans that follow the table's growth: psycopg prepares a statement from its fifth
        # execution, and a generic plan of the walk made while the table was nearly empty
        # scans the table at every step, so a walk's cost grows with the table
        # (bench/RESULTS.md, 'Figures moved from code comments').
        self.db.execute("SET plan_cache_mode = force_custom_plan")
        self.leaves: dict[str, int | None] = {}

    async def step(self, session: str, message: dict[str, Any]) -> list[dict[str, Any]]:
        data = payload(message)
        await self.js.publish(f"{RAW_SUBJECT}.{session}", data)
        text = " ".join(p["text"] for p in message["parts"] if "text" in p)
        with self.db.transaction():
            row = self.db.execute(
                _INSERT, (session, message["id"], self.leaves.get(session), data.decode(), text)
            ).fetchone()
        assert row is not None
        leaf = self.leaves[session] = int(row[0])
        return [json.loads(r[0]) for r in self.db.execute(_PATH, (leaf,))]

    def close(self) -> None:
        self.db.close()


async def measure(server: str) -> Row:
    async with pg_bench_env(NAME, server) as env:
        memstream = await env.memstream()  # migrates the database: the floor's schema next
        raw = await env.raw_client()
        assert env.settings.database_url is not None
        floor = PgFloor(await raw_stream(raw), env.settings.database_url)
        try:
            ours, base = await compare(memstream, floor)
        finally:
            floor.close()
            await raw.close()
            await memstream.close()
    row = result(TITLE, TARGET, ours, base)
    return dataclasses.replace(
        row, notes=f"{row.notes}; ours and the floor in one PostgreSQL database"
    )


async def run() -> Row | list[Row]:
    return await needs_postgres(TITLE, f"≥ {TARGET}×", measure)
