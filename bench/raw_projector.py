"""The raw baseline's projection for like-for-like write benchmarks: a hand-written JetStream
consumer that projects message events into SQLite rows and FTS5, committing each batch before
acknowledging it, and the events a raw writer publishes for it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from bench.harness import ACK_TIMEOUT, RAW_STREAM, RAW_SUBJECT
from memstream.projections.sqlite.checkpointer import Checkpointer, defer_checkpoints
from memstream.workers.projector import DEFAULT_LINGER

_RAW_SCHEMA = """
CREATE TABLE messages (
    mid INTEGER PRIMARY KEY,
    session TEXT NOT NULL,
    id TEXT NOT NULL,
    parent_id TEXT,
    content TEXT NOT NULL,
    UNIQUE (session, id)
);
CREATE VIRTUAL TABLE messages_fts USING fts5(text, content = '', tokenize = 'porter unicode61');
CREATE TABLE position (consumer TEXT PRIMARY KEY, seq INTEGER NOT NULL);
"""
_RAW_CONSUMER = "raw-projector"
# Gathers a burst as long as the projector does, in batches of at most this many events.
LINGER = DEFAULT_LINGER
MAX_BATCH = 1000


class RawProjector:
    """The raw equivalent of the in-process projector, as a careful hand-written consumer has it.

    A durable push consumer (acknowledge all) hands deliveries to a buffer as they arrive. Like
    the projector, it gathers a burst for up to :data:`LINGER` (or :data:`MAX_BATCH` events)
    unless someone waits for an event it has not committed, then applies it in one SQLite
    transaction (WAL with ``synchronous = NORMAL``, as the read model has it: the message rows,
    their contentless FTS5 text and the consumer's position), commits, and acknowledges the
    batch by its last message. WAL checkpoints run in a thread, off the commit path, as the
    projector's do.
    """

    def __init__(self, database: Path) -> None:
        self.db = sqlite3.connect(database, isolation_level=None)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        defer_checkpoints(self.db)
        self.checkpointer = Checkpointer(database)
        self.checkpointer.start()
        self.db.executescript(_RAW_SCHEMA)
        self.position = 0  # stream sequence of the last committed event
        self._buffer: list[Msg] = []
        self._arrived = asyncio.Event()
        self._pressing = asyncio.Event()  # someone waits, or the batch is full: commit now
        self._waiters = 0
        self._advanced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self, js: JetStreamContext) -> None:
        await js.subscribe(
            RAW_SUBJECT,
            durable=_RAW_CONSUMER,
            stream=RAW_STREAM,
            cb=self._deliver,
            manual_ack=True,
            config=api.ConsumerConfig(ack_policy=api.AckPolicy.ALL, max_ack_pending=-1),
        )
        self._task = asyncio.create_task(self._run())

    async def _deliver(self, msg: Msg) -> None:
        self._buffer.append(msg)
        self._arrived.set()
        if len(self._buffer) >= MAX_BATCH:
            self._pressing.set()

    async def _run(self) -> None:
        while True:
            await self._arrived.wait()
            if not self._waiters and len(self._buffer) < MAX_BATCH:
                self._pressing.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(LINGER):
                        await self._pressing.wait()
            self._arrived.clear()
            batch, self._buffer = self._buffer, []
            if not batch:
                continue
            seq = batch[-1].metadata.sequence.stream
            self._apply(batch, seq)
            await batch[-1].ack()
            self.position = seq
            self._advanced.set()

    def _apply(self, batch: list[Msg], seq: int) -> None:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        for msg in batch:
            event = json.loads(msg.data)
            message = event["message"]
            content = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
            cursor = db.execute(
                "INSERT INTO messages (session, id, parent_id, content) VALUES (?, ?, ?, ?)",
                (event["session_id"], message["id"], event["parent_id"], content),
            )
            text = " ".join(p["text"] for p in message["parts"] if "text" in p)
            db.execute(
                "INSERT INTO messages_fts (rowid, text) VALUES (?, ?)", (cursor.lastrowid, text)
            )
        db.execute(
            "INSERT INTO position VALUES (?, ?) ON CONFLICT (consumer) DO UPDATE SET seq = ?",
            (_RAW_CONSUMER, seq, seq),
        )
        db.execute("COMMIT")
        self.checkpointer.committed()

    async def caught_up(self, seq: int) -> None:
        """Return once the event at stream sequence ``seq`` is committed (bounded)."""
        assert self._task is not None
        self._waiters += 1
        self._pressing.set()
        try:
            async with asyncio.timeout(ACK_TIMEOUT):
                while self.position < seq:
                    if self._task.done():
                        self._task.result()  # its error
                    self._advanced.clear()
                    await self._advanced.wait()
        finally:
            self._waiters -= 1

    def rows(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM messages").fetchone()[0])

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await asyncio.to_thread(self.checkpointer.stop)
        self.db.close()


class EventChain:
    """The raw side's events of one session, in the event contract's shape
    (``session.message_appended``: type, version, time, session, parent, the message), encoded
    where they are published, as ours encodes its own."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.parent: str | None = None
        self.version = 0

    def event(self, message: dict[str, Any]) -> bytes:
        self.version += 1
        data = {
            "type": "session.message_appended",
            "version": self.version,
            "time": datetime.now(UTC).isoformat(),
            "session_id": self.session_id,
            "parent_id": self.parent,
            "message": message,
        }
        self.parent = message["id"]
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
