"""Bytes per message on disk: on the log (the stream's stored bytes) and in the read model.

Ours: 5,000 sequential ``append_message`` of ~200-500-byte texts over 10 sessions, in the event
contract (plain JSON, four headers). Baseline, in the same run: the same events in the form
memstream wrote before the contract (eventsourcing's stored state, message JSON escaped inside
it, eleven headers), published to a second stream of the same server. The target is the event
contract's: a message event on the log costs at most 1.3x the message's own JSON plus 200
bytes. The read model's bytes per message are reported (database file after a checkpoint).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from nats.js import JetStreamContext

from bench.harness import Row, bench_env, raw_stream
from bench.payloads import MessageFactory
from memstream.domain.messages import encode_message, normalize_message
from memstream.domain.session import SessionAggregate
from memstream.projections.sqlite.store import SqliteReadModelStore
from memstream.workers.log.codec import H_EXPECTED_LAST_SUBJECT_SEQ, CommandMeta, _encode_stored

NAME = "disk"
TITLE = "bytes per message on the log (event contract) and in the read model"
MESSAGES = 5_000
SESSIONS = 10
STREAM = "LEGACY"


async def _legacy(js: JetStreamContext, messages: list[dict[str, Any]]) -> None:
    """The same appends, encoded as before the event contract."""
    aggregates = {s: SessionAggregate.empty("default", f"chat-{s}") for s in range(SESSIONS)}
    last: dict[int, int] = {}
    for index, message in enumerate(messages):
        session = index % SESSIONS
        [event] = aggregates[session].append_message(message)
        event.mutate(aggregates[session])
        meta = CommandMeta()
        payload, headers = _encode_stored(event, meta, meta.command_id)
        headers[H_EXPECTED_LAST_SUBJECT_SEQ] = str(last.get(session, 0))
        ack = await js.publish(f"{STREAM.lower()}.chat-{session}", payload, headers=headers)
        last[session] = ack.seq


async def run() -> Row:
    factory = MessageFactory(seed=5)
    messages = factory.messages("disk", MESSAGES)
    json_bytes = sum(len(encode_message(normalize_message(m)).encode()) for m in messages)
    per_json = json_bytes / MESSAGES
    async with bench_env(NAME) as env:
        ms = await env.memstream()
        raw = await env.raw_client()
        try:
            sessions = [ms.session(f"chat-{s}") for s in range(SESSIONS)]
            for index, message in enumerate(messages):
                await sessions[index % SESSIONS].append_message(message)
            await ms.wait_for("sessions")
            ours_info = await ms.core.log.js.stream_info(ms.core.log.stream)
            js = await raw_stream(raw, STREAM)
            await _legacy(js, messages)
            legacy_info = await js.stream_info(STREAM)
            assert ms.core.workers.projector is not None
            store = ms.core.workers.projector.store
            assert isinstance(store, SqliteReadModelStore)
            store.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        finally:
            await raw.close()
            await ms.close()
        database = env.settings.database_path
        read_model = database.stat().st_size
        check = sqlite3.connect(database)
        try:
            pages = (
                dict(check.execute("SELECT name, count(*) FROM dbstat GROUP BY name").fetchall())
                if _has_dbstat(check)
                else {}
            )
        finally:
            check.close()
    ours = (ours_info.state.bytes or 0) / (ours_info.state.messages or 1)
    legacy = (legacy_info.state.bytes or 0) / (legacy_info.state.messages or 1)
    limit = 1.3 * per_json + 200
    fts = ""
    if pages:
        fts_pages = sum(v for k, v in pages.items() if k.startswith("messages_fts"))
        fts = f"; FTS5 tables {fts_pages * 4096 / MESSAGES:,.0f} B/message of it"
    return Row(
        TITLE,
        f"log {ours:,.0f} B/message",
        f"log {legacy:,.0f} B/message (before the contract)",
        f"{ours / per_json:.2f}× the message JSON ({per_json:,.0f} B)",
        f"log ≤ 1.3× + 200 B ({limit:,.0f} B)",
        ours <= limit,
        f"{MESSAGES:,} appends over {SESSIONS} sessions; log bytes as the stream stores them "
        f"(subject, headers, payload and the server's own record); read model "
        f"{read_model / MESSAGES:,.0f} B/message (the SQLite file after a checkpoint: message "
        f"rows, path aggregates, indexes, FTS5{fts}); {ours / legacy:.2f}× the log bytes of "
        f"the form before the contract",
    )


def _has_dbstat(connection: sqlite3.Connection) -> bool:
    try:
        connection.execute("SELECT 1 FROM dbstat LIMIT 1").fetchall()
    except sqlite3.Error:
        return False
    return True
