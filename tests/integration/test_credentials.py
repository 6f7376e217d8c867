"""Credentials (issue 10, item 6): a creds file connects out of the box (nkeys is a dependency),
and no password or token reaches an error, its chained causes, the CLI's line or the log."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import traceback
import uuid
from pathlib import Path

import pytest
from support.nats_auth import server_with_creds, server_with_password
from support.processes import wait_for_text
from typer.testing import CliRunner

from memstream.cli.app import app
from memstream.client import open_memstream
from memstream.domain.errors import UnavailableError
from memstream.settings import Settings
from memstream.workers.log.es_persistence import NatsFactory
from memstream.workers.log.event_log import connect_nats
from memstream.workers.runtime.nats_server import free_port

# Built at run time, so that the source lines a traceback quotes never hold it.
SECRET = "s3" + "cret"


def printed(error: BaseException) -> str:
    """Everything a user may see of an error: its text, its repr and its printed chain."""
    return f"{error}\n{error!r}\n{''.join(traceback.format_exception(error))}"


async def test_a_creds_file_connects_a_session(tmp_path: Path) -> None:
    # Given a server in operator mode (JWT auth) and a user's creds file
    with server_with_creds(tmp_path / "auth") as server:
        settings = Settings(
            data_dir=tmp_path / "data",
            nats_url=server.url,
            nats_creds=str(server.creds),
            stream="T" + uuid.uuid4().hex[:12].upper(),
        )
        # When memstream connects with MEMSTREAM_NATS_CREDS and writes and reads a session
        ms = await open_memstream(settings, workers=True)
        try:
            session = ms.session("creds")
            await session.append_message({"role": "user", "content": "signed in"})
            # Then it works end to end
            history = await session.get_history()
            assert [m["parts"][0]["text"] for m in history] == ["signed in"]
        finally:
            await ms.close()
        # And without the creds the server refuses the connection
        with pytest.raises(UnavailableError, match="Authorization Violation"):
            await connect_nats(server.url)


async def test_an_unreachable_url_never_shows_its_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a URL with a password, to a port where nothing listens
    port = free_port()
    caplog.set_level(logging.DEBUG)
    # When the connection fails
    with pytest.raises(UnavailableError) as caught:
        await connect_nats(f"nats://alice:{SECRET}@127.0.0.1:{port}")
    # Then the error names the URL with the password masked, and nothing shows the password:
    # not its text, its repr, its chained cause, nor any log line
    text = printed(caught.value)
    assert f"cannot reach NATS at nats://alice:***@127.0.0.1:{port}" in str(caught.value)
    assert SECRET not in text
    assert caplog.records, "the failing connect logs what nats-py reported"
    assert SECRET not in caplog.text
    assert all(SECRET not in printed_record(r) for r in caplog.records)


def printed_record(record: logging.LogRecord) -> str:
    exc = "".join(traceback.format_exception(record.exc_info[1])) if record.exc_info else ""
    return f"{record.getMessage()} {exc}"


async def test_a_token_url_is_masked_whole() -> None:
    port = free_port()
    with pytest.raises(UnavailableError) as caught:
        await connect_nats(f"nats://{SECRET}@127.0.0.1:{port}")
    assert f"nats://***@127.0.0.1:{port}" in str(caught.value)
    assert SECRET not in printed(caught.value)


async def test_a_refused_password_is_never_shown(tmp_path: Path) -> None:
    # Given a server that admits alice with another password
    with server_with_password(tmp_path / "auth", "alice", "right-one") as url:
        host = url.removeprefix("nats://")
        # When alice connects with the wrong password, in the URL or as the password setting
        for attempt in (
            lambda: connect_nats(f"nats://alice:{SECRET}@{host}"),
            lambda: connect_nats(url, user="alice", password=SECRET),
        ):
            with pytest.raises(UnavailableError, match="Authorization Violation") as caught:
                await attempt()
            # Then the error says so without the password
            assert SECRET not in printed(caught.value)
        # And the right one gets in
        client = await connect_nats(f"nats://alice:right-one@{host}")
        await client.close()


def test_the_cli_error_line_never_shows_the_password(tmp_path: Path) -> None:
    # Given MEMSTREAM_NATS_URL with a password, to a port where nothing listens
    port = free_port()
    env = {
        "MEMSTREAM_NATS_URL": f"nats://alice:{SECRET}@127.0.0.1:{port}",
        "MEMSTREAM_DATA_DIR": str(tmp_path / "data"),
    }
    # When a command needs NATS
    result = CliRunner().invoke(app, ["status"], env=env)
    # Then it fails with one line that masks the password
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: cannot reach NATS at nats://alice:***@127.0.0.1:{port}")
    assert SECRET not in result.output


def test_the_eventsourcing_adapter_never_shows_the_password() -> None:
    # Given an eventsourcing environment whose NATS URL holds a password and is unreachable
    port = free_port()
    env = {"MEMSTREAM_NATS_URL": f"nats://alice:{SECRET}@127.0.0.1:{port}"}
    # When the factory connects, Then its error and its chain mask the password
    with pytest.raises(Exception, match=r"nats://alice:\*\*\*@") as caught:
        NatsFactory(env=env)
    assert SECRET not in printed(caught.value)


async def _append_and_read(settings: Settings) -> list[dict[str, object]]:
    ms = await open_memstream(settings, workers=False)
    try:
        session = ms.session("s")
        await session.append_message({"id": "m1", "role": "user", "content": "hello"})
        return await session.get_history()
    finally:
        await ms.close()


def test_the_worker_and_the_cli_run_on_a_creds_file(tmp_path: Path) -> None:
    # Given a server in operator mode and the CLI configured with only a URL and a creds file
    memstream = str(Path(sys.executable).parent / "memstream")
    with server_with_creds(tmp_path / "auth") as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_")}
        env.update(
            MEMSTREAM_NATS_URL=server.url,
            MEMSTREAM_NATS_CREDS=str(server.creds),
            MEMSTREAM_DATA_DIR=str(tmp_path / "data"),
            MEMSTREAM_STREAM="T" + uuid.uuid4().hex[:12].upper(),
        )
        log = tmp_path / "worker.log"
        with log.open("w") as sink:
            worker = subprocess.Popen(
                [memstream, "worker", "projector", "--linger", "0"],
                env=env,
                stdout=sink,
                stderr=sink,
                text=True,
            )
        try:
            # When the projector worker (a FastStream app) starts, and another process (this one,
            # without workers) appends a message
            wait_for_text(log, "FastStream app started", worker, timeout=60)
            settings = Settings.from_env(env)
            history = asyncio.run(_append_and_read(settings))
            # Then this process reads it back as projected by the worker (its own write: the
            # read waits for the worker to reach it), and a CLI command connects too
            assert [m["id"] for m in history] == ["m1"]
            status = subprocess.run(
                [memstream, "status", "--json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert status.returncode == 0, status.stderr
        finally:
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(30) == 0, log.read_text()
        assert "nkeys" not in log.read_text()
