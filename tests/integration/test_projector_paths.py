"""The projector's ways of reading its consumer and applying batches build the same read model:
standing pull requests with deferred acks (the default) or nats-py's request-per-batch path;
batches applied in the event loop or in a worker thread."""

from __future__ import annotations

import asyncio
from pathlib import Path

from memstream.client import open_memstream
from memstream.projections.sqlite.checksum import checksum
from memstream.projections.sqlite.database import open_database
from memstream.projections.sqlite.store import SqliteReadModelStore
from memstream.settings import Settings
from memstream.workers.position import Demand
from memstream.workers.projector import ProjectorWorker


async def test_every_way_of_consuming_and_applying_builds_the_same_read_model(
    settings: Settings, tmp_path: Path
) -> None:
    # Given a log with branches, updates, deletes, a compaction and context writes
    writer = await open_memstream(settings, workers=True)
    try:
        for s in range(5):
            session = writer.session(f"s{s}").with_context("memory", description="Facts")
            for i in range(40):
                await session.append_message(
                    {"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"t {i}"}]}
                )
            await session.append_message({"id": "b", "role": "user", "content": "x"}, "m10")
            await session.update_message({"id": "m3", "role": "user", "content": "edited"})
            await session.delete_messages(["m5"])
            await session.add_compaction("summary", "m0", "m4")
            await session.replace_context_block("memory", f"fact {s}")
        last = writer.last_write_seq
        sums = {}
        # (standing pulls, thread for batches of at least N bytes): the default, the stock
        # path applying in the event loop only, and every batch in a thread
        for standing, thread_bytes in ((True, None), (False, 0), (True, 1)):
            # When a projector of each kind builds its own copy from the log
            connection = open_database(tmp_path / f"copy-{standing}-{thread_bytes}.db")
            reached = asyncio.Event()
            worker = ProjectorWorker(
                writer.log,
                SqliteReadModelStore(connection),
                demand=Demand(),
                linger=0.01,
                standing_pull=standing,
                thread_bytes=thread_bytes,
                thread_events=10_000,
                on_commit=lambda seq, reached=reached: reached.set() if seq >= last else None,
            )
            worker.start()
            try:
                async with asyncio.timeout(30):
                    await reached.wait()
            finally:
                await worker.stop()
            sums[standing, thread_bytes] = {
                name: checksum(connection, name) for name in ("sessions", "context", "registry")
            }
            # (each copy holds the 5 sessions: 40 + 1 branch - 1 deleted messages each)
            assert connection.execute("SELECT count(*) FROM messages").fetchone()[0] == 200
            connection.close()
        # Then every copy is the same
        assert sums[True, None] == sums[False, 0] == sums[True, 1]
    finally:
        await writer.close()
