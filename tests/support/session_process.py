"""A memstream client in a process of its own, for tests of what a new process decides.

``python tests/support/session_process.py fill NATS_URL STREAM DATA_DIR SESSION COUNT`` appends
``COUNT`` messages ``m00000…`` in one chain (chains of 500) plus a side branch ``b1`` under
``m00010``, with the projector in this process, waits until the read model has them and exits.

``python tests/support/session_process.py trickle NATS_URL STREAM DATA_DIR SESSION COUNT``
appends ``COUNT`` messages one at a time, a few milliseconds apart, without workers.

``python tests/support/session_process.py read NATS_URL STREAM DATA_DIR SESSION`` connects
without workers, reads the session's history once and prints its ids and how long it took.

``python tests/support/session_process.py first NATS_URL STREAM DATA_DIR SESSION`` connects
without workers and runs, as its very first commands: an append of an id that exists, an append
with the parent omitted, one under an existing parent deep in the chain, and one under an
unknown parent. It prints one JSON line: the log entries the commands read, the sequences they
returned and, read back from the log afterwards, the parents they decided.

The stream's subject prefix is ``MEMSTREAM_SUBJECT_PREFIX`` (default ``ms``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from memstream.client import open_memstream
from memstream.domain.errors import MessageNotFoundError
from memstream.settings import Settings
from memstream.workers.log.codec import decode_event


def _message(message_id: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": message_id}]}


async def fill(settings: Settings, session_id: str, count: int) -> dict[str, Any]:
    ms = await open_memstream(settings, workers=True)
    try:
        session = ms.session(session_id)
        ids = [f"m{i:05d}" for i in range(count)]
        await session.append_messages([_message(i) for i in ids[:11]])
        await session.append_message(_message("b1"), "m00010")  # a side branch
        await session.append_message(_message(ids[11]), "m00010")
        for start in range(12, count, 500):
            await session.append_messages([_message(i) for i in ids[start : start + 500]])
        await ms.wait_for("sessions")
        return {"last": ids[-1], "stream_last_seq": await ms.core.log.stream_last_seq()}
    finally:
        await ms.close()


async def first(settings: Settings, session_id: str) -> dict[str, Any]:
    ms = await open_memstream(settings, workers=False)
    try:
        session = ms.session(session_id)
        before = await ms.core.log.stream_last_seq()
        existing = await session.append_message(_message("m00003"))
        omitted = await session.append_message(_message("new-leaf"))
        deep = await session.append_message(_message("new-branch"), "m00500")
        try:
            await session.append_message(_message("orphan"), "no-such-parent")
            refused = ""
        except MessageNotFoundError as error:
            refused = str(error)
        entries_read = ms.core.log.entries_read
        parents: dict[str, Any] = {}
        async for entry in ms.core.log.read_subject(
            ms.core.commands.session_subject(session_id), before
        ):
            event: Any = decode_event(entry.payload, entry.headers, entry.subject)
            parents[event.message_id] = event.parent_id
        return {
            "entries_read": entries_read,
            "before": before,
            "existing": existing,
            "omitted": omitted,
            "deep": deep,
            "refused": refused,
            "parents": parents,
        }
    finally:
        await ms.close()


async def trickle(settings: Settings, session_id: str, count: int) -> dict[str, Any]:
    """Append ``count`` messages one at a time, a moment apart, without workers: another
    process's writes falling between the writes of a client under test."""
    ms = await open_memstream(settings, workers=False)
    try:
        session = ms.session(session_id)
        for i in range(count):
            await session.append_message(_message(f"t{i:05d}"))
            await asyncio.sleep(0.003)
        return {"appended": count, "last_write_seq": ms.core.ryw.last_write_seq}
    finally:
        await ms.close()


async def read(settings: Settings, session_id: str) -> dict[str, Any]:
    """Connect without workers and read the session's history once: what a new process sees
    of another's writes (everything the log held when it connected)."""
    started = time.monotonic()
    ms = await open_memstream(settings, workers=False)
    try:
        connected = time.monotonic()
        history = await ms.session(session_id).get_history()
        return {
            "ids": [m["id"] for m in history],
            "connected_seq": ms.core.ryw.connected_seq,
            "connect_seconds": connected - started,
            "read_seconds": time.monotonic() - connected,
        }
    finally:
        await ms.close()


def main(argv: list[str]) -> None:
    mode, url, stream, data_dir, session_id = argv[:5]
    settings = Settings(
        data_dir=Path(data_dir),
        nats_url=url,
        stream=stream,
        subject_prefix=os.environ.get("MEMSTREAM_SUBJECT_PREFIX") or "ms",
    )
    if mode == "fill":
        result = asyncio.run(fill(settings, session_id, int(argv[5])))
    elif mode == "trickle":
        result = asyncio.run(trickle(settings, session_id, int(argv[5])))
    elif mode == "read":
        # (an optional 6th argument: the read models' PostgreSQL URL)
        if len(argv) > 5 and argv[5]:
            settings = settings.with_(database_url=argv[5])
        result = asyncio.run(read(settings, session_id))
    else:
        result = asyncio.run(first(settings, session_id))
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
