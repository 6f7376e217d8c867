"""Projector rebuild of 100,000 message events into PostgreSQL against a hand-written consumer
that writes the same rows with ``COPY``, one transaction per fetched batch.

Both write the sessions read model of the same schema (migrated by memstream): each message's
row with its parent link, path aggregates and ``tsvector``, its parent's children count, the
sessions' message counts, decision state (last sequence and version) and the projection's
position; the benchmark checks that both hold the same content (the checksum ``projections
verify`` compares). The baseline knows what a rebuild of single-message chains needs: it keeps
each session's last row in memory, numbers the rows itself, stages each batch with one binary
``COPY`` and moves it into ``messages`` with one ``INSERT … SELECT`` computing the vectors.
"""

from __future__ import annotations

import contextlib
import json
from datetime import datetime
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from bench.harness import Row
from bench.postgres import needs_postgres, pg_bench_env, plain_connection, scratch_database
from bench.rebuild import FETCH, ROUNDS, TARGET, filled_log, raw_consume, result, rounds
from memstream.projections.postgres.checksum import checksum
from memstream.projections.postgres.copy import PostgresCopy
from memstream.projections.postgres.schema import TEXT_SEARCH, migrate
from memstream.projections.session_projector import BATCH_SLOTS
from memstream.workers.admin.rebuild import rebuild
from memstream.workers.log.event_log import connect_nats

NAME = "pg_rebuild"
TITLE = "projector rebuild of 100,000 message events into PostgreSQL"

_COLUMNS = (
    "mid, sid, id, parent_id, parent_mid, role, content, bytes, position, created_at, "
    "child_count, depth, path_bytes"
)
_STAGING = (
    "CREATE TEMP TABLE staging (mid bigint, sid bigint, id text, parent_id text, "
    "parent_mid bigint, role text, content text, bytes bigint, position bigint, "
    "created_at text, child_count bigint, depth bigint, path_bytes bigint, text text) "
    "ON COMMIT DELETE ROWS"
)
_TYPES = [
    "int8",
    "int8",
    "text",
    "text",
    "int8",
    "text",
    "text",
    "int8",
    "int8",
    "text",
    "int8",
    "int8",
    "int8",
    "text",
]
_MOVE = (
    f"INSERT INTO messages ({_COLUMNS}, search) SELECT {_COLUMNS}, "
    f"to_tsvector('{TEXT_SEARCH}', text) FROM staging"
)
_COUNTS = (
    "UPDATE session_keys AS k SET messages = k.messages + t.n "
    "FROM unnest(%s::bigint[], %s::bigint[]) AS t (sid, n) WHERE k.sid = t.sid"
)
_STATE = (
    "INSERT INTO session_state (namespace, session_id, last_seq, version, sid) "
    "SELECT * FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::bigint[], %s::bigint[]) "
    "ON CONFLICT (namespace, session_id) DO UPDATE SET "
    "last_seq = excluded.last_seq, version = excluded.version, sid = excluded.sid"
)


class RawWriter:
    """The baseline's batches: rows computed in memory, written in one transaction each."""

    def __init__(self, url: str) -> None:
        self.connection = plain_connection(url)
        migrate(self.connection, url)  # the same tables and indexes as ours
        self.connection.execute(_STAGING)
        self.connection.execute("INSERT INTO tracking (projection, seq) VALUES ('sessions', 0)")
        self.sids: dict[tuple[str, str], int] = {}
        # Each session's last row: (sid, id) → (mid, depth, path bytes).
        self.tips: dict[int, tuple[str, int, int, int]] = {}
        self.next_mid = 1

    def close(self) -> None:
        self.connection.close()

    def write(self, msgs: list[Msg]) -> int:
        rows: list[list[Any]] = []
        in_batch: dict[int, list[Any]] = {}  # mid → its row, for children counts
        older_parents: list[int] = []
        new_sessions: list[tuple[int, str, str]] = []
        counts: dict[int, int] = {}
        state: dict[tuple[str, str], tuple[int, int, int]] = {}
        for msg in msgs:
            seq = msg.metadata.sequence.stream
            namespace = msg.subject.split(".")[1]
            event = json.loads(msg.data)  # the event contract's plain JSON
            message = event["message"]
            # The stored content is the message's canonical JSON text, as ours stores it.
            content = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
            texts = [p.get("text") for p in message["parts"] if p.get("type") == "text"]
            text = " ".join(t for t in texts if isinstance(t, str) and t)
            key = (namespace, event["session_id"])
            sid = self.sids.get(key)
            if sid is None:
                sid = self.sids[key] = len(self.sids) + 1
                new_sessions.append((sid, *key))
            parent_id = event["parent_id"]
            tip = self.tips.get(sid)
            if tip is not None and tip[0] == parent_id:
                _, parent_mid, depth, path_bytes = tip
                parent_row = in_batch.get(parent_mid)
                if parent_row is None:
                    older_parents.append(parent_mid)
                else:
                    parent_row[10] += 1
                depth += 1
            else:  # the log holds chains: anything else is a root
                assert parent_id is None, f"{message['id']}: parent {parent_id} not seen"
                parent_mid, depth, path_bytes = None, 0, 0
            size = len(content.encode())
            path_bytes += size
            mid = self.next_mid
            self.next_mid += 1
            created_at = datetime.fromisoformat(event["time"]).isoformat()
            row = [
                *(mid, sid, message["id"], parent_id, parent_mid, message["role"], content),
                *(size, seq * BATCH_SLOTS, created_at, 0, depth, path_bytes, text),
            ]
            rows.append(row)
            in_batch[mid] = row
            self.tips[sid] = (message["id"], mid, depth, path_bytes)
            counts[sid] = counts.get(sid, 0) + 1
            state[key] = (seq, int(event["version"]), sid)
        connection = self.connection
        with connection.transaction(), connection.cursor() as cursor:
            if new_sessions:
                cursor.executemany(
                    "INSERT INTO session_keys (sid, namespace, session_id) VALUES (%s, %s, %s)",
                    new_sessions,
                )
            with cursor.copy("COPY staging FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(_TYPES)
                for row in rows:
                    copy.write_row(row)
            cursor.execute(_MOVE)
            if older_parents:
                cursor.execute(
                    "UPDATE messages SET child_count = child_count + 1 WHERE mid = ANY(%s)",
                    (older_parents,),
                )
            cursor.execute(_COUNTS, (list(counts), list(counts.values())))
            keys = list(state)
            cursor.execute(
                _STATE,
                (
                    [k[0] for k in keys],
                    [k[1] for k in keys],
                    *([state[k][i] for k in keys] for i in range(3)),
                ),
            )
            cursor.execute(
                "UPDATE tracking SET seq = %s WHERE projection = 'sessions'",
                (msgs[-1].metadata.sequence.stream,),
            )
        return len(rows)


async def raw_rebuild(client: Client, stream: str, url: str, until: int, durable: str) -> int:
    """The baseline into the empty database at ``url``; the rows it wrote."""
    writer = RawWriter(url)
    try:
        return await raw_consume(client, stream, until, durable, writer.write)
    finally:
        writer.close()


def same_content(ours: str, raw: str) -> None:
    with plain_connection(ours) as left, plain_connection(raw) as right:
        assert checksum(left, "sessions") == checksum(right, "sessions"), "read models differ"


async def measure(server: str) -> Row:
    async with pg_bench_env(NAME, server) as env:
        client = await connect_nats(env.server.url)
        try:
            log, fill = await filled_log(env, client)
            total = await log.stream_last_seq()
            ours_url = env.settings.database_url
            assert ours_url is not None
            with contextlib.ExitStack() as databases:
                raw_urls = [
                    databases.enter_context(scratch_database(server)) for _ in range(ROUNDS)
                ]

                async def ours(_: int) -> None:
                    reached = await rebuild(log, PostgresCopy(ours_url))  # drops, then replays
                    assert reached == total, f"rebuild reached {reached}"

                async def raw(round_: int) -> None:
                    rows = await raw_rebuild(
                        client, log.stream, raw_urls[round_], total, f"raw{round_}"
                    )
                    assert rows == total, f"raw rebuild wrote {rows} rows"

                ours_times, raw_times = await rounds(
                    ours, raw, lambda round_: same_content(ours_url, raw_urls[round_])
                )
        finally:
            await client.close()
    return result(
        TITLE,
        ours_times,
        raw_times,
        fill,
        "ours rebuilds into one database (round 1 empty, then dropped by the rebuild), the "
        "baseline into a new one per round; both write the sessions read model of the same "
        "schema and end with the same content (checksum of `projections verify`); the "
        f"baseline stages each batch of {FETCH} with one binary COPY and one INSERT … SELECT "
        "(to_tsvector), then updates children and message counts, decision state and its "
        "position with one statement each",
    )


async def run() -> Row | list[Row]:
    return await needs_postgres(TITLE, f"≥ {TARGET}×", measure)
