"""JetStream's fsync policy: every server memstream starts writes before it acknowledges."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from support.processes import clean_env, memstream

from memstream.client import open_memstream
from memstream.domain.errors import InvalidInputError
from memstream.settings import Settings
from memstream.workers.runtime.nats_server import (
    CONFIG_FILE,
    NatsServerProcess,
    free_port,
    nats_server_binary,
    port_open,
    sync_config,
)


def _server_jetstream_config(config: Path, tmp_path: Path) -> dict[str, object]:
    """What nats-server itself makes of ``config``: a second server reads the same file with a
    monitoring port, and its ``/varz`` tells its JetStream settings."""
    port, monitor = free_port(), free_port()
    command = [nats_server_binary(), "-c", str(config), "-js", "-a", "127.0.0.1"]
    command += ["-p", str(port), "-m", str(monitor), "-sd", str(tmp_path / "probe-store")]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while not port_open(monitor):
            assert process.poll() is None, "nats-server refused the config memstream wrote"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/varz", timeout=5) as answer:
            varz = json.load(answer)
    finally:
        process.kill()
        process.wait()
    config_seen = varz["jetstream"]["config"]
    assert isinstance(config_seen, dict)
    return config_seen


def test_a_server_memstream_starts_syncs_before_it_acknowledges(tmp_path: Path) -> None:
    # Given a server started as memstream starts its embedded one (no setting given)
    server = NatsServerProcess.start(tmp_path / "nats", log_path=tmp_path / "nats.log")
    try:
        # When nats-server reads the config memstream wrote for it
        seen = _server_jetstream_config(tmp_path / CONFIG_FILE, tmp_path)
    finally:
        server.stop()
    # Then JetStream syncs every write before acknowledging it
    assert seen["sync_always"] is True


def test_a_relaxed_sync_interval_is_an_explicit_setting(tmp_path: Path) -> None:
    # Given MEMSTREAM_NATS_SYNC=10s
    settings = Settings.from_env({"MEMSTREAM_NATS_SYNC": "10s"}, data_dir=tmp_path / "data")
    server = NatsServerProcess.start(
        tmp_path / "nats", log_path=tmp_path / "nats.log", sync=settings.nats_sync
    )
    try:
        seen = _server_jetstream_config(tmp_path / CONFIG_FILE, tmp_path)
    finally:
        server.stop()
    # Then the server syncs every 10 s and acknowledges before that
    assert not seen.get("sync_always", False)  # omitted from /varz when false
    assert seen["sync_interval"] == 10 * 10**9


@pytest.mark.parametrize("value", ["soon", "0s", "-1s", "always;", "10 s", " "])
def test_a_sync_setting_that_is_not_always_or_a_duration_is_refused(value: str) -> None:
    with pytest.raises(InvalidInputError, match=r"MEMSTREAM_NATS_SYNC\) is .*'always' or"):
        Settings.from_env({"MEMSTREAM_NATS_SYNC": value})


async def test_the_embedded_server_of_a_data_dir_syncs_always(tmp_path: Path) -> None:
    # Given the embedded default
    settings = Settings(data_dir=tmp_path / "data")
    ms = await open_memstream(settings, workers=False)
    try:
        assert ms.core.runtime is not None
        assert ms.core.runtime.owner
        # Then the config of its server syncs before acknowledging
        seen = _server_jetstream_config(settings.data_dir / CONFIG_FILE, tmp_path)
        assert seen["sync_always"] is True
    finally:
        await ms.close()


@pytest.mark.parametrize(("sync", "durable"), [("always", True), ("30s", False)])
def test_status_reads_an_external_servers_policy_and_fails_on_a_lazy_one(
    tmp_path: Path, sync: str, durable: bool
) -> None:
    # Given an external server with a monitoring endpoint, syncing as ``sync`` says
    config = tmp_path / "nats.conf"
    config.write_text(sync_config(sync))
    port, monitor = free_port(), free_port()
    command = [nats_server_binary(), "-c", str(config), "-js", "-a", "127.0.0.1"]
    command += ["-p", str(port), "-m", str(monitor), "-sd", str(tmp_path / "store")]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while not (port_open(port) and port_open(monitor)):
            assert process.poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.05)
        env = clean_env(
            MEMSTREAM_NATS_URL=f"nats://127.0.0.1:{port}",
            MEMSTREAM_NATS_MONITOR_URL=f"http://127.0.0.1:{monitor}",
            MEMSTREAM_DATA_DIR=str(tmp_path / "data"),
        )
        # When status looks at it
        done = memstream(env, "status", "--json", expect=0 if durable else 1)
    finally:
        process.kill()
        process.wait()
    # Then it shows the server's policy, read from the server itself
    report = json.loads(done.stdout)
    [server] = report["durability"]
    assert server["policy"] == ("always" if durable else "30s")
    assert server["source"] == f"http://127.0.0.1:{monitor}/varz"
    # and a lazy one is a problem it names
    assert bool(report["problems"]) is not durable
    if not durable:
        assert "sync_interval 30s" in done.stderr


def test_a_monitoring_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="MEMSTREAM_NATS_MONITOR_URL"):
        Settings.from_env({"MEMSTREAM_NATS_MONITOR_URL": "file:///etc/passwd"})
