"""A short-lived client process for multi-process tests: one ``memstream.connect()``, one job.

Usage: ``python tests/support/session_script.py JOB SESSION [N]`` with the MEMSTREAM_* settings
in the environment. Jobs:

- ``append N``: append N messages (``m0``..) to SESSION, one command each, and exit.
- ``history``: print SESSION's history as JSON.
- ``refresh TEXT``: with a cached prompt, set block "memory" to TEXT and refresh the prompt.
- ``freeze``: print the frozen system prompt of SESSION (cached prompt) as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys

import memstream


def _session(ms: memstream.Memstream, session_id: str) -> memstream.Session:
    return ms.session(session_id).with_context("memory", description="Facts").with_cached_prompt()


async def main(job: str, session_id: str, arg: str | None) -> None:
    async with memstream.connect() as ms:
        if job == "append":
            session = ms.session(session_id)
            for i in range(int(arg or "1")):
                await session.append_message(
                    {"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"n {i}"}]}
                )
        elif job == "history":
            print(json.dumps([m["id"] for m in await ms.session(session_id).get_history()]))
        elif job == "refresh":
            session = _session(ms, session_id)
            await session.freeze_system_prompt()
            await session.replace_context_block("memory", arg or "")
            await session.refresh_system_prompt()
        elif job == "freeze":
            print(json.dumps(await _session(ms, session_id).freeze_system_prompt()))
        else:
            raise SystemExit(f"unknown job {job!r}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
