"""The projector as its own OS process (the distributed shape) for benchmarks that compare it.

``python -m bench.projector_process NATS_URL STREAM DATABASE``; SIGTERM stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from memstream.workers.service import WorkerConfig, run_worker


@contextlib.contextmanager
def projector_process(url: str, stream: str, database: Path) -> Iterator[None]:
    """Run a projector worker process for the duration of a ``with`` block."""
    database.parent.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parents[1]
    command = [sys.executable, "-m", "bench.projector_process", url, stream, str(database)]
    process = subprocess.Popen(command, cwd=root)
    try:
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def _main(url: str, stream: str, database: str) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await run_worker("projector", WorkerConfig(url, stream, Path(database)), stop)


if __name__ == "__main__":
    asyncio.run(_main(*sys.argv[1:4]))
