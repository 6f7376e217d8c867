"""A memstream client in a process of its own, for tests of what a new process reads to decide a
context command.

``python tests/support/context_process.py fill NATS_URL STREAM DATA_DIR COUNT`` appends
``COUNT`` lines to the ``notes`` block of session ``s`` (each write carries the whole block) and
indexes ``COUNT`` entries (50 keys, each rewritten) in the search block ``kb``, with the
projector in this process, waits until the read model has them and exits.

``python tests/support/context_process.py first NATS_URL STREAM DATA_DIR COUNT`` connects (with
the projector in the process) and runs, as its very first commands: an append to the block, a
rewrite of an entry with its current content (a no-op) and a change of an entry. It prints one
JSON line: the log entries the commands read, the block's content and the log sequences after
each command.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from memstream import SearchBlock, Session
from memstream.client import Memstream, open_memstream
from memstream.settings import Settings


def _session(ms: Memstream) -> Session:
    return ms.session("s").with_context("notes").with_context("kb", provider=SearchBlock())


async def fill(settings: Settings, count: int) -> dict[str, Any]:
    ms = await open_memstream(settings, workers=True)
    try:
        session = _session(ms)
        for n in range(count):
            await session.append_context_block("notes", f"line {n}")
            await _index(session, f"k{n % 50}", f"entry {n}")
        await ms.wait_for("context")
        return {"stream_last_seq": await ms.core.log.stream_last_seq()}
    finally:
        await ms.close()


async def _index(session: Session, key: str, content: str) -> None:
    await session.execute_tool(
        "set_context", {"label": "kb", "content": content, "metadata": {"title": key}}
    )


async def first(settings: Settings, count: int) -> dict[str, Any]:
    last_written = max(n for n in range(count) if n % 50 == 7)  # entry k7's content now
    # With its own projector: a set_context tool call reads the block back after writing.
    ms = await open_memstream(settings, workers=True)
    try:
        session = _session(ms)
        before = await ms.core.log.stream_last_seq()
        block = await session.append_context_block("notes", "last line")
        after_append = await ms.core.log.stream_last_seq()
        await _index(session, "k7", f"entry {last_written}")
        after_same = await ms.core.log.stream_last_seq()
        await _index(session, "k7", "changed")
        after_change = await ms.core.log.stream_last_seq()
        return {
            "entries_read": ms.core.log.entries_read,
            "content_tail": block.content[-40:] if block.content else "",
            "lines": len((block.content or "").splitlines()),
            "seqs": [before, after_append, after_same, after_change],
        }
    finally:
        await ms.close()


def main(argv: list[str]) -> None:
    mode, url, stream, data_dir, count = argv[:5]
    settings = Settings(data_dir=Path(data_dir), nats_url=url, stream=stream)
    if mode == "fill":
        result = asyncio.run(fill(settings, int(count)))
    else:
        result = asyncio.run(first(settings, int(count)))
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
