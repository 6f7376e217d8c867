"""The extractor as its own OS process: SIGKILLed mid-batch, a new one resumes without losing or
duplicating an extraction (the durable consumer redelivers; the profile refuses a source it has
recorded; the command id derives from the source)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

from support.deployment import deployment_env
from support.processes import MEMSTREAM

from memstream.client import open_memstream
from memstream.domain.memory_input import check_ingest
from memstream.domain.memory_profile import MemoryProfile
from memstream.settings import Settings
from memstream.workers.log.event_log import EventLog

SOURCES = 40
WHEN = datetime(2023, 5, 8, tzinfo=UTC)


def start_extractor(env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    with log.open("w") as out:
        return subprocess.Popen(
            [MEMSTREAM, "worker", "extractor"], env=env, stdout=out, stderr=subprocess.STDOUT
        )


async def extracted_sources(log: EventLog, subject: str) -> list[str]:
    found = []
    async for entry in log.read_subject(subject):
        payload = json.loads(entry.payload)
        if payload["type"] == "memory.memories_extracted":
            found.append(payload["source"])
    return found


async def test_a_killed_extractor_process_resumes_without_loss_or_duplicates(
    tmp_path: Path, settings: Settings
) -> None:
    # Given 40 ingests of a profile in the log, and no extractor yet
    ms = await open_memstream(settings, workers=False)
    subject = f"{settings.subject_prefix}.default.profile.kim"
    try:
        await ms.core.commands.profile_command("default", "kim", MemoryProfile.create)
        for number in range(SOURCES):
            texts = [
                f"On day {number} I visited the museum number {number * 20 + i} in Vienna."
                for i in range(20)
            ]
            sid, messages = check_ingest(
                [{"role": "user", "content": t} for t in texts], f"s{number}", WHEN
            )
            await ms.core.commands.profile_command(
                "default", "kim", lambda p, s=sid, m=messages: p.ingest(s, m)
            )
        env = deployment_env(
            settings, MEMSTREAM_DATA_DIR=str(tmp_path / "extractor-data"), HF_HUB_OFFLINE="1"
        )
        # When an extractor process has recorded a few of them and is killed
        first = start_extractor(env, tmp_path / "first.log")
        deadline = time.monotonic() + 120
        while len(await extracted_sources(ms.core.log, subject)) < 3:
            assert first.poll() is None, (tmp_path / "first.log").read_text()
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        at_kill = len(await extracted_sources(ms.core.log, subject))
        # And a new extractor process takes over
        second = start_extractor(env, tmp_path / "second.log")
        try:
            while len(set(await extracted_sources(ms.core.log, subject))) < SOURCES:
                assert second.poll() is None, (tmp_path / "second.log").read_text()
                assert time.monotonic() < deadline + 120
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # anything the second would duplicate lands meanwhile
            sources = await extracted_sources(ms.core.log, subject)
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(30)
        # Then every ingest was extracted exactly once
        assert len(sources) == len(set(sources)) == SOURCES
        print(f"\nkilled after {at_kill} of {SOURCES} extractions")
    finally:
        await ms.close()
