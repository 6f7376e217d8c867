"""Operators' view (issue 15, items 6 and 7): Prometheus metrics scraped over HTTP from a
worker process during a write loop (its lag going to 0), JSON logs that parse line by line,
command latency and conflicts, and ``--version``."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from support.deployment import deployment_env, deployment_settings
from support.processes import MEMSTREAM, clean_env, memstream, stop, wait_for_text

from memstream.client import open_memstream
from memstream.settings import Settings
from memstream.workers.runtime.nats_server import NatsServerProcess


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _scrape(port: int) -> dict[str, float]:
    """``name{labels}`` → value of every sample on /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            samples[key] = float(value)
    return samples


def _start(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[str]:
    with log.open("w") as out:
        return subprocess.Popen(
            [MEMSTREAM, *args], env=env, stdout=out, stderr=subprocess.STDOUT, text=True
        )


def test_version() -> None:
    printed = memstream(clean_env(), "--version").stdout
    assert re.fullmatch(r"memstream \d+\.\d+\.\d+\S*\n", printed)


async def test_a_worker_serves_metrics_and_its_lag_goes_to_zero(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    settings = deployment_settings(nats_server.url, tmp_path / "writer")
    env = deployment_env(
        settings, MEMSTREAM_DATA_DIR=str(tmp_path / "data"), MEMSTREAM_LOG_FORMAT="json"
    )
    port = _free_port()
    log = tmp_path / "projector.log"
    worker = _start(env, log, "worker", "projector", "--metrics-port", str(port))
    try:
        wait_for_text(log, "FastStream app started", worker)
        ms = await open_memstream(settings, workers=False)
        lags: list[float] = []
        try:
            for n in range(300):
                await ms.session(f"s{n % 7}").append_message(
                    {"id": f"m{n}", "role": "user", "content": f"message {n}"}
                )
                if n % 60 == 0:
                    sample = await asyncio.to_thread(_scrape, port)
                    lags.append(
                        sample.get('memstream_projection_lag_events{projection="sessions"}', -1)
                    )
        finally:
            await ms.close()
        deadline = time.monotonic() + 20
        sample = await asyncio.to_thread(_scrape, port)
        while time.monotonic() < deadline and (
            sample['memstream_projection_lag_events{projection="sessions"}'] != 0
            or sample['memstream_projection_position{projection="sessions"}'] < 300
        ):
            await asyncio.sleep(0.2)
            sample = await asyncio.to_thread(_scrape, port)
    finally:
        assert stop(worker) == 0, log.read_text()[-3000:]
    assert all(lag >= 0 for lag in lags), lags
    assert sample['memstream_projection_lag_events{projection="sessions"}'] == 0
    assert sample['memstream_projection_position{projection="sessions"}'] >= 300
    applied = [v for k, v in sample.items() if k.startswith("memstream_events_applied_total{")]
    assert applied == [300.0]
    batches = [v for k, v in sample.items() if k.startswith("memstream_batch_seconds_count{")]
    assert batches
    assert batches[0] >= 1
    assert any(k.startswith("memstream_dead_letters_total{") for k in sample)
    # JSON logs: every line one object with the fields, no terminal colour codes
    lines = log.read_text().splitlines()
    assert lines
    for line in lines:
        entry = json.loads(line)
        assert {"time", "level", "logger", "message"} <= set(entry)
        assert "\x1b[" not in line
    assert any("metrics on http://127.0.0.1:" in json.loads(x)["message"] for x in lines)


def test_bad_metrics_and_log_options_are_refused(tmp_path: Path) -> None:
    env = clean_env(MEMSTREAM_DATA_DIR=str(tmp_path / "data"))
    bad = memstream(env, "--log-format", "xml", "status", expect=1)
    assert "--log-format is 'xml'; it must be one of text, json" in bad.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = memstream(env, "up", "--metrics-port", str(port), expect=1)
    assert f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}" in busy.stderr


async def test_commands_record_latency_and_conflicts(settings: Settings) -> None:
    from prometheus_client import generate_latest

    from memstream.workers.observability.telemetry import telemetry

    metrics = telemetry()
    clients = [await open_memstream(settings, workers=i == 0) for i in range(3)]
    try:
        await asyncio.gather(
            *(
                client.session("race").append_message(
                    {"id": f"c{i}-{n}", "role": "user", "content": "x"}
                )
                for n in range(20)
                for i, client in enumerate(clients)
            )
        )
        profile = await clients[0].agent_memory().get_profile("p")
        await profile.remember("Likes trams")
    finally:
        for client in clients:
            await client.close()
    text = generate_latest(metrics.registry).decode()
    sessions = re.search(r'^memstream_command_seconds_count\{kind="session"\} (\S+)$', text, re.M)
    assert sessions is not None
    assert float(sessions.group(1)) >= 60
    assert re.search(r'memstream_command_seconds_count\{kind="profile"\} [1-9]', text)
    conflicts = re.search(r"^memstream_command_conflicts_total (\S+)$", text, re.MULTILINE)
    assert conflicts is not None
    assert float(conflicts.group(1)) >= 1  # three writers raced on one session
