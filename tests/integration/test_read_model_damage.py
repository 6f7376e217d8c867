"""A damaged read model is moved aside and rebuilt from the log, across processes, with no
traceback: CLI commands on the embedded platform, a guest while ``memstream up`` runs, and the
in-process client with a reader in another process."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.damage import PAGE, overwrite_middle
from support.processes import MEMSTREAM, clean_env, memstream, wait_for_text

from memstream import ReadModelDamagedError, Session
from memstream.client import Memstream, open_memstream
from memstream.projections.sqlite.damage import file_identity
from memstream.settings import Settings
from memstream.workers.projector import projector_consumer

SESSIONS = ("s0", "s1", "s2")
PER_SESSION = 120

# Writes PER_SESSION ~500-byte messages to each session through the API (the embedded platform,
# this process owning it), reads them back, and exits (closing checkpoints the database file).
WRITER = """
import asyncio, sys
import memstream

async def main(data_dir, sessions, per_session):
    async with memstream.connect(data_dir=data_dir) as ms:
        for session_id in sessions:
            session = ms.session(session_id)
            for start in range(0, per_session, 40):
                await session.append_messages([
                    {"id": f"m{n}", "role": "user",
                     "parts": [{"type": "text", "text": f"message {n} of {session_id} " * 40}]}
                    for n in range(start, start + 40)
                ])
            assert len(await session.get_history()) == per_session
    print("written", flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])))
"""


def session_counts(env: dict[str, str]) -> dict[str, int]:
    listed = json.loads(memstream(env, "sessions", "list", "--json").stdout)
    return {s["session_id"]: s["messages"] for s in listed}


def corrupt_files(database: Path) -> list[Path]:
    """The moved-aside database files (not their -wal/-shm)."""
    found = database.parent.glob(f"{database.name}.corrupt-*")
    return sorted(p for p in found if not p.name.endswith(("-wal", "-shm")))


def write_sessions(data_dir: Path, env: dict[str, str]) -> None:
    result = subprocess.run(
        [sys.executable, "-c", WRITER, str(data_dir), ",".join(SESSIONS), str(PER_SESSION)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "written"


def test_cli_commands_recover_a_corrupt_read_model_from_the_log(tmp_path: Path) -> None:
    # Given sessions written through the API on the embedded platform, which then stopped
    data_dir = tmp_path / "data"
    env = clean_env(MEMSTREAM_DATA_DIR=str(data_dir))
    write_sessions(data_dir, env)
    database = data_dir / "memstream.db"
    assert not (data_dir / "runtime.json").exists()

    # When garbage overwrites pages in the middle of memstream.db
    overwrite_middle(database)

    # Then `sessions list` in a new process (the owner, running the projector) moves the file
    # aside with a warning naming both, rebuilds it from the log and lists everything
    listed = memstream(env, "sessions", "list", "--json")
    assert {s["session_id"]: s["messages"] for s in json.loads(listed.stdout)} == dict.fromkeys(
        SESSIONS, PER_SESSION
    )
    [first] = corrupt_files(database)
    assert str(database) in listed.stderr
    assert str(first) in listed.stderr
    assert stat.S_IMODE(first.stat().st_mode) == 0o600

    # When the rebuilt file is damaged the same way, `projections rebuild` moves it aside too
    overwrite_middle(database)
    rebuilt = memstream(env, "projections", "rebuild")
    assert "rebuilt all projections" in rebuilt.stdout
    second = next(p for p in corrupt_files(database) if p != first)
    assert str(second) in rebuilt.stderr
    assert stat.S_IMODE(second.stat().st_mode) == 0o600

    # And every message is back, read by new processes
    assert session_counts(env) == dict.fromkeys(SESSIONS, PER_SESSION)
    history = json.loads(memstream(env, "sessions", "history", "s1", "--json").stdout)
    assert [m["id"] for m in history] == [f"m{n}" for n in range(PER_SESSION)]
    check = sqlite3.connect(database)
    assert check.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    check.close()


def test_a_guest_gets_one_line_and_a_rebuild_serves_the_running_projector(tmp_path: Path) -> None:
    # Given sessions written through the API, then `memstream up` (the owner and projector)
    data_dir = tmp_path / "data"
    env = clean_env(MEMSTREAM_DATA_DIR=str(data_dir))
    write_sessions(data_dir, env)
    database = data_dir / "memstream.db"
    log = tmp_path / "up.log"
    with log.open("w") as sink:
        up = subprocess.Popen([MEMSTREAM, "up"], env=env, stdout=sink, stderr=sink, text=True)
    try:
        wait_for_text(log, "memstream is up", up)

        # When the file is damaged under it
        overwrite_middle(database)

        # Then a guest that reads the damaged pages gets one line saying what to do
        refused = memstream(env, "sessions", "list", expect=1)
        assert refused.stderr.startswith("error: read model ")
        assert refused.stderr.count("\n") == 1
        assert "memstream projections rebuild" in refused.stderr

        # When `projections rebuild` runs as another guest: moved aside and rebuilt
        memstream(env, "projections", "rebuild")
        assert len(corrupt_files(database)) == 1
        assert session_counts(env) == dict.fromkeys(SESSIONS, PER_SESSION)

        # Then the running projector projects new writes into the new file
        memstream(env, "append", "s0", "--id", "after", "--text", "after the rebuild")
        assert session_counts(env)["s0"] == PER_SESSION + 1
        assert "was replaced" in log.read_text()
    finally:
        up.send_signal(signal.SIGTERM)
        code = up.wait(timeout=30)
    assert code == 0, log.read_text()
    assert "Traceback" not in log.read_text()


READER = """
import asyncio, sys
from pathlib import Path
import memstream

async def main(nats_url, stream, data_dir):
    settings = memstream.Settings(data_dir=data_dir, nats_url=nats_url, stream=stream)
    async with memstream.connect(settings=settings, workers=False) as ms:
        for _ in range(2):  # before and after the test replaces the file
            count = len(await ms.session("a").get_history())
            print(count, *ms.core.reads.read_models.identity, flush=True)
            sys.stdin.readline()

asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
"""


async def read_line(reader: asyncio.subprocess.Process) -> tuple[int, tuple[int, int] | None]:
    """A message count and the file identity the reader in another process read them from."""
    assert reader.stdout is not None
    count, device, inode = (await asyncio.wait_for(reader.stdout.readline(), 30)).split()
    return int(count), (int(device), int(inode))


@pytest.mark.sqlite_only
async def test_the_client_recovers_and_a_reader_elsewhere_follows(
    ms: Memstream, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a client running the projector, with 300 messages in session "a" and one in "b"
    session = ms.session("a")
    for start in range(0, 300, 50):
        await session.append_messages(
            [
                {"id": f"m{n}", "role": "user", "parts": [{"type": "text", "text": f"{n} " * 200}]}
                for n in range(start, start + 50)
            ]
        )
    await ms.session("b").append_message({"id": "b1", "role": "user", "content": "hello"})
    await ms.wait_for("sessions")
    database = settings.database_path

    # And a reader in another process that has read session "a"
    reader = await asyncio.create_subprocess_exec(
        *(sys.executable, "-c", READER, str(settings.nats_url), settings.stream),
        str(settings.data_dir),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert reader.stdin is not None
        damaged = file_identity(database)
        assert await read_line(reader) == (300, damaged)

        # When everything is in the database file, and garbage overwrites pages in its middle
        check = sqlite3.connect(database)
        assert check.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
        check.close()
        overwrite_middle(database)

        # Then a read either succeeds or says in one line that the file is being rebuilt; the
        # projector moves it aside and rebuilds it, and the next reads have everything
        caplog.set_level(logging.WARNING)
        history: list[Any] | None = None
        errors: list[str] = []
        deadline = time.monotonic() + 30
        while history is None or len(history) != 300:
            assert time.monotonic() < deadline, errors
            try:
                history = await ms.session("a").get_history()
            except ReadModelDamagedError as error:
                errors.append(str(error))
                await asyncio.sleep(0.05)  # until the projector has replaced the file
        assert [m["id"] for m in history] == [f"m{n}" for n in range(300)]
        assert errors, "the damaged pages were read"
        assert all("\n" not in e and "rebuilds it from the log" in e for e in errors)
        assert file_identity(database) != damaged
        [moved] = corrupt_files(database)
        assert file_identity(moved) == damaged
        assert stat.S_IMODE(moved.stat().st_mode) == 0o600
        assert any(str(moved) in r.getMessage() for r in caplog.records)
        assert [m["id"] for m in await ms.session("b").get_history()] == ["b1"]

        # And the reader elsewhere reads the new file on its next read
        reader.stdin.write(b"go\n")
        assert await read_line(reader) == (300, file_identity(database))
        reader.stdin.write(b"done\n")
        assert await asyncio.wait_for(reader.wait(), 30) == 0

        # And writes go on into the new file
        await session.append_message({"id": "last", "role": "user", "content": "still here"})
        assert (await session.get_latest_leaf() or {}).get("id") == "last"
    finally:
        if reader.returncode is None:
            reader.kill()
        _, stderr = await reader.communicate()
    assert b"Traceback" not in stderr, stderr.decode()


def root_pages(database: Path, tables: tuple[str, ...]) -> set[int]:
    """The root pages of ``tables`` (their indexes included), after a checkpoint that leaves
    everything in the database file."""
    check = sqlite3.connect(database)
    names = ", ".join("?" * len(tables))
    roots = {
        int(row[0])
        for row in check.execute(
            f"SELECT rootpage FROM sqlite_master WHERE tbl_name IN ({names}) AND rootpage > 0",
            tables,
        )
    }
    assert check.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    check.close()
    return roots


def garble(database: Path, pages: set[int]) -> None:
    with database.open("r+b") as file:
        for page in pages:
            file.seek((page - 1) * PAGE)
            file.write(bytes((i * 37 + page) % 256 for i in range(PAGE)))


def overwrite_all_but_tracking(database: Path) -> None:
    """Garbage over every page but the header page and the tracking table's, so that the next
    event the projector applies meets damage while its position still reads."""
    kept = {1} | root_pages(database, ("tracking",))
    pages = database.stat().st_size // PAGE
    garble(database, set(range(1, pages + 1)) - kept)


async def hundred_messages(ms: Memstream, session_id: str) -> Session:
    """A session of 100 ~500-byte messages, projected."""
    session = ms.session(session_id)
    await session.append_messages(
        [{"id": f"m{n}", "role": "user", "content": f"message {n} " * 50} for n in range(100)]
    )
    await ms.wait_for("sessions")
    return session


@pytest.mark.sqlite_only
async def test_the_projector_replaces_a_read_model_it_finds_damaged_in_a_batch(
    ms: Memstream, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a client running the projector, with messages projected
    session = await hundred_messages(ms, "a")
    assert ms.core.workers.projector is not None
    stats = ms.core.workers.projector.stats
    damaged = file_identity(settings.database_path)
    old_copy = ms.core.reads.copy_id

    # When every page but the tracking table's is garbage, and the next write arrives
    overwrite_all_but_tracking(settings.database_path)
    caplog.set_level(logging.INFO)
    await session.append_message({"id": "next", "role": "user", "content": "after the damage"})

    # Then the projector's batch meets the damage, moves the file aside and rebuilds it from the
    # log; the waiting read follows it to the new file and has everything
    history = await session.get_history()
    assert [m["id"] for m in history] == [*(f"m{n}" for n in range(100)), "next"]
    [moved] = corrupt_files(settings.database_path)
    assert file_identity(moved) == damaged
    assert any(
        "is damaged" in r.getMessage() and str(moved) in r.getMessage() for r in caplog.records
    )
    assert stats.dead_lettered == 0  # the damage was the file's, not the event's
    assert (
        ms.core.workers.projector.store.connection.execute("PRAGMA quick_check").fetchone()[0]
        == "ok"
    )
    # And the new file is a new read-model copy: the projector consumes under its name, and the
    # old copy's consumer is gone
    assert ms.core.reads.copy_id != old_copy
    assert ms.core.workers.projector.durable == projector_consumer(ms.core.reads.copy_id)
    names = {c.name for c in await ms.core.log.js.consumers_info(ms.core.log.stream)}
    assert projector_consumer(old_copy) not in names


def test_a_foreign_or_unreadable_file_is_replaced_by_the_next_command(tmp_path: Path) -> None:
    # Given sessions written through the API on the embedded platform, which then stopped
    data_dir = tmp_path / "data"
    env = clean_env(MEMSTREAM_DATA_DIR=str(data_dir))
    write_sessions(data_dir, env)
    database = data_dir / "memstream.db"

    # When memstream.db is another application's database, then a file of text
    for n, plant in enumerate((plant_foreign_database, plant_text), start=1):
        plant(database)

        # Then the next command moves it aside, rebuilds from the log and has every message
        listed = memstream(env, "sessions", "list", "--json")
        assert {s["session_id"]: s["messages"] for s in json.loads(listed.stdout)} == (
            dict.fromkeys(SESSIONS, PER_SESSION)
        )
        assert len(corrupt_files(database)) == n
        assert "moved it aside" in listed.stderr


def plant_foreign_database(database: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    foreign = sqlite3.connect(database)
    foreign.execute("CREATE TABLE notes (text TEXT)")
    foreign.commit()
    foreign.close()


def plant_text(database: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    database.write_text("not a database\n" * 1000)


@pytest.mark.sqlite_only
async def test_a_short_lived_process_leaves_a_damaged_file_moved_aside(
    ms: Memstream, settings: Settings
) -> None:
    # Given a client running the projector whose read met damage
    await ms.session("a").append_messages(
        [{"id": f"m{n}", "role": "user", "content": f"message {n} " * 50} for n in range(300)]
    )
    await ms.wait_for("sessions")
    damaged = file_identity(settings.database_path)
    check = sqlite3.connect(settings.database_path)
    assert check.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    check.close()
    overwrite_middle(settings.database_path)
    with pytest.raises(ReadModelDamagedError, match="this process moves it aside"):
        await ms.session("a").get_history()

    # When its projector stops at once (a CLI command exiting)
    assert ms.core.workers.projector is not None
    await ms.core.workers.projector.stop()

    # Then the damaged file is moved aside, for the next projector to rebuild
    [moved] = corrupt_files(settings.database_path)
    assert file_identity(moved) == damaged
    assert file_identity(settings.database_path) not in (None, damaged)


def overwrite_root_pages(database: Path, tables: tuple[str, ...]) -> None:
    """Garbage over the root pages of ``tables``: the file opens, reading them fails."""
    garble(database, root_pages(database, tables))


@pytest.mark.sqlite_only
async def test_a_command_meeting_a_damaged_read_model_is_decided_from_the_log(
    ms: Memstream, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a session of 100 messages, projected, and a read model then damaged
    await hundred_messages(ms, "a")
    overwrite_root_pages(settings.database_path, ("session_state", "messages", "session_keys"))

    # When a new client (nothing cached) runs commands on the session
    caplog.set_level(logging.WARNING)
    other = await open_memstream(settings, workers=False)
    try:
        before = await other.core.log.stream_last_seq()
        appended = await other.session("a").append_message(
            {"id": "next", "role": "user", "content": "after the damage"}
        )
        again = await other.session("a").append_message(
            {"id": "m7", "role": "user", "content": "an id the session holds"}
        )
    finally:
        await other.close()

    # Then they were decided on the session's events from the log, with a warning: the new
    # message under the latest leaf, the existing id a no-op
    assert appended == before + 1
    assert again == appended
    assert any("deciding" in r.getMessage() for r in caplog.records)
    # And the projector here replaced the file and has everything
    await ms.sync("sessions")
    history = await ms.session("a").get_history()
    assert [m["id"] for m in history] == [*(f"m{n}" for n in range(100)), "next"]
