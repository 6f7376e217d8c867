"""Server versions (issue 10, item 9): a nats-server older than a feature memstream needs is
refused at connect with one line naming the features, the versions they need and the version
found, before anything is written. Always against a fake server that reports an old version;
also against the nats-server 2.9 that runs on 127.0.0.1:4222 on these machines, when it is there.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import nats.js.errors
import pytest
from support.fake_nats import fake_nats_server, reachable
from typer.testing import CliRunner

from memstream.cli.app import app
from memstream.client import open_memstream
from memstream.domain.errors import IncompatibleServerError, UnavailableError
from memstream.settings import Settings
from memstream.workers.log.event_log import EventLog, connect_nats
from memstream.workers.log.server_version import REQUIRED, missing_features

OLD = "2.9.10"
TOO_OLD_2_9 = (
    "is too old for memstream: batch direct get (next_by_subj + batch) needs 2.11.0, "
    "atomic batch publish (allow_atomic) needs 2.12.0; upgrade nats-server to 2.12.0 or later"
)
WRITES = {"PUB", "HPUB"}

# An eventsourcing application on memstream's persistence module, as a user would write it.
ES_APP = """
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event


class Dog(Aggregate):
    @event("Registered")
    def __init__(self, name: str) -> None:
        self.name = name


class School(Application):
    def register(self, name: str) -> object:
        dog = Dog(name)
        self.save(dog)
        return dog.id


print(School().register("Fido"))
"""


def run_es_app(
    url: str, stream: str, tmp_path: Path
) -> tuple[subprocess.CompletedProcess[str], float]:
    script = tmp_path / "es_app.py"
    script.write_text(ES_APP)
    env = {
        **os.environ,
        "PERSISTENCE_MODULE": "memstream.workers.log.es_persistence",
        "MEMSTREAM_NATS_URL": url,
        "MEMSTREAM_ES_STREAM": stream,
        "MEMSTREAM_ES_CALL_TIMEOUT": "60",
    }
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    return done, time.monotonic() - started


def assert_one_line_refusal(
    done: subprocess.CompletedProcess[str], elapsed: float, url: str, version: str
) -> None:
    # One traceback (no chain of three), ending in the one line; no write, no timeout waited out
    assert done.returncode == 1, done.stdout
    assert done.stderr.count("Traceback (most recent call last)") == 1, done.stderr
    assert "During handling" not in done.stderr
    assert "direct cause" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        f"memstream.domain.errors.IncompatibleServerError: nats-server {version} at {url} "
        + TOO_OLD_2_9
    )
    assert done.stdout == ""
    assert elapsed < 30, f"took {elapsed:.1f} s: waited for a timeout"


# -- a fake server reporting an old version ------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "needs"),
    [
        (OLD, TOO_OLD_2_9),
        (
            "2.11.4",
            "is too old for memstream: atomic batch publish (allow_atomic) needs 2.12.0; "
            "upgrade nats-server to 2.12.0 or later",
        ),
        (
            "2.1.9",
            "is too old for memstream: JetStream needs 2.2.0, Nats-Expected-Last-Subject-Sequence "
            "needs 2.3.1, stream direct get (allow_direct) needs 2.9.0, batch direct get "
            "(next_by_subj + batch) needs 2.11.0, atomic batch publish (allow_atomic) needs "
            "2.12.0; upgrade nats-server to 2.12.0 or later",
        ),
    ],
)
async def test_connect_refuses_an_old_server_in_one_line(version: str, needs: str) -> None:
    with fake_nats_server(version) as (url, received):
        # When a client connects to a server that reports an old version
        with pytest.raises(IncompatibleServerError) as caught:
            await connect_nats(url)
        # Then one line names the version found, each missing feature and what it needs
        assert str(caught.value) == f"nats-server {version} at {url} {needs}"
        assert "\n" not in str(caught.value)
        assert isinstance(caught.value, UnavailableError)
        # And nothing was written
        assert not WRITES & set(received), received


@pytest.mark.parametrize("version", ["2.12.0", "2.12.0-RC.1", "2.14.5", "3.0.0", "not-semver"])
async def test_connect_accepts_a_recent_or_unknown_version(version: str) -> None:
    with fake_nats_server(version) as (url, _):
        client = await connect_nats(url)
        await client.close()


def test_the_minimums_are_checked_feature_by_feature() -> None:
    assert [f.name for f in missing_features((2, 10, 22))] == [
        "batch direct get (next_by_subj + batch)",
        "atomic batch publish (allow_atomic)",
    ]
    assert missing_features((2, 12, 0)) == []
    assert [f.minimum for f in REQUIRED] == sorted(f.minimum for f in REQUIRED)


async def test_the_session_api_refuses_an_old_server_before_writing(tmp_path: Path) -> None:
    with fake_nats_server(OLD) as (url, received):
        settings = Settings(data_dir=tmp_path / "data", nats_url=url, stream="TOLD")
        with pytest.raises(IncompatibleServerError, match=f"^nats-server {OLD} at {url} "):
            await open_memstream(settings, workers=True)
        assert not WRITES & set(received), received


async def test_ensure_stream_refuses_an_old_server_for_any_client() -> None:
    # Given a client connected by other means (a FastStream broker's, say)
    with fake_nats_server(OLD) as (url, received):
        client = await nats.connect(url, allow_reconnect=False)
        try:
            # When memstream's stream is ensured on it, Then the server is refused first
            with pytest.raises(IncompatibleServerError) as caught:
                await EventLog(client, "TOLD").ensure_stream()
            assert str(caught.value) == f"nats-server {OLD} at {url} {TOO_OLD_2_9}"
        finally:
            await client.close()
        assert not WRITES & set(received), received


def test_the_cli_says_it_in_one_line(tmp_path: Path) -> None:
    with fake_nats_server(OLD) as (url, _):
        result = CliRunner().invoke(
            app, ["--data-dir", str(tmp_path / "data"), "--nats-url", url, "status"]
        )
    assert result.exit_code == 1
    assert result.output == f"error: nats-server {OLD} at {url} {TOO_OLD_2_9}\n"


def test_an_eventsourcing_application_refuses_an_old_server_in_one_line(tmp_path: Path) -> None:
    with fake_nats_server(OLD) as (url, received):
        done, elapsed = run_es_app(url, "TOLD", tmp_path)
        assert_one_line_refusal(done, elapsed, url, OLD)
        assert not WRITES & set(received), received


# -- the nats-server of these machines (2.9) on 127.0.0.1:4222 ------------------------------------

LOCAL = "nats://127.0.0.1:4222"


def _local_version() -> str | None:
    if not reachable("127.0.0.1", 4222):
        return None
    with socket.create_connection(("127.0.0.1", 4222), timeout=2) as sock:
        line = sock.makefile("rb").readline()
    if not line.startswith(b"INFO "):
        return None
    return str(json.loads(line[5:])["version"])


@pytest.fixture
def local_old_server() -> str:
    """The version of the nats-server on 127.0.0.1:4222; skips unless it is there and 2.9.x."""
    version = _local_version()
    reason = None
    if version is None:
        reason = "no nats-server on 127.0.0.1:4222 (the distribution's 2.9 is not running)"
    elif not version.startswith("2.9."):
        reason = f"the nats-server on 127.0.0.1:4222 is {version}, not a 2.9"
    if reason is not None:
        if os.environ.get("MEMSTREAM_REQUIRE_OLD_NATS") == "1":
            pytest.fail(f"MEMSTREAM_REQUIRE_OLD_NATS=1 but {reason}")
        pytest.skip(reason)
    assert version is not None
    return version


@pytest.fixture
async def unique_stream() -> AsyncIterator[str]:
    """A stream name used once on the shared server; deleted afterwards if anything made it."""
    name = "MSTEST_" + uuid.uuid4().hex[:12].upper()
    yield name
    client = await nats.connect(LOCAL, allow_reconnect=False)
    try:
        js = client.jetstream()
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_stream(name)
    finally:
        await client.close()


async def _stream_exists(name: str) -> bool:
    client = await nats.connect(LOCAL, allow_reconnect=False)
    try:
        await client.jetstream().stream_info(name)
        return True
    except nats.js.errors.NotFoundError:
        return False
    finally:
        await client.close()


async def test_the_session_api_refuses_the_local_2_9_server(
    local_old_server: str, unique_stream: str, tmp_path: Path
) -> None:
    settings = Settings(data_dir=tmp_path / "data", nats_url=LOCAL, stream=unique_stream)
    with pytest.raises(IncompatibleServerError) as caught:
        await open_memstream(settings, workers=True)
    assert str(caught.value) == f"nats-server {local_old_server} at {LOCAL} {TOO_OLD_2_9}"
    assert not await _stream_exists(unique_stream)


async def test_an_eventsourcing_application_refuses_the_local_2_9_server(
    local_old_server: str, unique_stream: str, tmp_path: Path
) -> None:
    done, elapsed = run_es_app(LOCAL, unique_stream, tmp_path)
    assert_one_line_refusal(done, elapsed, LOCAL, local_old_server)
    assert not await _stream_exists(unique_stream)
