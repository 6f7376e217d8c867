"""An agent loop over 50 interleaved sessions: each step appends one message and reads that
session's history, against the architecture's floor doing the same job by hand.

The floor, per step: an awaited JetStream publish of the same message JSON (the log), then in
SQLite (WAL, one transaction) the message's tree row and its FTS5 text (contentless, as ours),
then a recursive-CTE walk from the new leaf to the root with every message's JSON decoded (the
read model and the read). Its WAL checkpoints run in a thread, as the projector's do. Ours:
``Session.append_message`` and ``Session.get_history`` with the projector in this process (the
embedded default), so the read waits for the projection of the write.

Both run on a nats-server that syncs every write before acknowledging it (``sync_interval:
always``, memstream's default), then on one with nats-server's own lazy default (``2m``), the
floor publishing to the same server as ours each time.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Protocol

from nats.js import JetStreamContext

from bench.harness import (
    LAZY_SYNC,
    RAW_SUBJECT,
    SYNCS,
    Row,
    bench_env,
    median,
    ms,
    paired_ratio,
    raw_stream,
    sync_name,
)
from bench.payloads import MessageFactory, payload
from memstream.client import Memstream
from memstream.projections.sqlite.checkpointer import Checkpointer, defer_checkpoints
from memstream.session import Session
from memstream.workers.runtime.nats_server import SYNC_ALWAYS

NAME = "agent_loop"
TITLE = "agent loop: append one message, read the history (50 sessions)"
TARGET = 0.75
SESSIONS = 50
ROUNDS = 5
STEPS_PER_ROUND = 500  # 10 steps per session per round: histories grow to 50+ messages

_SCHEMA = """
CREATE TABLE messages (
    mid INTEGER PRIMARY KEY,
    session TEXT NOT NULL,
    id TEXT NOT NULL,
    parent_mid INTEGER,
    content TEXT NOT NULL,
    UNIQUE (session, id)
);
CREATE VIRTUAL TABLE messages_fts USING fts5(text, content = '', tokenize = 'porter unicode61');
"""

_PATH = """
WITH RECURSIVE path (mid, parent_mid, content, depth) AS (
    SELECT mid, parent_mid, content, 0 FROM messages WHERE mid = ?
    UNION ALL
    SELECT m.mid, m.parent_mid, m.content, path.depth + 1
    FROM path JOIN messages AS m ON m.mid = path.parent_mid
)
SELECT content FROM path ORDER BY depth DESC
"""


class Floor:
    """The hand-written floor: publish, insert row + FTS5 text, walk the path."""

    def __init__(self, js: JetStreamContext, database: Path) -> None:
        self.js = js
        self.db = sqlite3.connect(database, isolation_level=None)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        # Checkpoints in a thread of their own, off the commit path, as the projector has them
        # (a commit that checkpoints stalls: bench/RESULTS.md, 'Figures moved from code comments').
        defer_checkpoints(self.db)
        self.checkpointer = Checkpointer(database)
        self.checkpointer.start()
        self.db.executescript(_SCHEMA)
        self.leaves: dict[str, int | None] = {}

    async def step(self, session: str, message: dict[str, Any]) -> list[dict[str, Any]]:
        data = payload(message)
        await self.js.publish(f"{RAW_SUBJECT}.{session}", data)
        text = " ".join(p["text"] for p in message["parts"] if "text" in p)
        self.db.execute("BEGIN IMMEDIATE")
        cursor = self.db.execute(
            "INSERT INTO messages (session, id, parent_mid, content) VALUES (?, ?, ?, ?)",
            (session, message["id"], self.leaves.get(session), data.decode()),
        )
        leaf = cursor.lastrowid
        self.db.execute("INSERT INTO messages_fts (rowid, text) VALUES (?, ?)", (leaf, text))
        self.db.execute("COMMIT")
        self.checkpointer.committed()
        self.leaves[session] = leaf
        return [json.loads(row[0]) for row in self.db.execute(_PATH, (leaf,))]

    def close(self) -> None:
        self.checkpointer.stop()
        self.db.close()


class Steps(Protocol):
    """A floor: one step of the loop done by hand."""

    async def step(self, session: str, message: dict[str, Any]) -> list[dict[str, Any]]: ...


async def _ours(sessions: list[Session], messages: list[dict[str, Any]]) -> float:
    start = time.perf_counter()
    for index, message in enumerate(messages):
        session = sessions[index % SESSIONS]
        await session.append_message(message)
        history = await session.get_history()
        assert history[-1]["id"] == message["id"], "the write is not visible"
    return len(messages) / (time.perf_counter() - start)


async def _floor(floor: Steps, messages: list[dict[str, Any]]) -> float:
    start = time.perf_counter()
    for index, message in enumerate(messages):
        history = await floor.step(f"chat-{index % SESSIONS}", message)
        assert history[-1]["id"] == message["id"]
    return len(messages) / (time.perf_counter() - start)


async def compare(memstream: Memstream, floor: Steps) -> tuple[list[float], list[float]]:
    """Steps/s of ours and of ``floor`` in :data:`ROUNDS` interleaved rounds, after a warm-up."""
    factory = MessageFactory(seed=11)
    sessions = [memstream.session(f"chat-{s}") for s in range(SESSIONS)]
    warm = factory.messages("warm", SESSIONS)
    await _ours(sessions, warm)  # loads each aggregate once, as a running agent has
    await _floor(floor, warm)
    ours: list[float] = []
    base: list[float] = []
    for round_ in range(ROUNDS):
        messages = factory.messages(f"r{round_}", STEPS_PER_ROUND)
        # Alternate which goes first, so drift of the machine cancels in the pairs.
        if round_ % 2:
            base.append(await _floor(floor, messages))
            ours.append(await _ours(sessions, messages))
        else:
            ours.append(await _ours(sessions, messages))
            base.append(await _floor(floor, messages))
    return ours, base


def result(title: str, target: float, ours: list[float], base: list[float], notes: str = "") -> Row:
    ratio = paired_ratio(ours, base)
    return Row(
        title,
        f"{median(ours):,.0f} steps/s",
        f"{median(base):,.0f} steps/s",
        f"{ratio:.2f}×",
        f"≥ {target}×",
        ratio >= target,
        f"{notes}medians of {ROUNDS} interleaved rounds of {STEPS_PER_ROUND} steps (alternating "
        f"which goes first), ratio the median of per-round ratios; messages of 200-500 bytes of "
        f"text; histories grow to {(ROUNDS * STEPS_PER_ROUND) // SESSIONS + 1} messages; rounds "
        f"ours {', '.join(f'{x:,.0f}' for x in ours)} / floor "
        f"{', '.join(f'{x:,.0f}' for x in base)}",
    )


def durability(
    synced: tuple[list[float], list[float]], lazy: tuple[list[float], list[float]]
) -> str:
    """What syncing every write costs the loop: steps/s lazy → always and the time it adds to
    a step (difference of the median times per step), ours and the floor's."""
    parts = []
    for name, always, relaxed in (("ours", synced[0], lazy[0]), ("floor", synced[1], lazy[1])):
        added = 1 / median(always) - 1 / median(relaxed)
        parts.append(
            f"{name} {median(relaxed):,.0f} → {median(always):,.0f} steps/s (+{ms(added)} a "
            f"step, {median(relaxed) / median(always):.1f}× slower)"
        )
    return "; ".join(parts)


async def run() -> list[Row]:
    figures: dict[str, tuple[list[float], list[float]]] = {}
    for sync in SYNCS:
        async with bench_env(NAME, sync=sync) as env:
            memstream = await env.memstream()
            raw = await env.raw_client()
            floor = Floor(await raw_stream(raw), env.root / "floor.db")
            try:
                figures[sync] = await compare(memstream, floor)
            finally:
                floor.close()
                await raw.close()
                await memstream.close()
    cost = durability(figures[SYNC_ALWAYS], figures[LAZY_SYNC])
    return [
        result(
            TITLE,
            TARGET,
            *figures[SYNC_ALWAYS],
            f"nats-server {sync_name(SYNC_ALWAYS)} (memstream's default) for ours and the "
            f"floor; what syncing every write costs (always vs {LAZY_SYNC}): {cost}; ",
        ),
        result(
            f"{TITLE}, {sync_name(LAZY_SYNC)}",
            TARGET,
            *figures[LAZY_SYNC],
            f"nats-server {sync_name(LAZY_SYNC)} (nats-server's default) for ours and the floor; ",
        ),
    ]
