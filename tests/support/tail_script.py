"""A client process for the lost-tail tests: one ``memstream.connect()`` on the settings in the
environment, one job, its result as JSON on the last line.

Usage: ``python tests/support/tail_script.py JOB SESSION [START COUNT]``. Jobs:

- ``append START COUNT``: append messages ``m<START>``.. (COUNT of them), one command each;
  prints the stream sequence of the last.
- ``history``: prints SESSION's message ids.
"""

from __future__ import annotations

import asyncio
import json
import sys

import memstream


async def main(job: str, session_id: str, args: list[str]) -> None:
    async with memstream.connect() as ms:
        session = ms.session(session_id)
        if job == "append":
            start, count = int(args[0]), int(args[1])
            for i in range(start, start + count):
                await session.append_message(
                    {"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"n {i}"}]}
                )
            print(json.dumps(await ms.core.log.stream_last_seq()))
        elif job == "history":
            print(json.dumps([m["id"] for m in await session.get_history()]))
        else:
            raise SystemExit(f"unknown job {job!r}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
