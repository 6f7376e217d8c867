"""A log that lost or replaced its tail: the copies ahead of it are found, named and rebuilt.

Each step runs in its own OS process on one embedded data dir, as a user's would. The log's
store is copied between two processes and put back afterwards: what a power loss with a lazy
fsync, a restored backup or a cluster that lost its tail leaves behind.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from support.processes import clean_env, memstream

from memstream import LogGapError, MemstreamError, ReadModelAheadError, UnavailableError
from memstream.client import open_memstream
from memstream.settings import Settings
from memstream.workers.runtime.nats_server import NatsServerProcess, free_port

SCRIPT = Path(__file__).parent.parent / "support" / "tail_script.py"


def _run(env: dict[str, str], *args: str) -> tuple[Any, str]:
    """Run the tail script to its end: the JSON of its last line, and what it logged."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def _ids(start: int, stop: int) -> list[str]:
    return [f"m{i}" for i in range(start, stop)]


def _restore(saved: Path, store: Path) -> None:
    shutil.rmtree(store)
    shutil.copytree(saved, store)


def _moved_aside(data: Path) -> list[Path]:
    return sorted(data.glob("memstream.db.corrupt-*[0-9TZ]"))


def test_a_log_that_lost_its_tail_is_found_and_the_embedded_copy_rebuilt(tmp_path: Path) -> None:
    # Given process 1 appended 100 messages to session "chat", and its log's store was saved
    data = tmp_path / "data"
    env = clean_env(MEMSTREAM_DATA_DIR=str(data))
    _run(env, "append", "chat", "0", "100")
    saved = tmp_path / "saved-nats"
    shutil.copytree(data / "nats", saved)
    # and process 2 appended 50 more, projected into the read model
    _run(env, "append", "chat", "100", "50")
    assert _run(env, "history", "chat")[0] == _ids(0, 150)
    # When the log loses those 50 (its store put back as it was)
    _restore(saved, data / "nats")

    # Then process 3 reads what the log holds, not what it lost,
    history, logged = _run(env, "history", "chat")
    assert history == _ids(0, 100)
    # with one warning that names the lost range, the old copy moved aside
    assert logged.count("read model ahead of the log") == 1, logged
    assert "tracked 150, log ends at 100: events 101-150 are not in the log" in logged
    assert len(_moved_aside(data)) == 1
    # and the session takes writes at once (no retry loop against a stale snapshot)
    last, _ = _run(env, "append", "chat", "100", "10")
    assert last == 110
    assert _run(env, "history", "chat")[0] == _ids(0, 110)
    # and the copy verifies against the log
    report = json.loads(memstream(env, "projections", "verify", "--json").stdout)
    assert all(r["ok"] for r in report), report


def test_a_replaced_tail_is_not_skipped_as_already_applied(tmp_path: Path) -> None:
    # Given 100 messages in the log, its store saved, then 50 more projected
    data = tmp_path / "data"
    env = clean_env(MEMSTREAM_DATA_DIR=str(data))
    _run(env, "append", "chat", "0", "100")
    saved_log = tmp_path / "saved-nats"
    shutil.copytree(data / "nats", saved_log)
    _run(env, "append", "chat", "100", "50")
    saved_db = tmp_path / "saved-db"
    saved_db.mkdir()
    for file in data.glob("memstream.db*"):
        shutil.copy2(file, saved_db / file.name)
    # When the log loses them, and other writers reach the same sequences again before this
    # copy opens (another session: 60 events, at sequences 101..160)
    _restore(saved_log, data / "nats")
    for file in data.glob("memstream.db*"):
        file.unlink()
    _run(env, "append", "other", "0", "60")
    for file in data.glob("memstream.db*"):
        file.unlink()
    for file in saved_db.iterdir():
        shutil.copy2(file, data / file.name)

    # Then the copy that tracked 150 is found to hold other events than the log there
    history, logged = _run(env, "history", "other")
    assert "holds another event at" in logged, logged
    # and nothing the log holds now is skipped as "already applied"
    assert history == _ids(0, 60)
    assert _run(env, "history", "chat")[0] == _ids(0, 100)


async def test_a_command_decided_on_a_snapshot_ahead_of_the_log_is_decided_again_on_the_log(
    tmp_path: Path,
) -> None:
    # Given a copy that tracked 150 events of session "chat" while the log lost the last 50
    data = tmp_path / "data"
    env = clean_env(MEMSTREAM_DATA_DIR=str(data))
    _run(env, "append", "chat", "0", "100")
    saved = tmp_path / "saved-nats"
    shutil.copytree(data / "nats", saved)
    _run(env, "append", "chat", "100", "50")
    _restore(saved, data / "nats")
    # and a client that opens it without the check and without a projector (nothing mends it)
    ms = await open_memstream(Settings(data_dir=data), workers=False, check_log=False)
    try:
        # When it appends to the session: decided first on the snapshot (at 150)
        started = time.monotonic()
        await ms.session("chat").append_message({"id": "new", "role": "user", "content": "x"})
        # Then the command is decided again on the log's events, at once (no retry loop)
        assert time.monotonic() - started < 5
        entries = [
            e async for e in ms.core.log.read_subject(ms.core.commands.session_subject("chat"))
        ]
        assert len(entries) == 101
        # and the new message follows the log's last one (m99), not the lost m149
        event = json.loads(entries[-1].payload)
        assert event["message"]["id"] == "new"
        assert event["parent_id"] == "m99"
    finally:
        await ms.close()


def test_status_and_doctor_name_a_copy_ahead_of_the_log_and_rebuild_mends_it(
    tmp_path: Path,
) -> None:
    # Given a data dir whose log lost its last 50 events after they were projected
    data = tmp_path / "data"
    env = clean_env(MEMSTREAM_DATA_DIR=str(data))
    _run(env, "append", "chat", "0", "100")
    saved = tmp_path / "saved-nats"
    shutil.copytree(data / "nats", saved)
    _run(env, "append", "chat", "100", "50")
    _restore(saved, data / "nats")

    # When status looks (it runs no projector: it reports, it does not mend)
    status = memstream(env, "status", expect=1)
    # Then it names the range and exits non-zero
    assert "read model ahead of the log: tracked 150, log ends at 100" in status.stderr
    # and doctor says the same, with the command that mends it
    report = json.loads(memstream(env, "doctor", "--json", expect=1).stdout)
    wrong = [f for f in report["findings"] if not f["ok"]]
    assert [f["check"] for f in wrong] == ["read model"], wrong
    assert "events 101-150 are not in the log" in wrong[0]["detail"]
    assert wrong[0]["mend"].startswith("memstream projections rebuild")
    durability = [f for f in report["findings"] if f["check"] == "durability"]
    assert durability[0]["ok"]
    assert "syncs every write before acknowledging it" in durability[0]["detail"]

    # When the operator runs the command it names
    memstream(env, "projections", "rebuild")
    # Then status and doctor find nothing wrong
    memstream(env, "status")
    assert json.loads(memstream(env, "doctor", "--json").stdout)["ok"]
    assert _run(env, "history", "chat")[0] == _ids(0, 100)


def test_doctor_fails_on_a_server_that_acknowledges_before_fsync(tmp_path: Path) -> None:
    # Given an embedded data dir whose server was started with a relaxed policy
    data = tmp_path / "data"
    env = clean_env(MEMSTREAM_DATA_DIR=str(data), MEMSTREAM_NATS_SYNC="1m")
    # When doctor checks it
    report = json.loads(memstream(env, "doctor", "--json", expect=1).stdout)
    # Then it names the policy and how to make it durable
    wrong = [f for f in report["findings"] if not f["ok"]]
    assert [f["check"] for f in wrong] == ["durability"]
    assert "sync_interval 1m" in wrong[0]["detail"]
    assert "MEMSTREAM_NATS_SYNC" in wrong[0]["mend"]


async def _append(settings: Settings, start: int, count: int) -> None:
    ms = await open_memstream(settings, workers=True)
    try:
        session = ms.session("chat")
        for i in range(start, start + count):
            await session.append_message({"id": f"m{i}", "role": "user", "content": f"n {i}"})
        await session.get_history()  # projected before the process goes
    finally:
        await ms.close()


async def test_a_shared_postgresql_copy_ahead_of_the_log_is_refused_until_rebuilt(
    tmp_path: Path, postgres_url: str
) -> None:
    # Given a log server we control and a PostgreSQL copy that projected 150 events
    port, store = free_port(), tmp_path / "nats-store"
    server = NatsServerProcess.start(store, port=port, log_path=tmp_path / "nats.log")
    settings = Settings(
        data_dir=tmp_path / "data",
        nats_url=server.url,
        stream="L" + uuid.uuid4().hex[:12].upper(),
        database_url=postgres_url,
    )
    try:
        await _append(settings, 0, 100)
        server.stop()
        shutil.copytree(store, tmp_path / "saved")
        server = NatsServerProcess.start(store, port=port, log_path=tmp_path / "nats.log")
        await _append(settings, 100, 50)
        # When the log loses its last 50 events
        server.stop()
        _restore(tmp_path / "saved", store)
        server = NatsServerProcess.start(store, port=port, log_path=tmp_path / "nats.log")

        # Then a client refuses the copy in one line naming the range and the mending command
        with pytest.raises(ReadModelAheadError) as refused:
            await open_memstream(settings, workers=True)
        assert "tracked 150, log ends at 100: events 101-150 are not in the log" in str(
            refused.value
        )
        assert str(refused.value).endswith("run `memstream projections rebuild`")
        # and verify exits non-zero with it
        env = clean_env(
            MEMSTREAM_NATS_URL=server.url,
            MEMSTREAM_STREAM=settings.stream,
            MEMSTREAM_DATABASE_URL=postgres_url,
            MEMSTREAM_DATA_DIR=str(settings.data_dir),
        )
        verified = memstream(env, "projections", "verify", expect=1)
        assert "read model ahead of the log: tracked 150" in verified.stderr

        # When the operator rebuilds it
        memstream(env, "projections", "rebuild")
        # Then it serves what the log holds, and takes writes
        await _append(settings, 100, 10)
        ms = await open_memstream(settings, workers=True)
        try:
            history = await ms.session("chat").get_history()
            assert [m["id"] for m in history] == _ids(0, 110)
        finally:
            await ms.close()
    finally:
        server.stop()


async def test_a_running_projector_checks_the_log_again_after_its_server_lost_its_tail(
    tmp_path: Path,
) -> None:
    # Given a client projecting in-process from a server we control, 100 events in its log
    port, store = free_port(), tmp_path / "nats-store"
    server = NatsServerProcess.start(store, port=port, log_path=tmp_path / "nats.log")
    settings = Settings(
        data_dir=tmp_path / "data", nats_url=server.url, stream="L" + uuid.uuid4().hex[:12].upper()
    )
    ms = await open_memstream(settings, workers=True)
    try:
        session = ms.session("chat")
        for i in range(100):
            await session.append_message({"id": f"m{i}", "role": "user", "content": f"n {i}"})
        server.stop()
        shutil.copytree(store, tmp_path / "saved")
        server = NatsServerProcess.start(store, port=port, log_path=tmp_path / "nats.log")
        # and 50 more, projected
        await _retry(lambda: session.append_message({"id": "m100", "role": "user", "content": "x"}))
        for i in range(101, 150):
            await session.append_message({"id": f"m{i}", "role": "user", "content": f"n {i}"})
        assert len(await session.get_history()) == 150
        # When its server restarts from a store that lost those 50 (the client reconnects)
        server.stop()
        _restore(tmp_path / "saved", store)
        server = NatsServerProcess.start(store, port=port, log_path=tmp_path / "nats.log")
        # and another client writes 60 events at the same sequences (another session)
        other = await open_memstream(settings.with_(data_dir=tmp_path / "other"), workers=False)
        try:
            for i in range(60):
                await other.session("new").append_message(
                    {"id": f"n{i}", "role": "user", "content": f"n {i}"}
                )
        finally:
            await other.close()

        # Then the projector finds its copy ahead of the log, rebuilds it, and skips nothing
        async def projected() -> bool:
            chat = [m["id"] for m in await ms.session("chat").get_history()]
            new = [m["id"] for m in await ms.session("new").get_history()]
            return chat == _ids(0, 100) and new == [f"n{i}" for i in range(60)]

        deadline = time.monotonic() + 30
        while not await _quietly(projected):
            assert time.monotonic() < deadline, "the copy was not rebuilt from the log"
            await asyncio.sleep(0.1)
        assert len(_moved_aside(settings.data_dir)) == 1
    finally:
        await ms.close()
        server.stop()


async def _retry(write: Callable[[], Awaitable[object]], timeout: float = 30) -> None:
    """Run ``write`` until the log takes it (the client reconnects to a restarted server)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            await write()
            return
        except UnavailableError:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)


async def _quietly(check: Callable[[], Awaitable[bool]]) -> bool:
    """``check()``, False while reads fail (the copy is being replaced)."""
    try:
        return await check()
    except MemstreamError:
        return False


def test_verify_reports_a_copy_ahead_of_the_log_and_exits_non_zero(tmp_path: Path) -> None:
    # Given a data dir whose log lost its last 50 events after they were projected
    data = tmp_path / "data"
    env = clean_env(MEMSTREAM_DATA_DIR=str(data))
    _run(env, "append", "chat", "0", "100")
    saved = tmp_path / "saved-nats"
    shutil.copytree(data / "nats", saved)
    _run(env, "append", "chat", "100", "50")
    _restore(saved, data / "nats")
    # When verify runs (it owns the data dir: its projector rebuilds the copy meanwhile)
    verified = memstream(env, "projections", "verify", expect=1)
    # Then it says what it found, and that the copy is rebuilt
    assert "read model ahead of the log: tracked 150, log ends at 100" in verified.stderr
    assert "moved aside and is rebuilt from the log" in verified.stderr
    # and the next verify finds the rebuilt copy equal to the log
    memstream(env, "projections", "verify")
    assert _run(env, "history", "chat")[0] == _ids(0, 100)


async def test_a_log_that_serves_a_session_with_a_hole_is_named_and_nothing_decided(
    settings: Settings, tmp_path: Path
) -> None:
    # Given a session of 5 messages in the log, and a copy of the stream that no longer holds
    # the third (what a server that lost acknowledged events to a damaged store serves)
    writer = await open_memstream(settings, workers=False)
    try:
        for i in range(5):
            await writer.session("chat").append_message(
                {"id": f"m{i}", "role": "user", "content": "x"}
            )
        entries = [
            e
            async for e in writer.core.log.read_subject(
                writer.core.commands.session_subject("chat")
            )
        ]
        await writer.core.log.js.delete_msg(writer.core.log.stream, entries[2].seq)
        last = entries[-1].seq
    finally:
        await writer.close()
    # When a new client (no cache, no read model) appends to the session
    reader = await open_memstream(settings.with_(data_dir=tmp_path / "other"), workers=False)
    try:
        started = time.monotonic()
        with pytest.raises(LogGapError) as raised:
            await reader.session("chat").append_message(
                {"id": "m5", "role": "user", "content": "x"}
            )
        # Then the hole is named at once (no retry loop): the subject and the versions
        assert time.monotonic() - started < 5
        message = str(raised.value)
        assert reader.core.commands.session_subject("chat") in message
        assert "version 4 where version 3 is due" in message
        assert "memstream doctor" in message
        # and nothing was decided on it
        assert await reader.core.log.last_seq(reader.core.commands.session_subject("chat")) == last
    finally:
        await reader.close()


@pytest.mark.both_backends
async def test_a_projector_reading_a_log_with_a_hole_names_the_missing_versions(
    settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a session of 5 messages whose third event the log that is read no longer holds
    writer = await open_memstream(settings, workers=False)
    try:
        for i in range(5):
            message = {"id": f"m{i}", "role": "user", "content": "x"}
            await writer.session("chat").append_message(message)
        entries = [
            e
            async for e in writer.core.log.read_subject(
                writer.core.commands.session_subject("chat")
            )
        ]
        await writer.core.log.js.delete_msg(writer.core.log.stream, entries[2].seq)
    finally:
        await writer.close()
    # When a projector builds a read model from it
    caplog.set_level("WARNING")
    reader = await open_memstream(settings.with_(data_dir=tmp_path / "other"), workers=True)
    try:
        await reader.wait_for("sessions")
        # Then it applies what the log holds (m3's parent, m2, is not there: the path to the
        # latest leaf starts at m3) and names, once, the version it misses
        history = await reader.session("chat").get_history()
        assert [m["id"] for m in history] == ["m3", "m4"]
        warned = [
            r.getMessage() for r in caplog.records if "is missing from the log" in r.getMessage()
        ]
        assert warned == [
            f"session 'chat' ({settings.namespace}): its event at sequence {entries[3].seq} has "
            f"version 4, the read model's last is 2: version 3 is missing from the log that was "
            f"read (a server's damaged copy? a dead letter?); run `memstream doctor`"
        ]
    finally:
        await reader.close()
