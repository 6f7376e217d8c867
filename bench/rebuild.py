"""Projector rebuild of 100,000 message events against a hand-written consumer + FTS5 insert.

Both store the same rows: message id, parent, the message's JSON text and its FTS5 text. The
baseline gets the text from ``json.dumps`` of the parsed message, as plain consumer code of the
event contract would; ours slices it from the payload (the same bytes for events memstream
wrote), which is part of what is measured.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api

from bench.fixtures import fill_log
from bench.harness import ACK_TIMEOUT, BenchEnv, Row, bench_env, median
from bench.payloads import MessageFactory
from memstream.projections.sqlite.database import open_database
from memstream.projections.sqlite.session_queries import SqliteSessionQueries
from memstream.projections.sqlite.store import SqliteCopy
from memstream.workers.admin.rebuild import rebuild
from memstream.workers.log.event_log import EventLog, connect_nats

NAME = "rebuild"
TITLE = "projector rebuild of 100,000 message events"
TARGET = 0.5
SESSIONS = 100
PER_SESSION = 1_000
FETCH = 1000
ROUNDS = 2

_RAW_SCHEMA = """
CREATE TABLE raw_messages (
    seq INTEGER PRIMARY KEY, subject TEXT, id TEXT, parent_id TEXT, content TEXT
);
CREATE VIRTUAL TABLE raw_fts USING fts5(text, content = '', tokenize = 'porter unicode61');
CREATE TABLE raw_tracking (seq INTEGER NOT NULL);
INSERT INTO raw_tracking VALUES (0);
"""


async def raw_consume(
    client: Client,
    stream: str,
    until: int,
    durable: str,
    write: Callable[[list[Msg]], int],
) -> int:
    """The baselines' consumer: a durable pull consumer fetching :data:`FETCH` at a time, each
    batch handed to ``write`` (one transaction; it returns the rows it wrote) and acknowledged
    once. Returns the rows written."""
    js = client.jetstream(timeout=ACK_TIMEOUT)
    subscription = await js.pull_subscribe(
        "ms.>",
        durable=durable,
        stream=stream,
        config=api.ConsumerConfig(
            ack_policy=api.AckPolicy.ALL,
            deliver_policy=api.DeliverPolicy.ALL,
            max_ack_pending=-1,
        ),
    )
    reached = rows = 0
    try:
        while reached < until:
            msgs = await subscription.fetch(FETCH, timeout=ACK_TIMEOUT)
            rows += write(msgs)
            await msgs[-1].ack()
            reached = msgs[-1].metadata.sequence.stream
        return rows
    finally:
        await subscription.unsubscribe()


async def raw_rebuild(client: Client, stream: str, database: Path, until: int, durable: str) -> int:
    """The baseline: batched ``executemany`` inserts of the message rows and their FTS5 text
    (contentless, as ours), one transaction per fetched batch."""
    connection = sqlite3.connect(database, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = NORMAL")
    connection.executescript(_RAW_SCHEMA)

    def write(msgs: list[Msg]) -> int:
        messages: list[tuple[int, str, str, str | None, str]] = []
        texts: list[tuple[int, str]] = []
        for msg in msgs:
            seq = msg.metadata.sequence.stream
            event = json.loads(msg.data)  # the event contract's plain JSON
            message = event["message"]
            # The stored content is the message's canonical JSON text, as ours stores it.
            content = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
            parts = message["parts"]
            text = " ".join(p["text"] for p in parts if p.get("type") == "text")
            messages.append((seq, msg.subject, message["id"], event["parent_id"], content))
            texts.append((seq, text))
        connection.execute("BEGIN IMMEDIATE")
        connection.executemany("INSERT INTO raw_messages VALUES (?, ?, ?, ?, ?)", messages)
        connection.executemany("INSERT INTO raw_fts (rowid, text) VALUES (?, ?)", texts)
        connection.execute("UPDATE raw_tracking SET seq = ?", (msgs[-1].metadata.sequence.stream,))
        connection.execute("COMMIT")
        return len(messages)

    try:
        return await raw_consume(client, stream, until, durable, write)
    finally:
        connection.close()


def _count(database: Path) -> int:
    connection = open_database(database)
    try:
        queries = SqliteSessionQueries(connection)
        return sum(queries.message_count("default", f"chat-{s}") for s in range(SESSIONS))
    finally:
        connection.close()


async def filled_log(env: BenchEnv, client: Client) -> tuple[EventLog, float]:
    """The log of :data:`SESSIONS` × :data:`PER_SESSION` message events; the seconds it took."""
    log = EventLog(client, env.settings.stream, timeout=ACK_TIMEOUT)
    await log.ensure_stream()
    start = time.perf_counter()
    await fill_log(log, MessageFactory(seed=3), sessions=SESSIONS, per_session=PER_SESSION)
    fill_seconds = time.perf_counter() - start
    until = await log.stream_last_seq()
    assert until == SESSIONS * PER_SESSION, f"log has {until} events"
    return log, fill_seconds


async def rounds(
    ours: Callable[[int], Awaitable[object]],
    raw: Callable[[int], Awaitable[object]],
    check: Callable[[int], None],
) -> tuple[list[float], list[float]]:
    """Seconds of :data:`ROUNDS` interleaved rounds of ``ours(round)`` and ``raw(round)``, each
    round's results checked by ``check(round)`` after both (not timed)."""
    ours_times: list[float] = []
    raw_times: list[float] = []
    for round_ in range(ROUNDS):
        start = time.perf_counter()
        await ours(round_)
        ours_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        await raw(round_)
        raw_times.append(time.perf_counter() - start)
        check(round_)
    return ours_times, raw_times


def result(title: str, ours: list[float], raw: list[float], fill: float, notes: str) -> Row:
    total = SESSIONS * PER_SESSION
    ours_rate, raw_rate = total / median(ours), total / median(raw)
    ratio = ours_rate / raw_rate
    return Row(
        title,
        f"{ours_rate:,.0f} events/s ({median(ours):.1f} s)",
        f"{raw_rate:,.0f} events/s ({median(raw):.1f} s)",
        f"{ratio:.2f}×",
        f"≥ {TARGET}×",
        ratio >= TARGET,
        f"{SESSIONS} sessions × {PER_SESSION:,} single-message events (written in "
        f"{fill:.1f} s); the faster of {ROUNDS} interleaved rounds each, seconds ours "
        + ", ".join(f"{s:.1f}" for s in ours)
        + " / raw "
        + ", ".join(f"{s:.1f}" for s in raw)
        + f"; both fetch {FETCH} at a time and commit one transaction per fetch; {notes}",
    )


async def run() -> Row:
    total = SESSIONS * PER_SESSION
    async with bench_env(NAME) as env:
        client = await connect_nats(env.server.url)
        try:
            log, fill = await filled_log(env, client)
            database = env.root / "ours.db"

            async def ours(_: int) -> None:
                reached = await rebuild(log, SqliteCopy(database))  # drops, then replays
                assert reached == total, f"rebuild reached {reached}"

            async def raw(round_: int) -> None:
                target = env.root / f"raw-{round_}.db"
                rows = await raw_rebuild(client, log.stream, target, total, f"raw{round_}")
                assert rows == total, f"raw rebuild wrote {rows} rows"

            def check(_: int) -> None:
                assert _count(database) == total, "ours lacks messages"

            ours_times, raw_times = await rounds(ours, raw, check)
        finally:
            await client.close()
    return result(
        TITLE,
        ours_times,
        raw_times,
        fill,
        "the baseline stores each message as json.dumps of the parsed object, ours as the text "
        "the payload holds (the same bytes for events memstream wrote)",
    )
