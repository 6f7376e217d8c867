"""Everything a user reads back from a read-model copy, as JSON on the last line: history, a
branch, cross-session search, sessions, context blocks, memories and a recall. One process
(connect once, the embedding model loaded once) instead of one CLI process per read.

Settings come from the ``MEMSTREAM_*`` environment, as for the CLI.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from memstream.client import open_memstream
from memstream.settings import Settings


async def main() -> dict[str, Any]:
    ms = await open_memstream(Settings.from_env(), workers=False)
    try:
        for projection in ("sessions", "context", "registry", "memory"):
            await ms.sync(projection)
        trip = ms.session("trip")
        profile = await ms.agent_memory().get_profile("alice")
        sessions = ms.core.reads.session_queries.sessions(ms.namespace)
        return {
            "history": await trip.get_history(),
            "branch": await trip.get_history("m2"),
            "search": ms.core.reads.session_queries.search(ms.namespace, None, "ferry", 20),
            "sessions": [
                {k: v for k, v in s.items() if k not in ("first_at", "last_at")} for s in sessions
            ],
            "blocks": ms.core.reads.context_queries.blocks(ms.namespace, "trip"),
            "memories": (await profile.list())["memories"],
            "recall": (await profile.recall("Which language?"))["candidates"],
        }
    finally:
        await ms.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main()), default=str, sort_keys=True))
