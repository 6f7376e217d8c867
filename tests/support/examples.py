"""Run one hypothesis example against a shared nats-server on its own stream and data dir."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from memstream.client import Memstream, open_memstream
from memstream.settings import Settings
from memstream.workers.runtime.nats_server import NatsServerProcess


def run_on_fresh_stream(
    nats_server: NatsServerProcess,
    data_dir: Path,
    stream_prefix: str,
    body: Callable[[Memstream], Awaitable[None]],
) -> None:
    """``body(ms)`` with the projector in-process on a new stream, which is deleted afterwards
    (streams on one server may not share subjects)."""
    settings = Settings(
        data_dir=data_dir,
        nats_url=nats_server.url,
        stream=stream_prefix + uuid.uuid4().hex[:12].upper(),
    )

    async def scenario() -> None:
        ms = await open_memstream(settings, workers=True)
        try:
            await body(ms)
        finally:
            if ms.core.workers.projector is not None:
                await ms.core.workers.projector.stop()
            await ms.core.log.js.delete_stream(settings.stream)
            await ms.close()

    asyncio.run(scenario())
