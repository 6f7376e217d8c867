"""A client of a data dir's embedded server in a process of its own, for multi-process tests.

Usage:
    ``python embedded_client.py append DATA_DIR SESSION START_AT``: wait until the wall clock
    reaches START_AT (so that several processes connect at the same moment), connect, append
    one message ``m-SESSION`` to SESSION and read it back; prints the history's ids as JSON.
    ``python embedded_client.py read DATA_DIR``: print ``{session: [message ids]}`` as JSON.
    ``python embedded_client.py writer DATA_DIR SESSION COUNT``: append COUNT messages, print
    ``ready``, then for each line ``go ID`` on stdin append message ID, retrying while the
    server is away (up to 30 s), and print ``{"id", "seconds", "attempts"}``; at end of input
    print the session's history as JSON.

Every mode uses ``memstream.connect()`` with no NATS URL: the embedded server of DATA_DIR.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import memstream
from memstream import UnavailableError

RETRY_SECONDS = 30.0


def message(message_id: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "content": f"text of {message_id}"}


async def append(data_dir: str, session_id: str, start_at: float) -> None:
    await asyncio.sleep(max(0.0, start_at - time.time()))
    async with memstream.connect(data_dir=data_dir) as ms:
        session = ms.session(session_id)
        await session.append_message(message(f"m-{session_id}"))
        print(json.dumps([m["id"] for m in await session.get_history()]), flush=True)


async def read(data_dir: str) -> None:
    async with memstream.connect(data_dir=data_dir) as ms:
        await ms.sync("sessions")
        found = {}
        for row in ms.core.reads.session_queries.sessions(ms.namespace):
            history = await ms.session(row["session_id"]).get_history()
            found[row["session_id"]] = [m["id"] for m in history]
        print(json.dumps(found), flush=True)


async def writer(data_dir: str, session_id: str, count: int) -> None:
    async with memstream.connect(data_dir=data_dir) as ms:
        session = ms.session(session_id)
        for index in range(count):
            await session.append_message(message(f"before-{index}"))
        print("ready", flush=True)
        while line := await asyncio.to_thread(sys.stdin.readline):
            message_id = line.split()[1]
            started = time.monotonic()
            attempts = 0
            while True:
                attempts += 1
                try:
                    await session.append_message(message(message_id))
                    break
                except UnavailableError:
                    # A write in flight when the server died is lost with its connection.
                    if time.monotonic() - started > RETRY_SECONDS:
                        raise
                    await asyncio.sleep(0.1)
            seconds = time.monotonic() - started
            print(json.dumps({"id": message_id, "seconds": seconds, "attempts": attempts}))
            sys.stdout.flush()
        print(json.dumps([m["id"] for m in await session.get_history()]), flush=True)


def main(argv: list[str]) -> None:
    mode, data_dir, *rest = argv
    if mode == "append":
        asyncio.run(append(data_dir, rest[0], float(rest[1])))
    elif mode == "read":
        asyncio.run(read(data_dir))
    elif mode == "writer":
        asyncio.run(writer(data_dir, rest[0], int(rest[1])))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
