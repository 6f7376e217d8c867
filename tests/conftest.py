"""Shared fixtures: a real nats-server with JetStream per test worker (random port, temp store),
shared by its tests, each on its own stream and subject prefix; a fresh one per test for the
tests marked ``own_nats_server``; the read-model backend of the ``settings`` fixture."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from support.deployment import delete_streams, deployment_settings

from memstream.settings import Settings
from memstream.workers.runtime.nats_server import NatsServerProcess

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The fake OpenAI-compatible endpoint's ``llm`` fixture; PostgreSQL databases.
pytest_plugins = ["support.fake_llm", "support.postgres"]


@pytest.fixture(scope="session")
def shared_nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServerProcess]:
    """The ``nats-server -js`` of this test worker (pytest-xdist runs one session per worker)."""
    root = tmp_path_factory.mktemp("shared-nats")
    server = NatsServerProcess.start(root / "nats-store", log_path=root / "nats.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def nats_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[NatsServerProcess]:
    """The test's nats-server: the worker's shared one, whose streams are all deleted after
    the test (a worker runs one test at a time, so each test starts on an empty server); or,
    for a test marked ``own_nats_server``, a fresh one in ``tmp_path`` that the test may
    stop, restart, pause or damage."""
    if request.node.get_closest_marker("own_nats_server"):
        own = NatsServerProcess.start(tmp_path / "nats-store", log_path=tmp_path / "nats.log")
        try:
            yield own
        finally:
            own.stop()
        return
    shared: NatsServerProcess = request.getfixturevalue("shared_nats_server")
    yield shared
    if shared.process.poll() is not None:
        # Start it again on its port and store, so that the worker's next tests still run.
        exit_code = shared.process.returncode
        shared.process = NatsServerProcess.start(
            shared.store_dir, port=shared.port, log_path=shared.log_path, keep_log=True
        ).process
        pytest.fail(
            f"the shared nats-server exited ({exit_code}) during {request.node.nodeid}: "
            "a test that stops its server must be marked own_nats_server"
        )
    asyncio.run(delete_streams(shared.url))


BACKENDS = ("sqlite", "postgresql")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "both_backends: run each test that uses the settings fixture on SQLite and on PostgreSQL",
    )
    config.addinivalue_line(
        "markers",
        "own_nats_server: the nats_server fixture is a fresh server of the test's own, not "
        "the worker's shared one (the test stops, restarts, pauses or reconfigures it, or "
        "reads its store files)",
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
    """Settings for a client of the test's server, with a unique stream name and subject
    prefix; read models in the data dir's SQLite, or in a fresh PostgreSQL database
    (``backend``); its stream partitioned when ``MEMSTREAM_TEST_PARTITIONS`` says so."""
    database_url = None
    if backend == "postgresql":
        database_url = request.getfixturevalue("postgres_url")
    return deployment_settings(
        nats_server.url,
        tmp_path / "data",
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
