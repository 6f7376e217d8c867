"""Failure tests against a real nats-server: crashed projector, restarted server, poison events."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from support.read_models import EMBEDDED_VERIFIED

from memstream.client import Memstream, open_memstream
from memstream.domain.errors import UnavailableError
from memstream.domain.session import SessionAggregate, session_aggregate_id
from memstream.projections.sqlite.checksum import checksum
from memstream.projections.sqlite.database import dead_letters, open_database, tracked_seq
from memstream.projections.sqlite.store import SqliteCopy
from memstream.settings import Settings
from memstream.workers.admin.rebuild import rebuild, verify
from memstream.workers.log.codec import CommandMeta, encode_event
from memstream.workers.log.event_log import OutgoingMessage
from memstream.workers.log.subjects import logical_subject
from memstream.workers.runtime.nats_server import NatsServerProcess, free_port

PROJECTOR_SCRIPT = Path(__file__).resolve().parents[1] / "support" / "projector_process.py"
TOTAL_MESSAGES = 20_000
BATCH = 500


def _message(index: int) -> dict[str, object]:
    return {
        "id": f"m{index:05d}",
        "role": "user" if index % 2 else "assistant",
        "parts": [{"type": "text", "text": f"message number {index} about topic{index % 97}"}],
    }


def _start_projector(settings: Settings, batch_size: int, log: Path) -> subprocess.Popen[bytes]:
    """The projector worker in a process of its own; its stderr goes to ``log``."""
    with log.open("ab") as stderr:
        return subprocess.Popen(
            [
                sys.executable,
                str(PROJECTOR_SCRIPT),
                str(settings.nats_url),
                settings.stream,
                str(settings.data_dir / "memstream.db"),
                str(batch_size),
                settings.subject_prefix,
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )


def _tracked(database: Path) -> int:
    connection = sqlite3.connect(database, timeout=30.0)
    try:
        return tracked_seq(connection, "sessions")
    except sqlite3.OperationalError:  # the worker has not created the schema yet
        return 0
    finally:
        connection.close()


async def _poll_tracked(database: Path, *, reach: int, deadline_s: float) -> int:
    """Poll the tracking row until it reaches ``reach``; bounded by ``deadline_s``."""
    deadline = time.monotonic() + deadline_s
    while True:
        seq = _tracked(database)
        if seq >= reach:
            return seq
        assert time.monotonic() < deadline, f"projector stuck at {seq}, wanted {reach}"
        await asyncio.sleep(0.005)


@pytest.mark.sqlite_only
@pytest.mark.slow
async def test_projector_killed_mid_projection_resumes_without_loss_or_duplicates(
    settings: Settings,
) -> None:
    # Given 20,000 messages written fast (batches of 500) by a client that projects nothing
    writer = await open_memstream(settings, workers=False)
    database = settings.data_dir / "memstream.db"
    log = settings.data_dir / "projector.log"
    projector: subprocess.Popen[bytes] | None = None
    try:
        session = writer.session("big")
        for start in range(0, TOTAL_MESSAGES, BATCH):
            await session.append_messages([_message(i) for i in range(start, start + BATCH)])
        last = await writer.core.log.stream_last_seq()
        assert last == TOTAL_MESSAGES // BATCH

        # When a projector runs in its own process (committing one event per batch) ...
        projector = _start_projector(settings, 1, log)
        deadline = time.monotonic() + 60
        while not last // 2 <= (seq_at_kill := _tracked(database)) < last:
            assert projector.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "projector never started projecting"
            await asyncio.sleep(0.002)
        # ... and is killed with SIGKILL once it is half-way through
        projector.send_signal(signal.SIGKILL)
        assert projector.wait(10) == -signal.SIGKILL
        at_kill = _tracked(database)
        assert 0 < at_kill < last, f"kill did not land mid-way: tracked {at_kill} of {last}"

        # ... and then restarted
        projector = _start_projector(settings, BATCH, log)
        await _poll_tracked(database, reach=last, deadline_s=120)
        projector.send_signal(signal.SIGTERM)
        assert projector.wait(15) == 0, log.read_text()
        projector = None

        # Then every message is there exactly once, as one chain in write order
        live = open_database(database)
        try:
            rows = live.execute("SELECT id, parent_id FROM messages ORDER BY position").fetchall()
            fts_rows = live.execute("SELECT count(*) FROM messages_fts").fetchone()[0]
            live_checksum = checksum(live, "sessions")
        finally:
            live.close()
        expected = [_message(i)["id"] for i in range(TOTAL_MESSAGES)]
        assert len(rows) == TOTAL_MESSAGES
        assert [r[0] for r in rows] == expected  # nothing lost, nothing duplicated, in order
        assert [r[1] for r in rows] == [None, *expected[:-1]]
        assert fts_rows == TOTAL_MESSAGES
        assert await session.get_message(expected[-1]) == _message(TOTAL_MESSAGES - 1)
        # And the read model equals a fresh rebuild from the log into a scratch database
        results = await verify(writer.core.log, SqliteCopy(database))
        assert [(r.projection, r.seq) for r in results] == [
            ("sessions", last),
            ("context", last),
            ("registry", last),
            ("memory", last),
        ]
        assert results[0].live == results[0].rebuilt == live_checksum
        print(f"\nkill landed at tracked seq {seq_at_kill}/{at_kill} of {last}")
    finally:
        if projector is not None and projector.poll() is None:
            projector.kill()
            projector.wait()
        await writer.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("per_write", "reads"),
    [(1, False), (3, False), (1, True)],
    ids=["append_message", "append_messages", "append_message-then-read"],
)
async def test_nats_restart_during_write_loop_loses_no_acknowledged_write(
    tmp_path: Path, per_write: int, reads: bool
) -> None:
    # Given a nats-server we control (fixed port and store dir) and a client projecting in-process
    port, store = free_port(), tmp_path / "nats-store"
    server = NatsServerProcess.start(store, port=port, log_path=tmp_path / "nats-1.log")
    settings = Settings(
        data_dir=tmp_path / "data", nats_url=server.url, stream="R" + uuid.uuid4().hex[:12].upper()
    )
    ms = await open_memstream(settings, workers=True)
    session = ms.session("loop")
    total = 400 if per_write == 1 else 600
    acknowledged: list[str] = []
    failures: list[tuple[float, float]] = []  # (started, seconds until UnavailableError)
    failed = asyncio.Event()
    restarted_at = float("inf")

    async def write_loop() -> None:
        # A writer that retries a failed command with the same message ids (idempotent), one
        # message per command or a chain of ``per_write`` (one atomic batch); with ``reads``
        # it reads the history after each write (an agent loop: its writes are applied by
        # the projector here while their acknowledgement is on its way)
        for i in range(0, total, per_write):
            messages = [_message(n) for n in range(i, i + per_write)]
            while True:
                started = time.monotonic()
                try:
                    if per_write == 1:
                        await session.append_message(messages[0])
                    else:
                        await session.append_messages(messages)
                except UnavailableError:
                    failures.append((started, time.monotonic() - started))
                    if len(failures) >= 2:
                        failed.set()
                    continue
                acknowledged.extend(str(m["id"]) for m in messages)
                break
            if reads:
                history = await session.get_history()
                assert [m["id"] for m in history] == acknowledged

    writer = asyncio.create_task(write_loop())
    try:
        # When the server is SIGKILLed while the writer is in the middle of its loop
        while len(acknowledged) < 100:
            assert not writer.done()
            await asyncio.sleep(0.001)
        server.stop(signal.SIGKILL)
        acked_before_kill = len(acknowledged)
        # Then the writer gets UnavailableError within a bounded time, not a hang
        await asyncio.wait_for(failed.wait(), 30)
        # When a new server starts on the same port and the same store
        server = await asyncio.to_thread(
            NatsServerProcess.start, store, port=port, log_path=tmp_path / "nats-2.log"
        )
        restarted_at = time.monotonic()
        # Then the writer finishes its loop
        await asyncio.wait_for(writer, 60)
        finished = time.monotonic() - restarted_at
        durations = [round(d, 2) for _, d in failures]
        print(
            f"\nkilled after {acked_before_kill} acks; UnavailableError after {durations} s; "
            f"{total - acked_before_kill} writes done {finished:.2f} s after the restart"
        )
        assert len(failures) >= 2
        assert max(d for _, d in failures) < 10
        # And no write that started after the restart failed
        assert [f for f in failures if f[0] > restarted_at] == []
        # And every acknowledged write is in the read model, exactly once, as one chain
        assert acknowledged == [f"m{i:05d}" for i in range(total)]
        if reads:
            assert ms.core.own.overlapped_writes > 100, ms.core.own.overlapped_writes
        history = await session.get_history()
        assert [m["id"] for m in history] == acknowledged
        # And the read model still equals a rebuild from the log
        results = await verify(ms.core.log, SqliteCopy(settings.data_dir / "memstream.db"))
        assert [r.projection for r in results] == [*EMBEDDED_VERIFIED]
        assert all(r.ok for r in results), results
    finally:
        if not writer.done():
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, UnavailableError):
                await writer
        await ms.close()
        server.stop()


@pytest.mark.sqlite_only
async def test_poison_events_are_dead_lettered_and_the_projector_keeps_going(
    ms: Memstream, settings: Settings
) -> None:
    # Given a projecting client and a session with one message
    session = ms.session("s")
    await session.append_message(_message(1))
    x, y = (f"{ms.core.log.subject_prefix}.default.session.{s}" for s in ("x", "y"))
    # When garbage with bogus headers lands on a session subject ...
    garbage = await ms.core.log.js.publish(
        x,
        b"\xff\xfe not json {",
        headers={"Ms-Topic": "no.such:Event", "Ms-Originator-Id": "?", "Nats-Msg-Id": "junk-1"},
    )
    # ... and a well-formed event that the projection cannot apply (content is not JSON text)
    bad_event = SessionAggregate.MessageAppended(
        originator_id=session_aggregate_id("default", "y"),
        originator_version=1,
        timestamp=SessionAggregate.MessageAppended.create_timestamp(),
        session_id="y",
        message_id="bad",
        parent_id=None,
        message_json=123,
    )
    meta = CommandMeta(command_id="bad-1")
    payload, headers = encode_event(bad_event, meta, meta.command_id)
    unappliable = await ms.core.log.publish(
        y, [OutgoingMessage(payload, headers, meta.command_id)], None
    )
    # ... and then more good events follow
    await session.append_message(_message(2))
    await ms.session("y").append_message(_message(3), parent_id=None)

    # Then the good events are projected after the poison ones
    assert [m["id"] for m in await session.get_history()] == ["m00001", "m00002"]
    assert [m["id"] for m in await ms.session("y").get_history()] == ["m00003"]
    # And both poison events are recorded as dead letters: the undecodable one at once by every
    # projection, the unappliable one by the sessions projection after the bounded attempts (the
    # context projection has nothing to do with a message and applies it)
    # (the analytics worker, a consumer of its own, dead-letters the undecodable one too)
    await ms.sync("analytics")
    letters = dead_letters(ms.core.reads.read_models.connection)
    # (a dead letter keeps the subject as stored: with its partition on a partitioned stream)
    assert [
        (d["projection"], d["seq"], logical_subject(d["subject"]), d["attempts"]) for d in letters
    ] == [
        ("analytics", garbage.seq, x, 1),
        ("context", garbage.seq, x, 1),
        ("memory", garbage.seq, x, 1),
        ("registry", garbage.seq, x, 1),
        ("sessions", garbage.seq, x, 1),
        ("sessions", unappliable.seq, y, 5),
    ]
    assert letters[5]["topic"] == "session.message_appended"  # its type in the event contract
    assert ms.core.workers.projector is not None
    assert ms.core.workers.projector.stats.dead_lettered == 5
    # And the session the garbage landed on is still writable (its aggregate passes over it)
    await ms.session("x").append_message(_message(4))
    assert [m["id"] for m in await ms.session("x").get_history()] == ["m00004"]
    # And a rebuild from the log gets past the same poison events to the same read model
    results = await verify(ms.core.log, SqliteCopy(settings.data_dir / "memstream.db"))
    assert [r.projection for r in results] == [*EMBEDDED_VERIFIED]
    assert all(r.ok for r in results), results
    assert {r.seq for r in results} == {await ms.core.log.stream_last_seq()}


@pytest.mark.sqlite_only
async def test_verify_finds_a_read_model_changed_behind_the_projectors_back(
    ms: Memstream, settings: Settings
) -> None:
    # Given a session projected live, and a read model that verifies
    session = ms.session("audited")
    for i in range(5):
        await session.append_message(_message(i))
    await ms.wait_for("sessions")
    database = settings.data_dir / "memstream.db"
    assert all(
        r.ok and r.difference is None for r in await verify(ms.core.log, SqliteCopy(database))
    )
    # When a message row is edited directly in SQLite (not through the log)
    tamper = sqlite3.connect(database, isolation_level=None)
    try:
        tamper.execute("UPDATE messages SET content = '{\"id\":\"forged\"}' WHERE id = 'm00002'")
    finally:
        tamper.close()
    # Then verify reports the sessions read model as different from its rebuild, says where,
    # and the context read model, untouched, still verifies
    sessions, context, _registry, _memory, _analytics = await verify(
        ms.core.log, SqliteCopy(database)
    )
    assert (sessions.projection, sessions.ok, context.ok) == ("sessions", False, True)
    assert sessions.live != sessions.rebuilt
    assert sessions.difference is not None
    assert sessions.difference.part == "messages"
    assert sessions.difference.live is not None
    assert sessions.difference.rebuilt is not None
    assert sessions.difference.live[:6] == ("default", "audited", "m00002", "m00001", "assistant",
                                            '{"id":"forged"}')  # fmt: skip
    assert json.loads(sessions.difference.rebuilt[5]) == _message(2)
    # And a rebuild from the log repairs it
    await rebuild(ms.core.log, SqliteCopy(database))
    assert all(r.ok for r in await verify(ms.core.log, SqliteCopy(database)))
    assert await session.get_message("m00002") == _message(2)
