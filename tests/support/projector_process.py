"""Run the projector worker as its own OS process, for kill/restart failure tests.

Usage: ``python tests/support/projector_process.py NATS_URL STREAM DATABASE [BATCH_SIZE [PREFIX]]``.
SIGTERM/SIGINT stop it gracefully; SIGKILL is what the tests use to crash it.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

from memstream.workers.service import WorkerConfig, run_worker


async def main(argv: list[str]) -> None:
    nats_url, stream, database = argv[:3]
    batch_size = int(argv[3]) if len(argv) > 3 else 500
    prefix = argv[4] if len(argv) > 4 else "ms"
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    config = WorkerConfig(
        nats_url, stream, Path(database), batch_size=batch_size, subject_prefix=prefix
    )
    await run_worker("projector", config, stop)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(main(sys.argv[1:]))
