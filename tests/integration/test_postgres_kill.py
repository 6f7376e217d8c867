"""PostgreSQL killed with SIGKILL while a projector process is inside a batch, then restarted
with ``pg_ctl``: the projector recovers on its own, and its read models equal a rebuild from the
log, each acknowledged message and each usage record counted once. And the projector holds its
copy again afterwards, refusing a second projector."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest
from support.deployment import deployment_env, deployment_settings
from support.postgres_server import PrivatePostgres
from support.processes import start_worker, stop, wait_for_text

from memstream.client import Memstream, open_memstream
from memstream.domain.errors import ProjectorRunningError, UnavailableError
from memstream.projections.postgres.copy import PostgresCopy
from memstream.projections.postgres.locks import PostgresProjectorLock
from memstream.projections.registry import PROJECTOR_PROJECTIONS
from memstream.session_manager import SessionManager
from memstream.settings import Settings
from memstream.workers.admin.rebuild import verify
from memstream.workers.runtime.nats_server import NatsServerProcess

pytestmark = pytest.mark.postgres

SESSIONS = ("alpha", "beta", "gamma", "delta")
CHAIN = 50  # messages per append_all: one event of 50 messages, heavy work for a batch
WAIT = 30.0  # the bound of every wait
# The sessions projection's committed position, and how many backends hold a transaction that
# has written or locked rows and not committed: a projector inside a batch.
PROGRESS = """
    SELECT (SELECT seq FROM memstream.tracking WHERE projection = 'sessions'),
           (SELECT count(*) FROM pg_stat_activity
             WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid())
"""


def _settings(tmp_path: Path, nats_server: NatsServerProcess, url: str) -> Settings:
    return deployment_settings(
        nats_server.url, tmp_path / "data", database_url=url, read_timeout=WAIT
    )


def _env(settings: Settings) -> dict[str, str]:
    """The environment of a process with ``settings``."""
    assert settings.nats_url is not None
    assert settings.database_url is not None
    return deployment_env(settings)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``: a postmaster's backends and helpers."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead and not reaped yet, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _kill_postmaster(server: PrivatePostgres) -> None:
    """SIGKILL the postmaster (its pid: the first line of ``postmaster.pid``), as the OOM
    killer would, and wait for its backends to notice and exit: a transaction open in one of
    them is never committed."""
    pid = int((server.data / "postmaster.pid").read_text().split()[0])
    backends = _children(pid)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + WAIT
    while any(_running(p) for p in [pid, *backends]):
        assert time.monotonic() < deadline, "the killed server's processes did not exit"
        time.sleep(0.01)


def _restart(server: PrivatePostgres) -> None:
    """``pg_ctl start`` until it succeeds: a new postmaster refuses to start while the killed
    one's pid is taken (by its zombie, until it is reaped); it then recovers from the WAL."""
    deadline = time.monotonic() + WAIT
    while True:
        try:
            server.start()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
        else:
            return


def _progress(url: str) -> tuple[int, int]:
    """See :data:`PROGRESS`."""
    with psycopg.connect(url, connect_timeout=3) as database:
        row = database.execute(PROGRESS).fetchone()
    assert row is not None
    return int(row[0] or 0), int(row[1])


def _tracked(url: str) -> int:
    """The lowest position of the copy's projections (0 while the server is away)."""
    try:
        with psycopg.connect(url, connect_timeout=3) as database:
            row = database.execute("SELECT min(seq) FROM memstream.tracking").fetchone()
    except psycopg.OperationalError:
        return 0
    return 0 if row is None or row[0] is None else int(row[0])


def _assert_running(worker: subprocess.Popen[str], log: Path) -> None:
    assert worker.poll() is None, f"the projector exited:\n{log.read_text()}"


def _locks_refused(url: str) -> bool:
    """Whether taking the projector locks of the copy at ``url`` is refused (a projector holds
    them); locks taken here are given back at once."""
    try:
        lock = PostgresProjectorLock.acquire(url, "copy", PROJECTOR_PROJECTIONS)
    except ProjectorRunningError:
        return True
    lock.release()
    return False


def _chain(session_id: str, number: int) -> list[dict[str, str]]:
    return [
        {
            "id": f"{session_id}-{number}-{i}",
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"turn {i} of chain {number} in {session_id}: the quick brown fox {i}",
        }
        for i in range(CHAIN)
    ]


class Writer:
    """Writes rounds: a chain of CHAIN messages to each session in turn (``append_all``, one
    event), each followed by its usage; records what the log acknowledged."""

    def __init__(self, manager: SessionManager) -> None:
        self.manager = manager
        self.acked: dict[str, list[str]] = {s: [] for s in SESSIONS}
        self.usage = dict.fromkeys(SESSIONS, 0)
        self.rounds = 0

    async def write(self, rounds: int) -> None:
        for _ in range(rounds):
            await self._round()

    async def write_until(self, done: asyncio.Event) -> None:
        """Write rounds until ``done`` is set."""
        while not done.is_set():
            await self._round()

    async def _round(self) -> None:
        for session_id in SESSIONS:
            chain = _chain(session_id, self.rounds)
            await self.manager.append_all(session_id, chain)
            self.acked[session_id] += [m["id"] for m in chain]
            await self.manager.add_usage(session_id, len(chain), 1, 0.0)
            self.usage[session_id] += 1
        self.rounds += 1


async def _kill_inside_a_batch(
    server: PrivatePostgres, url: str, start: int, writing: asyncio.Task[None]
) -> int:
    """Poll until the projector has committed part of the writes and holds a batch open, then
    kill the server; returns the position the projector had committed."""
    deadline = time.monotonic() + WAIT
    while True:
        tracked, open_batches = await asyncio.to_thread(_progress, url)
        if tracked > start and open_batches:
            await asyncio.to_thread(_kill_postmaster, server)
            return tracked
        if writing.done():
            writing.result()  # the writer's error, if it failed
        assert time.monotonic() < deadline, f"no batch caught open (tracked {tracked})"
        await asyncio.sleep(0.005)


async def _caught_up(url: str, end: int, worker: subprocess.Popen[str], log: Path) -> None:
    """Wait until every projection of the copy reached ``end``, the projector alive."""
    deadline = time.monotonic() + WAIT
    while (tracked := await asyncio.to_thread(_tracked, url)) < end:
        _assert_running(worker, log)
        assert time.monotonic() < deadline, f"projections at {tracked}, the log at {end}"
        await asyncio.sleep(0.05)


async def _history(client: Memstream, session_id: str) -> list[str]:
    """The ids of the session's history. A reader's connection that the kill broke fails one
    read, and is connected again for the next (see memstream.projections.postgres.reads)."""
    deadline = time.monotonic() + WAIT
    while True:
        try:
            return [str(m["id"]) for m in await client.session(session_id).get_history()]
        except UnavailableError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def test_a_projector_recovers_on_its_own_when_postgresql_is_killed_inside_a_batch(
    tmp_path: Path, nats_server: NatsServerProcess, private_postgres: PrivatePostgres
) -> None:
    url = private_postgres.url()
    settings = _settings(tmp_path, nats_server, url)
    # Given a projector process writing the read models into a private PostgreSQL
    log = tmp_path / "projector.log"
    worker = start_worker(_env(settings), log)
    client: Memstream | None = None
    writing: asyncio.Task[None] | None = None
    try:
        wait_for_text(log, "projector: stream", worker)
        client = await open_memstream(settings, workers=False)
        manager = client.session_manager()
        for session_id in SESSIONS:
            await manager.create(session_id, session_id=session_id)
        start = await client.core.log.stream_last_seq()
        # And a writer appending chains of messages to several sessions, with their usage
        writer = Writer(manager)
        killed = asyncio.Event()
        writing = asyncio.create_task(writer.write_until(killed))
        # When the postmaster is killed with SIGKILL while the projector is inside a batch
        killed_at = await _kill_inside_a_batch(private_postgres, url, start, writing)
        killed.set()
        await asyncio.wait_for(writing, WAIT)
        # And the writer goes on while the server is away (the log decides its commands)
        await asyncio.wait_for(writer.write(1), WAIT)
        # And the server is started again with pg_ctl, and written to
        await asyncio.to_thread(_restart, private_postgres)
        await asyncio.wait_for(writer.write(1), WAIT)
        end = await client.core.log.stream_last_seq()
        assert start < killed_at < end
        # Then the projector, the same process untouched, catches up with the log
        await _caught_up(url, end, worker, log)
        _assert_running(worker, log)
        assert "batch failed" in log.read_text()  # it met the kill
        # And every projection equals a rebuild from the log
        results = await verify(client.core.log, PostgresCopy(url))
        assert {"sessions", "registry"} <= {r.projection for r in results}
        assert all(r.ok for r in results), results
        # And each session's history holds every acknowledged message once, in order
        for session_id in SESSIONS:
            assert await _history(client, session_id) == writer.acked[session_id]
    finally:
        if writing is not None and not writing.done():
            writing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writing
        if client is not None:
            await client.close()
        stop(worker)
    # And nothing is doubled: one row per message id, counters that count each write once
    with psycopg.connect(url) as database:
        doubled = database.execute(
            "SELECT sid, id, count(*) FROM memstream.messages GROUP BY sid, id HAVING count(*) > 1"
        ).fetchall()
        counts = database.execute(
            "SELECT k.session_id, k.messages, count(m.mid) FROM memstream.session_keys AS k "
            "LEFT JOIN memstream.messages AS m ON m.sid = k.sid "
            "GROUP BY k.session_id, k.messages ORDER BY k.session_id"
        ).fetchall()
        usage = database.execute(
            "SELECT session_id, input_tokens, output_tokens FROM memstream.session_registry "
            "ORDER BY session_id"
        ).fetchall()
    assert doubled == []
    acked = {s: len(ids) for s, ids in writer.acked.items()}
    assert counts == [(s, acked[s], acked[s]) for s in sorted(SESSIONS)]
    assert usage == [(s, acked[s], writer.usage[s]) for s in sorted(SESSIONS)]


async def test_a_projector_holds_its_copy_again_after_postgresql_is_killed_and_restarted(
    tmp_path: Path, nats_server: NatsServerProcess, private_postgres: PrivatePostgres
) -> None:
    url = private_postgres.url()
    settings = _settings(tmp_path, nats_server, url)
    # Given a projector process, which holds the copy: another projector would be refused
    log = tmp_path / "projector.log"
    worker = start_worker(_env(settings), log)
    client: Memstream | None = None
    try:
        wait_for_text(log, "projector: stream", worker)
        assert await asyncio.to_thread(_locks_refused, url)
        client = await open_memstream(settings, workers=False)
        # When the postmaster is killed with SIGKILL and started again
        await asyncio.to_thread(_kill_postmaster, private_postgres)
        await asyncio.to_thread(_restart, private_postgres)
        # And a write is projected after the restart (the projector has reconnected)
        seq = await client.session("s").append_message({"id": "m0", "role": "user", "content": "x"})
        await _caught_up(url, seq, worker, log)
        # Then another projector of the copy is still refused
        assert await asyncio.to_thread(_locks_refused, url)
    finally:
        if client is not None:
            await client.close()
        stop(worker)
