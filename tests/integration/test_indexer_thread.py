"""The indexer's model works beside the event loop, never on it: in a new process (the model not
loaded yet), writes right after an ingest are acknowledged while the model loads and encodes.

Before the indexer applied its batches in a thread, loading the model (bench/RESULTS.md,
'Figures moved from code comments') ran on the event loop of the process that ingested: the second
``ingest(wait=False)`` in a row failed with "NATS did not acknowledge a write" (its 5 s ack timer
fired first).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.processes import clean_env

# Ingests in a loop on the embedded platform, measuring how long the event loop is held up
# at most (a task that wakes every 10 ms), then waits for the last ingest to be recallable.
INGESTER = """
import asyncio, json, sys, time
import memstream

async def main(data_dir):
    worst = 0.0
    stop = False

    async def heartbeat():
        nonlocal worst
        last = time.perf_counter()
        while not stop:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            worst = max(worst, now - last - 0.01)
            last = now

    async with memstream.connect(data_dir=data_dir) as ms:
        beat = asyncio.create_task(heartbeat())
        profile = await ms.agent_memory("default").get_profile("ivy")
        for n in range(6):
            await profile.ingest(
                [{"role": "user", "content": f"I planted {n + 2} apple trees in my garden."}],
                session_id=f"s{n}",
                wait=n == 5,
            )
        found = await profile.recall("How many apple trees did I plant?")
        stop = True
        await beat
    print(json.dumps({"worst_stall": worst, "count": found["count"]}), flush=True)

asyncio.run(main(sys.argv[1]))
"""


def test_ingests_in_a_new_process_are_acknowledged_while_the_model_loads(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    result = subprocess.run(
        [sys.executable, "-c", INGESTER, str(data_dir)],
        env=clean_env(MEMSTREAM_DATA_DIR=str(data_dir)),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    # The loop was never held for the model's load (seconds) nor for an encode
    assert measured["worst_stall"] < 2.0, measured
    assert measured["count"] >= 1, measured
