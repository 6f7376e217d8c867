"""Optimistic concurrency on a real nats-server: many independent writers, one session."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest
from support.read_models import EMBEDDED_VERIFIED

from memstream.client import Memstream, open_memstream
from memstream.projections.sqlite.database import open_database
from memstream.projections.sqlite.store import SqliteCopy
from memstream.settings import Settings
from memstream.workers.admin.rebuild import verify
from memstream.workers.log.event_log import (
    EventLog,
    ExpectedSequenceMismatch,
    OutgoingMessage,
    PublishResult,
)

WRITERS = 8
PER_WRITER = 500


class CountingLog(EventLog):
    """The real log, counting publishes and the ones refused by optimistic concurrency."""

    def __init__(self, log: EventLog) -> None:
        super().__init__(log.client, log.stream, log.subject_prefix, log.timeout)
        self.publishes = 0
        self.conflicts = 0

    async def publish(
        self, subject: str, messages: Sequence[OutgoingMessage], expected_last_seq: int | None
    ) -> PublishResult:
        self.publishes += 1
        try:
            return await super().publish(subject, messages, expected_last_seq)
        except ExpectedSequenceMismatch:
            self.conflicts += 1
            raise


@pytest.mark.sqlite_only
@pytest.mark.slow
async def test_eight_independent_writers_on_one_session_lose_no_update(settings: Settings) -> None:
    # Given 8 independent clients (own NATS connection, own aggregate cache), one projecting
    clients: list[Memstream] = []
    logs: list[CountingLog] = []
    try:
        for index in range(WRITERS):
            client = await open_memstream(settings, workers=index == 0)
            logs.append(CountingLog(client.core.log))
            client.core.commands.sessions.log = logs[-1]
            clients.append(client)

        async def write(index: int, client: Memstream) -> None:
            # Every append must succeed within the store's time-bounded retries: no
            # ConcurrencyError reaches the writers, and none of them retries by itself
            session = client.session("shared")
            for n in range(PER_WRITER):
                message = {"id": f"w{index}-{n}", "role": "user", "content": f"writer {index} #{n}"}
                await session.append_message(message)

        # When each appends 500 messages to the same session concurrently (parent omitted)
        started = time.monotonic()
        await asyncio.wait_for(asyncio.gather(*(write(i, c) for i, c in enumerate(clients))), 120)
        elapsed = time.monotonic() - started

        # Then all 4,000 messages are in the read model, as one chain: every append saw the
        # latest leaf, so no two messages share a parent and every parent exists
        projector = clients[0]
        await projector.wait_for("sessions", max(c.core.ryw.last_write_seq for c in clients))
        history = await projector.session("shared").get_history()
        database = open_database(settings.data_dir / "memstream.db")
        try:
            rows = database.execute(
                "SELECT id, parent_id, child_count FROM messages ORDER BY position"
            ).fetchall()
        finally:
            database.close()
        ids = {r[0] for r in rows}
        expected = {f"w{i}-{n}" for i in range(WRITERS) for n in range(PER_WRITER)}
        assert len(rows) == WRITERS * PER_WRITER
        assert ids == expected
        assert [r[1] for r in rows] == [None, *[r[0] for r in rows[:-1]]]
        assert all(parent in ids for _, parent, _ in rows[1:])
        assert [r[2] for r in rows] == [1] * (len(rows) - 1) + [0]
        assert [m["id"] for m in history] == [r[0] for r in rows]
        assert await projector.session("shared").get_path_length() == len(rows)
        # And each writer's own messages are in its own order
        for i in range(WRITERS):
            own = [r[0] for r in rows if r[0].startswith(f"w{i}-")]
            assert own == [f"w{i}-{n}" for n in range(PER_WRITER)]
        # And the read model equals a rebuild from the log
        results = await verify(projector.core.log, SqliteCopy(settings.data_dir / "memstream.db"))
        assert [r.projection for r in results] == [*EMBEDDED_VERIFIED]
        assert all(r.ok for r in results), results

        publishes = sum(log.publishes for log in logs)
        conflicts = sum(log.conflicts for log in logs)
        print(
            f"\n{WRITERS}x{PER_WRITER} appends in {elapsed:.1f} s; {publishes} publishes, "
            f"{conflicts} conflicts (retries), per writer "
            f"{[log.conflicts for log in logs]}"
        )
        # And optimistic concurrency really was exercised
        assert conflicts > 0
        assert publishes == WRITERS * PER_WRITER + conflicts
    finally:
        for client in clients:
            await client.close()
