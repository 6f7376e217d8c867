"""Fixtures of the CLI's end-to-end tests."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from support.processes import clean_env

from memstream.workers.runtime.nats_server import NatsServerProcess


@pytest.fixture
def cli_env(tmp_path: Path, nats_server: NatsServerProcess) -> dict[str, str]:
    """The CLI pointed at the test's nats-server, its own data dir and a unique stream."""
    return clean_env(
        MEMSTREAM_NATS_URL=nats_server.url,
        MEMSTREAM_DATA_DIR=str(tmp_path / "data"),
        MEMSTREAM_STREAM="T" + uuid.uuid4().hex[:12].upper(),
    )
