"""The embedded runtime's data dir is private and its server takes only the data dir's token."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import nats.errors
import pytest
from nats.aio.client import Client as NATS
from typer.testing import CliRunner

import memstream
from memstream import InvalidInputError
from memstream.cli.app import app
from memstream.client import Memstream, open_memstream
from memstream.settings import Settings


def _command_line(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
async def embedded(tmp_path: Path) -> AsyncIterator[Memstream]:
    """A client of a fresh data dir's embedded server (this process owns it)."""
    ms = await open_memstream(Settings(data_dir=tmp_path / "data"))
    try:
        yield ms
    finally:
        await ms.close()


async def test_the_data_dir_is_0700_and_every_file_in_it_0600(
    tmp_path: Path, embedded: Memstream
) -> None:
    # Given a data dir created by a first connect, with a message written and read
    await embedded.session("s").append_message({"id": "m", "role": "user", "content": "hi"})
    assert [m["id"] for m in await embedded.session("s").get_history()] == ["m"]
    data_dir = tmp_path / "data"
    # Then the dir and the server's store are 0700, and every file is 0600: SQLite's -wal and
    # -shm included, which it creates with the database file's mode
    assert mode(data_dir) == 0o700
    assert mode(data_dir / "nats") == 0o700
    files = {p.name: mode(p) for p in data_dir.iterdir() if p.is_file()}
    expected = {
        "runtime.json",
        "owner.lock",
        "clients.lock",
        "nats.token",
        "nats-server.conf",
        "nats-server.log",
        "memstream.db",
        "memstream.db-wal",
        "memstream.db-shm",
    }
    assert set(files) >= expected
    assert files == dict.fromkeys(files, 0o600)


async def test_a_looser_data_dir_is_tightened_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a data dir and read-model database that other users can read (as before)
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o755)
    os.chmod(data_dir, 0o755)
    sqlite3.connect(data_dir / "memstream.db").close()
    os.chmod(data_dir / "memstream.db", 0o644)
    # When a client connects
    with caplog.at_level(logging.WARNING, logger="memstream.workers.runtime.data_dir"):
        async with memstream.connect(data_dir=data_dir) as ms:
            await ms.session("s").append_message({"id": "m", "role": "user", "content": "hi"})
    # Then both are tightened, and the log says so
    assert mode(data_dir) == 0o700
    assert mode(data_dir / "memstream.db") == 0o600
    assert f"tightened {data_dir} from 0755 to 0700" in caplog.text
    assert f"tightened {data_dir / 'memstream.db'} from 0644 to 0600" in caplog.text


async def test_the_embedded_server_refuses_a_client_without_the_token(
    tmp_path: Path, embedded: Memstream
) -> None:
    runtime = embedded.core.runtime
    assert runtime is not None
    data_dir = tmp_path / "data"
    token = (data_dir / "nats.token").read_text().strip()
    assert token == runtime.token
    assert len(token) >= 40  # 32 random bytes
    # When a plain nats-py client connects without the token, Then it is refused
    anonymous = NATS()
    try:
        with pytest.raises(nats.errors.Error, match="Authorization Violation") as refused:
            await anonymous.connect(runtime.url, allow_reconnect=False, connect_timeout=2)
    finally:
        await anonymous.close()  # nats-py leaves the refused socket open otherwise
    assert token not in str(refused.value)
    # When it presents the token, Then it is in and sees the stream
    client = await nats.connect(runtime.url, token=token, allow_reconnect=False, connect_timeout=2)
    try:
        info = await client.jetstream().stream_info(embedded.settings.stream)
        assert info.config.name == embedded.settings.stream
    finally:
        await client.close()
    # And the token is in no log, no runtime record and no command line of the server
    assert token not in (data_dir / "nats-server.log").read_text()
    assert token not in (data_dir / "runtime.json").read_text()
    assert token.encode() not in _command_line(runtime.server_pid)


async def test_a_guest_uses_the_token_of_the_data_dir(tmp_path: Path, embedded: Memstream) -> None:
    # Given a second client on the data dir (a guest of this process's server)
    async with memstream.connect(data_dir=tmp_path / "data") as guest:
        assert guest.core.runtime is not None
        assert not guest.core.runtime.owner
        # When it writes and reads, Then the server let it in
        await guest.session("g").append_message({"id": "m", "role": "user", "content": "hi"})
        assert [m["id"] for m in await guest.session("g").get_history()] == ["m"]


def _blocker(tmp_path: Path) -> Path:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    return blocker


@pytest.mark.parametrize("nats_url", [None, "nats://127.0.0.1:1"])
async def test_an_uncreatable_data_dir_is_one_error_naming_it(
    tmp_path: Path, nats_url: str | None
) -> None:
    # Given a data dir under a file, and a data dir that is a file
    under_a_file = _blocker(tmp_path) / "data"
    # When a client connects, Then one error names the path and the reason
    with pytest.raises(InvalidInputError) as raised:
        async with memstream.connect(data_dir=under_a_file, nats_url=nats_url):
            pass
    assert str(raised.value) == (
        f"cannot use data dir {under_a_file}: Not a directory: {under_a_file}"
    )
    with pytest.raises(InvalidInputError) as raised:
        async with memstream.connect(data_dir=tmp_path / "a-file", nats_url=nats_url):
            pass
    assert str(raised.value) == f"cannot use data dir {tmp_path / 'a-file'}: it is not a directory"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only dir")
async def test_a_data_dir_in_a_read_only_dir_is_one_error(tmp_path: Path) -> None:
    read_only = tmp_path / "ro"
    read_only.mkdir(mode=0o500)
    with pytest.raises(InvalidInputError, match="Permission denied") as raised:
        async with memstream.connect(data_dir=read_only / "data"):
            pass
    assert str(read_only / "data") in str(raised.value)


def test_the_cli_says_an_uncreatable_data_dir_in_one_line(tmp_path: Path) -> None:
    under_a_file = _blocker(tmp_path) / "data"
    env = {"MEMSTREAM_NATS_URL": None, "MEMSTREAM_DATA_DIR": None}
    for command in (["sessions", "list"], ["status"], ["worker", "projector"], ["up"]):
        result = CliRunner().invoke(app, ["--data-dir", str(under_a_file), *command], env=env)
        assert result.exit_code == 1, (command, result.output)
        assert result.output == (
            f"error: cannot use data dir {under_a_file}: Not a directory: {under_a_file}\n"
        ), command
        assert "Traceback" not in result.output
