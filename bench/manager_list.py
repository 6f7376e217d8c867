"""``SessionManager.list()`` over 10,000 registered sessions against one raw SQLite query
returning the same rows as the same dicts."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any

from bench.harness import ACK_TIMEOUT, Row, bench_env, median, ms
from memstream.client import Memstream
from memstream.domain.session_registry import SessionRecord
from memstream.projections.sqlite.database import open_database
from memstream.workers.log.codec import H_MSG_ID, CommandMeta, encode_event
from memstream.workers.log.subjects import subject_for

NAME = "manager_list"
TITLE = "SessionManager.list() over 10,000 sessions"
TARGET = 1.5
SESSIONS = 10_000
USAGE_EVERY = 5  # every fifth session also records usage: it moves up the list
MODELS = ("gpt-4o-mini", "claude-sonnet", "llama-3-70b", None)
ROUNDS = 15

# The baseline: every row of the namespace, most recently active first, in one statement on the
# (namespace, updated_seq) index.
_BASELINE = """
SELECT session_id, name, parent_session_id, model, source, input_tokens, output_tokens, cost,
       end_reason, created_at, updated_at
FROM session_registry WHERE namespace = ? ORDER BY updated_seq DESC
"""


def baseline_list(connection: sqlite3.Connection, namespace: str) -> list[dict[str, Any]]:
    return [
        {
            "id": r[0],
            "name": r[1],
            "parent_session_id": r[2],
            "model": r[3],
            "source": r[4],
            "input_tokens": r[5],
            "output_tokens": r[6],
            "estimated_cost": r[7],
            "end_reason": r[8],
            "created_at": r[9],
            "updated_at": r[10],
        }
        for r in connection.execute(_BASELINE, (namespace,))
    ]


async def register(memstream: Memstream, count: int, window: int = 1000) -> int:
    """Register ``count`` sessions (and usage on some), as ``SessionManager.create`` and
    ``add_usage`` decide and encode them, published with a window; returns the last sequence.
    """
    js = memstream.core.log.client.jetstream(timeout=ACK_TIMEOUT, publish_async_max_pending=window)
    futures = []
    for index in range(count):
        session_id = f"chat-{index:05d}"
        record = SessionRecord.empty(memstream.namespace, session_id)
        events = record.create(
            f"Conversation {index}",
            model=MODELS[index % len(MODELS)],
            source="bench",
            parent_session_id=f"chat-{index - 1:05d}" if index % 10 == 9 else None,
        )
        for event in events:
            event.mutate(record)
        if index % USAGE_EVERY == 0:
            usage = record.add_usage(100 + index, 40 + index % 300, 0.0015 * (index % 7))
            for event in usage:
                event.mutate(record)
            events += usage
        subject = subject_for(
            memstream.core.log.subject_prefix, memstream.namespace, "registry", session_id
        )
        for event in events:
            meta = CommandMeta()
            data, headers = encode_event(event, meta, meta.command_id)
            headers[H_MSG_ID] = meta.command_id
            futures.append(
                await js.publish_async(subject, data, wait_stall=ACK_TIMEOUT, headers=headers)
            )
    acks = await asyncio.wait_for(asyncio.gather(*futures), ACK_TIMEOUT)
    return max(ack.seq for ack in acks)


async def run() -> Row:
    async with bench_env(NAME) as env:
        memstream = await env.memstream()
        try:
            start = time.perf_counter()
            last = await register(memstream, SESSIONS)
            await memstream.wait_for("registry", last)
            fill = time.perf_counter() - start
            manager = memstream.session_manager()
            connection = open_database(env.settings.data_dir / "memstream.db")
            try:
                expected = baseline_list(connection, memstream.namespace)
                assert len(expected) == SESSIONS, f"{len(expected)} sessions registered"
                assert await manager.list() == expected, "the lists differ"
                ours: list[float] = []
                baseline: list[float] = []
                for _ in range(ROUNDS):
                    start = time.perf_counter()
                    await manager.list()
                    ours.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    baseline_list(connection, memstream.namespace)
                    baseline.append(time.perf_counter() - start)
            finally:
                connection.close()
        finally:
            await memstream.close()
    ratio = median(ours) / median(baseline)
    return Row(
        TITLE,
        ms(median(ours)),
        ms(median(baseline)),
        f"{ratio:.2f}×",
        f"≤ {TARGET}×",
        ratio <= TARGET,
        f"median of {ROUNDS} interleaved calls; both return the {SESSIONS:,} SessionInfo dicts "
        f"most recently active first (ours in one query, as list() reads them); baseline one "
        f"SELECT on the (namespace, updated_seq) index; {SESSIONS:,} registrations (every "
        f"{USAGE_EVERY}th with usage) decided by SessionRecord and published with a window, "
        f"projected in {fill:.1f} s",
    )
