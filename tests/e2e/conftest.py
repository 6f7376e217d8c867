"""Fixtures of the CLI's end-to-end tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.deployment import deployment_env, deployment_settings

from memstream.workers.runtime.nats_server import NatsServerProcess


@pytest.fixture
def cli_env(tmp_path: Path, nats_server: NatsServerProcess) -> dict[str, str]:
    """The CLI pointed at the test's nats-server, its own data dir and a unique stream and
    subject prefix."""
    return deployment_env(deployment_settings(nats_server.url, tmp_path / "data"))
