"""The projector's ways of reading its consumer and applying batches build the same read model:
standing pull requests with deferred acks (the default) or nats-py's request-per-batch path;
batches applied in the event loop or in a worker thread."""

from __future__ import annotations

import asyncio
import logging
import signal
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest
from support.deployment import deployment_env
from support.processes import freeze, script_json

from memstream.client import Memstream, open_memstream
from memstream.projections.ports import ProjectorStats, ReadModelStore
from memstream.projections.sqlite.checksum import checksum
from memstream.projections.sqlite.database import open_database
from memstream.projections.sqlite.store import SqliteReadModelStore
from memstream.session import Session
from memstream.settings import Settings
from memstream.workers import own_writes as own_writes_module
from memstream.workers.log.event_log import EventLog
from memstream.workers.log.nats_client import MemstreamNatsClient
from memstream.workers.own_writes import HOLD_SECONDS
from memstream.workers.position import Demand
from memstream.workers.projector import ProjectorWorker
from memstream.workers.runtime.nats_server import NatsServerProcess, free_port

SESSION_PROCESS = Path(__file__).resolve().parents[1] / "support" / "session_process.py"


async def turn(session: Session, message_id: str, text: str | None = None) -> list[Any]:
    """One step of an agent loop: append a message, then read the history."""
    await session.append_message({"id": message_id, "role": "user", "content": text or message_id})
    return await session.get_history()


def copy_projector(
    log: EventLog, store: ReadModelStore, last: int, **options: Any
) -> tuple[ProjectorWorker, asyncio.Event]:
    """A projector of the log into the read-model copy ``store``, and an event set once it
    has committed ``last``."""
    reached = asyncio.Event()
    worker = ProjectorWorker(
        log,
        store,
        on_commit=lambda seq: reached.set() if seq >= last else None,
        **options,
    )
    return worker, reached


async def run_until(
    worker: ProjectorWorker, reached: asyncio.Event, meanwhile: Awaitable[None] | None = None
) -> None:
    """Run ``worker`` (and ``meanwhile``) until ``reached`` is set, then stop it."""
    worker.start()
    try:
        if meanwhile is not None:
            await meanwhile
        async with asyncio.timeout(30):
            await reached.wait()
    finally:
        await worker.stop()


async def live_and_rebuilt(
    writer: Memstream, names: tuple[str, ...], **options: Any
) -> tuple[dict[str, str], dict[str, str], int, ProjectorWorker]:
    """Checksums of ``names`` in the writer's read model (once it has the whole log) and in a
    scratch copy of the same backend projected from the log alone by a projector made with
    ``options``; the writer's message count (the copies' checksums cover their messages), and
    that projector."""
    projector = writer.core.workers.projector
    assert projector is not None
    await writer.sync("sessions")
    live = {name: projector.store.checksum(name) for name in names}
    scratch = writer.core.reads.copy.scratch()
    try:
        last = await writer.core.log.stream_last_seq()
        worker, reached = copy_projector(writer.core.log, scratch, last, **options)
        await run_until(worker, reached)
        rebuilt = {name: scratch.checksum(name) for name in names}
    finally:
        scratch.close()
    sessions = writer.core.reads.read_models.sessions.sessions(writer.namespace)
    return live, rebuilt, sum(int(s["messages"]) for s in sessions), worker


async def committed_messages(settings: Settings, session_id: str) -> tuple[int, int]:
    """The messages of ``session_id`` and the sessions position that another connection to
    the read model reads now (committed rows only), without waiting for anything."""
    other = await open_memstream(settings, workers=False)
    try:
        models = other.core.reads.read_models
        return (
            models.sessions.message_count(other.namespace, session_id),
            models.tracked_seq("sessions"),
        )
    finally:
        await other.close()


async def test_every_way_of_consuming_and_applying_builds_the_same_read_model(
    settings: Settings, tmp_path: Path
) -> None:
    # Given a log with branches, updates, deletes, a compaction and context writes
    writer = await open_memstream(settings, workers=True)
    try:
        for s in range(5):
            session = writer.session(f"s{s}").with_context("memory", description="Facts")
            for i in range(40):
                await session.append_message(
                    {"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"t {i}"}]}
                )
            await session.append_message({"id": "b", "role": "user", "content": "x"}, "m10")
            await session.update_message({"id": "m3", "role": "user", "content": "edited"})
            await session.delete_messages(["m5"])
            await session.add_compaction("summary", "m0", "m4")
            await session.replace_context_block("memory", f"fact {s}")
        last = writer.core.ryw.last_write_seq
        sums = {}
        # (standing pulls, thread for batches of at least N bytes): the default, the stock
        # path applying in the event loop only, and every batch in a thread
        for standing, thread_bytes in ((True, None), (False, 0), (True, 1)):
            # When a projector of each kind builds its own copy from the log
            connection = open_database(tmp_path / f"copy-{standing}-{thread_bytes}.db")
            worker, reached = copy_projector(
                writer.core.log,
                SqliteReadModelStore(connection),
                last,
                demand=Demand(),
                linger=0.01,
                standing_pull=standing,
                thread_bytes=thread_bytes,
                thread_events=10_000,
            )
            await run_until(worker, reached)
            sums[standing, thread_bytes] = {
                name: checksum(connection, name) for name in ("sessions", "context", "registry")
            }
            # (each copy holds the 5 sessions: 40 + 1 branch - 1 deleted messages each)
            assert connection.execute("SELECT count(*) FROM messages").fetchone()[0] == 200
            connection.close()
        # Then every copy is the same
        assert sums[True, None] == sums[False, 0] == sums[True, 1]
    finally:
        await writer.close()


@pytest.mark.both_backends
@pytest.mark.parametrize(
    ("overlap", "write_early"),
    [(True, True), (True, False), (False, True)],
    ids=["during-the-round-trip", "during-it-nats-py-flusher", "after-the-ack"],
)
async def test_reads_that_apply_their_own_writes_build_the_same_read_model(
    settings: Settings, tmp_path: Path, overlap: bool, write_early: bool
) -> None:
    # Given a client whose projector runs in its process, applying its own writes while their
    # acknowledgement is on its way (its own write to the socket, or nats-py's flusher task
    # writing the request), or only after it; and a client without workers that writes to
    # the same log now and then
    writer = await open_memstream(settings, workers=True)
    other = await open_memstream(settings, workers=False)
    try:
        projector = writer.core.workers.projector
        assert projector is not None
        writer.core.own.overlap_writes = overlap
        assert isinstance(writer.core.nats, MemstreamNatsClient)
        writer.core.nats.write_early = write_early
        # When the first client reads each session's history after each of its writes (an
        # agent loop), with the other's writes falling in between its own
        for s in range(3):
            session = writer.session(f"s{s}").with_context("memory", description="Facts")
            for i in range(30):
                text = {"type": "text", "text": f"turn {i} of {s}"}
                await session.append_message({"id": f"m{i}", "role": "user", "parts": [text]})
                if i % 7 == 3:
                    await other.session(f"o{s}").append_message(
                        {"id": f"m{i}", "role": "user", "content": f"other {i}"}
                    )
                assert (await session.get_history())[-1]["id"] == f"m{i}"
            await session.append_messages(
                [{"id": f"b{i}", "role": "assistant", "content": f"batch {i}"} for i in range(5)]
            )
            await session.update_message({"id": "m3", "role": "user", "content": "edited"})
            await session.delete_messages(["m5"])
            await session.replace_context_block("memory", f"fact {s}")
            history = await session.get_history()
            assert [m["id"] for m in history][-6:] == ["m29", "b0", "b1", "b2", "b3", "b4"]
            assert len(history) == 29  # m5 deleted: the path runs from m6 (35 - 6)
            assert "fact" in await session.freeze_system_prompt()
        # Then most of its reads had its own writes applied at once (not all: the other
        # client's writes come between some of them and the projector's position), during
        # the writes' round trips if so chosen
        assert projector.own_batches >= 60, projector.own_batches
        if overlap:
            assert writer.core.own.overlapped_writes >= 50, (
                writer.core.own.overlapped_writes,
                writer.core.own.missed_overlaps,
            )
        else:
            assert writer.core.own.overlapped_writes == writer.core.own.missed_overlaps == 0
        # And a projector that reads every event from the log builds the same read model
        ours, rebuilt, _, worker = await live_and_rebuilt(
            writer,
            ("sessions", "context", "registry"),
            standing_pull=False,
            thread_bytes=0,
        )
        assert worker.own_batches == 0
        assert rebuilt == ours
        deadline = time.monotonic() + 10
        while projector.stats.skipped < projector.own_batches:  # their deliveries: passed over
            assert time.monotonic() < deadline, projector.stats
            await asyncio.sleep(0.01)
    finally:
        await other.close()
        await writer.close()


@pytest.mark.parametrize("reuse", [True, False], ids=["own-events-reused", "all-decoded"])
async def test_own_events_applied_as_decided_build_the_same_read_model(
    settings: Settings, reuse: bool
) -> None:
    # Given a client whose projector runs in its process, taking its own events as decided
    # (or decoding every delivery, the switch back)
    writer = await open_memstream(settings, workers=True)
    try:
        projector = writer.core.workers.projector
        assert projector is not None
        writer.core.own.reuse_own_events = reuse
        # When it writes a burst of every kind of session event, reading nothing in between
        # (the projector applies them from its deliveries)
        for s in range(3):
            session = writer.session(f"s{s}").with_context("memory", description="Facts")
            for i in range(20):
                text = {"type": "text", "text": f"turn {i} of {s}"}
                await session.append_message({"id": f"m{i}", "role": "user", "parts": [text]})
            await session.append_messages(
                [{"id": f"b{i}", "role": "assistant", "content": f"batch {i}"} for i in range(5)]
            )
            await session.update_message({"id": "m3", "role": "user", "content": "edited"})
            await session.delete_messages(["m5"])
            await session.replace_context_block("memory", f"fact {s}")
        manager = writer.session_manager()
        await manager.rename((await manager.create("Named"))["id"], "Renamed")
        await writer.wait_for("sessions")
        # Then the deliveries of its own events were applied as decided (or all decoded): at
        # least the first session's appends (the reads of the later commands apply the events
        # before them for the reader, which then skips their deliveries)
        if reuse:
            assert projector.reused_events >= 20, projector.reused_events
        else:
            assert projector.reused_events == 0
        # And a projector that decodes every event from the log builds the same read model
        ours, rebuilt, _, worker = await live_and_rebuilt(
            writer, ("sessions", "context", "registry"), standing_pull=False, thread_bytes=0
        )
        assert worker.reused_events == 0
        assert rebuilt == ours
    finally:
        await writer.close()


async def test_a_batch_that_meets_a_locked_database_is_retried_and_logged_once_briefly(
    settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a log of 20 writes and a projector whose database another connection holds locked
    writer = await open_memstream(settings, workers=False)
    try:
        session = writer.session("s")
        for i in range(20):
            await session.append_message({"id": f"m{i}", "role": "user", "content": f"t {i}"})
        last = writer.core.ryw.last_write_seq
        connection = open_database(tmp_path / "copy.db")
        connection.execute("PRAGMA busy_timeout = 50")
        blocker = sqlite3.connect(tmp_path / "copy.db", isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        worker, reached = copy_projector(writer.core.log, SqliteReadModelStore(connection), last)
        caplog.set_level(logging.WARNING, logger="memstream.workers.projector")

        async def release_later() -> None:
            # When the lock is held for a few retries, then released
            await asyncio.sleep(0.4)
            assert not reached.is_set()
            blocker.execute("ROLLBACK")

        try:
            await run_until(worker, reached, release_later())
        finally:
            blocker.close()
        # Then the first failure is one warning line naming the error (no traceback), later
        # ones are errors with their traceback, and nothing was lost
        failures = [r for r in caplog.records if "batch failed" in r.getMessage()]
        assert failures[0].levelno == logging.WARNING
        assert failures[0].exc_info is None
        assert "OperationalError: database is locked" in failures[0].getMessage()
        assert len(failures) >= 2
        assert all(r.levelno == logging.ERROR and r.exc_info for r in failures[1:])
        assert worker.stats.transient_failures == len(failures)
        assert connection.execute("SELECT count(*) FROM messages").fetchone()[0] == 20
        connection.close()
    finally:
        await writer.close()


@pytest.mark.both_backends
async def test_concurrent_agent_loops_applying_their_own_writes_match_a_rebuild(
    settings: Settings, tmp_path: Path
) -> None:
    # Given a client whose projector runs in its process
    writer = await open_memstream(settings, workers=True)
    try:
        projector = writer.core.workers.projector
        assert projector is not None

        async def loop(s: int) -> None:
            session = writer.session(f"c{s}")
            for i in range(25):
                await session.append_message({"id": f"m{i}", "role": "user", "content": f"{s}.{i}"})
                history = await session.get_history()
                assert [m["id"] for m in history] == [f"m{n}" for n in range(i + 1)]

        # When eight agent loops run at once in it (their acks and reads interleave)
        await asyncio.gather(*(loop(s) for s in range(8)))
        # Then a projector that reads every event from the log builds the same read model
        ours, rebuilt, messages, _ = await live_and_rebuilt(writer, ("sessions", "registry"))
        assert rebuilt == ours
        assert messages == 200
        assert projector.own_batches > 0, "no read applied its own writes"
    finally:
        await writer.close()


@pytest.mark.both_backends
async def test_own_writes_applied_beside_another_process_writing_match_a_rebuild(
    settings: Settings, tmp_path: Path
) -> None:
    # Given a client whose projector runs in its process, and another OS process that appends
    # to the same log a message every few milliseconds meanwhile
    writer = await open_memstream(settings, workers=True)
    try:
        projector = writer.core.workers.projector
        assert projector is not None
        other = asyncio.create_task(
            asyncio.to_thread(
                script_json,
                SESSION_PROCESS,
                "trickle",
                str(settings.nats_url),
                settings.stream,
                str(settings.data_dir),
                "elsewhere",
                "150",
                env=deployment_env(settings),
            )
        )
        elsewhere = writer.core.commands.session_subject("elsewhere")
        deadline = time.monotonic() + 60
        while not await writer.core.log.last_seq(elsewhere):  # the other process has started
            assert time.monotonic() < deadline
            assert not other.done()
            await asyncio.sleep(0.01)
        # When this client runs an agent loop (append, then read the history) meanwhile
        session = writer.session("here")
        seqs = []
        for i in range(120):
            message = {"id": f"m{i}", "role": "user", "content": f"turn {i}"}
            seqs.append(await session.append_message(message))
            assert (await session.get_history())[-1]["id"] == f"m{i}"
            await asyncio.sleep(0.002)
        assert (await other)["appended"] == 150
        assert seqs[-1] - seqs[0] + 1 > len(seqs)  # the other's writes fell between ours
        await writer.sync("sessions")
        # Then both sessions are whole, and the copy equals one built from the log alone
        assert len(await writer.session("elsewhere").get_history()) == 150
        ours, rebuilt, messages, _ = await live_and_rebuilt(writer, ("sessions", "registry"))
        assert rebuilt == ours
        assert messages == 270
        assert projector.own_batches > 0, "no read applied its own writes"
    finally:
        await writer.close()


@pytest.mark.both_backends
async def test_a_failed_apply_for_a_reader_leaves_the_events_to_their_delivery(
    settings: Settings,
) -> None:
    # Given a client whose projector runs in its process, whose store fails the next batches
    # applied for readers (as a locked or full disk would)
    writer = await open_memstream(settings, workers=True)
    try:
        projector = writer.core.workers.projector
        assert projector is not None
        store = projector.store
        transaction = store.transaction
        failures = 0

        def failing(*args: Any, **kwargs: Any) -> Any:
            nonlocal failures
            # (only events applied for this process's writer use it: deliveries step)
            if failures < 3:
                failures += 1
                raise sqlite3.OperationalError("disk I/O error")
            return transaction(*args, **kwargs)

        store.transaction = failing  # type: ignore[method-assign]
        session = writer.session("s")
        # When it appends and reads
        for i in range(5):
            await session.append_message({"id": f"m{i}", "role": "user", "content": f"t {i}"})
            history = await session.get_history()
            # Then every read still sees its write (the delivery applied it), once
            assert [m["id"] for m in history] == [f"m{n}" for n in range(i + 1)]
        assert failures == 3
        # (the last two writes at least were applied for their reader again)
        assert projector.own_batches >= 2
        assert projector.stats.dead_lettered == 0
    finally:
        await writer.close()


@pytest.mark.both_backends
@pytest.mark.parametrize("where", ["another-session", "the-same-session"])
async def test_a_write_whose_sequence_another_writer_took_rolls_its_projection_back(
    settings: Settings, tmp_path: Path, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(own_writes_module, "GROUP_SECONDS", 30.0)  # kept until a batch or close
    # Given a client whose projector applies its writes during their round trips (it read
    # after its last write), and another client on its own event loop in another thread
    writer = await open_memstream(settings, workers=True)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    other = asyncio.run_coroutine_threadsafe(open_memstream(settings, workers=False), loop).result(
        30
    )
    try:
        projector = writer.core.workers.projector
        assert projector is not None
        session = writer.session("s")
        await turn(session, "m0", "first")
        # (one write kept in the projector's open transaction, not committed yet)
        await session.append_message({"id": "k", "role": "user", "content": "kept"})
        await session.get_history()
        assert writer.core.own.overlapped_writes == 1
        assert projector.committed > writer.core.ryw.positions["sessions"].position
        client = writer.core.nats
        assert isinstance(client, MemstreamNatsClient)
        overlapped = client.request_overlapped
        target = "s" if where == "the-same-session" else "o"

        async def another_first(*args: Any, **kwargs: Any) -> Any:
            # The other client's event is stored just before this one's, while this event
            # loop is blocked: this projector cannot have seen it when it applies this write
            asyncio.run_coroutine_threadsafe(
                other.session(target).append_message(
                    {"id": "x", "role": "user", "content": "in between"}
                ),
                loop,
            ).result(10)
            return await overlapped(*args, **kwargs)

        client.request_overlapped = another_first  # type: ignore[method-assign]
        # When it writes, and another event takes the sequence its projection assumed
        await session.append_message({"id": "m1", "role": "user", "content": "second"})
        client.request_overlapped = overlapped  # type: ignore[method-assign]
        # Then that projection was rolled back (the kept write applied and committed again), and
        # the writes and the other's are read whole
        assert (writer.core.own.missed_overlaps, writer.core.own.overlapped_writes) == (1, 1)
        expected = ["m0", "k", "x", "m1"] if target == "s" else ["m0", "k", "m1"]
        assert [m["id"] for m in await session.get_history()] == expected
        # And after one write that does not try, its writes overlap again
        for i in range(2, 6):
            assert (await turn(session, f"m{i}"))[-1]["id"] == f"m{i}"
        assert writer.core.own.overlapped_writes == 4
        assert [m["id"] for m in await writer.session("o").get_history()] == (
            ["x"] if target == "o" else []
        )
        # And the read model equals one built from the log alone
        ours, rebuilt, messages, _ = await live_and_rebuilt(writer, ("sessions", "registry"))
        assert rebuilt == ours
        assert messages == 8
    finally:
        asyncio.run_coroutine_threadsafe(other.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        await writer.close()


async def test_a_write_whose_acknowledgement_is_slow_rolls_its_projection_back_in_time(
    tmp_path: Path,
) -> None:
    # Given a client on a server we can freeze, whose projector applies its writes during
    # their round trips (it read after its last write)
    server = NatsServerProcess.start(tmp_path / "store", port=free_port())
    settings = Settings(data_dir=tmp_path / "data", nats_url=server.url, stream="SLOW")
    writer = await open_memstream(settings, workers=True)
    try:
        projector = writer.core.workers.projector
        assert projector is not None
        session = writer.session("s")
        await turn(session, "m0", "first")
        # When the server stops answering for a second while a write waits for its ack
        freeze(server.process)
        write = asyncio.create_task(
            session.append_message({"id": "m1", "role": "user", "content": "second"})
        )
        await asyncio.sleep(0.3)
        # Then its projection was rolled back after HOLD_SECONDS: the projector's store is
        # free for batches and readers again, and nothing of the write is in the read model
        assert HOLD_SECONDS < 0.3
        assert not write.done()
        assert projector.idle_store() is not None
        assert (writer.core.own.missed_overlaps, writer.core.own.overlapped_writes) == (1, 0)
        connection = sqlite3.connect(settings.data_dir / "memstream.db")
        try:
            assert connection.execute("SELECT count(*) FROM messages").fetchone() == (1,)
        finally:
            connection.close()
        server.process.send_signal(signal.SIGCONT)
        # And once the server answers, the write completes and is read whole, once
        await asyncio.wait_for(write, 10)
        assert [m["id"] for m in await session.get_history()] == ["m0", "m1"]
    finally:
        server.process.send_signal(signal.SIGCONT)
        await writer.close()
        server.stop()


@pytest.mark.both_backends
async def test_an_agent_loop_commits_its_writes_in_groups_that_other_readers_see_soon(
    settings: Settings, tmp_path: Path
) -> None:
    # Given a client whose projector keeps its acknowledged writes in an open transaction, and
    # a client without workers (reading through its own connection: committed rows only)
    writer = await open_memstream(settings, workers=True)
    reader = await open_memstream(settings, workers=False)
    try:
        projector = writer.core.workers.projector
        assert projector is not None
        session = writer.session("s")
        await turn(session, "m0")
        batches = projector.stats.batches
        # When it appends and reads 40 times in a row
        for i in range(1, 41):
            assert (await turn(session, f"m{i}"))[-1]["id"] == f"m{i}"
        # Then every read saw its write, while the writes were committed several at a time
        assert writer.core.own.overlapped_writes == 40
        assert projector.stats.batches - batches < 40
        # And another client sees all of them within moments (the open one is committed soon)
        started = time.monotonic()
        await reader.sync("sessions")
        history = await reader.session("s").get_history()
        assert [m["id"] for m in history] == [f"m{i}" for i in range(41)]
        assert time.monotonic() - started < 2
        # And the read model equals one built from the log alone
        ours, rebuilt, messages, _ = await live_and_rebuilt(writer, ("sessions", "registry"))
        assert rebuilt == ours
        assert messages == 41
    finally:
        await reader.close()
        await writer.close()


@pytest.mark.both_backends
async def test_a_write_kept_in_the_open_transaction_is_committed_when_the_client_closes(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(own_writes_module, "GROUP_SECONDS", 30.0)  # kept until a batch or close
    # Given a client whose last write is kept in its projector's open transaction
    writer = await open_memstream(settings, workers=True)
    session = writer.session("s")
    await turn(session, "m0")
    await session.append_message({"id": "m1", "role": "user", "content": "t 1"})
    projector = writer.core.workers.projector
    assert projector is not None
    assert projector.committed > writer.core.ryw.positions["sessions"].position
    # When the client closes at once
    await writer.close()
    # Then the read model holds the write, committed
    assert await committed_messages(settings, "s") == (2, projector.committed)


@pytest.fixture
async def keeping(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Memstream]:
    """A client whose acknowledged own writes stay in its projector's open transaction: no
    timer (30 s) or size limit (10,000 events) commits them during a test."""
    monkeypatch.setattr(own_writes_module, "GROUP_SECONDS", 30.0)
    monkeypatch.setattr(own_writes_module, "GROUP_EVENTS", 10_000)
    writer = await open_memstream(settings, workers=True)
    try:
        yield writer
    finally:
        await writer.close()


@pytest.mark.both_backends
async def test_a_reader_in_another_process_gets_writes_kept_open_here_at_once(
    settings: Settings, keeping: Memstream
) -> None:
    # Given a client running an agent loop whose acknowledged writes stay in its projector's
    # open transaction (and no delivered batch before 30 s), unless someone asks for them
    writer = keeping
    projector = writer.core.workers.projector
    assert projector is not None
    projector.linger = 30.0
    session = writer.session("here")
    await turn(session, "m0")
    for i in range(1, 21):
        await turn(session, f"m{i}")
    assert projector.committed > writer.core.ryw.positions["sessions"].position  # kept open
    # When a new process connects and reads that session while the loop goes on
    reader = asyncio.ensure_future(
        asyncio.to_thread(
            script_json,
            SESSION_PROCESS,
            "read",
            str(settings.nats_url),
            settings.stream,
            str(settings.data_dir),
            "here",
            settings.database_url or "",
            env=deployment_env(settings),
        )
    )
    i = 21
    while not reader.done():
        await turn(session, f"m{i}")
        await asyncio.sleep(0.005)
        i += 1
    seen = await reader
    # Then it saw every write the log held when it connected, without waiting 30 s for the
    # open transaction's commit (its wait asked this projector for them)
    assert seen["ids"] == [f"m{n}" for n in range(len(seen["ids"]))]
    assert len(seen["ids"]) >= 21
    assert seen["read_seconds"] < 5, seen


@pytest.mark.both_backends
async def test_wait_for_commits_the_own_writes_it_waits_for(
    settings: Settings, keeping: Memstream
) -> None:
    # Given a client whose last write is kept in its projector's open transaction
    writer = keeping
    session = writer.session("s")
    await turn(session, "m0")
    await session.append_message({"id": "m1", "role": "user", "content": "t 1"})
    projector = writer.core.workers.projector
    assert projector is not None
    assert projector.committed > writer.core.ryw.positions["sessions"].position
    # When it waits for the sessions read model (a public wait means committed)
    started = time.monotonic()
    await writer.wait_for("sessions")
    assert time.monotonic() - started < 1
    # Then the write is committed: another connection to the read model reads it at once
    assert writer.core.ryw.positions["sessions"].position == projector.committed
    assert await committed_messages(settings, "s") == (2, projector.committed)


@pytest.mark.sqlite_only
async def test_the_event_loop_never_waits_for_another_connections_write_lock(
    ms: Memstream, settings: Settings
) -> None:
    # Given a client whose projector applies its writes on the event loop, reading after
    # each write (so it also applies its own writes for its reads)
    session = ms.session("s")
    await turn(session, "m0")
    projector = ms.core.workers.projector
    assert projector is not None
    worst = 0.0
    beating = True

    async def heartbeat() -> None:
        nonlocal worst
        last = time.perf_counter()
        while beating:
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            worst = max(worst, now - last - 0.005)
            last = now

    # When another connection (another process's worker, a thread) holds the write lock
    blocker = sqlite3.connect(settings.database_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    beat = asyncio.create_task(heartbeat())
    try:
        for i in range(1, 21):
            await session.append_message({"id": f"m{i}", "role": "user", "content": f"t {i}"})
        read = asyncio.create_task(session.get_history())
        await asyncio.sleep(0.5)
        # Then writes are acknowledged and the loop keeps running (it never sleeps in SQLite's
        # busy handler: the batch waits for the lock in a thread), and no read sees a partial
        # projection
        assert not read.done()
        assert worst < 0.25, worst
        assert projector.busy_batches >= 1
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        beating = False
        await beat
    # And once the lock is free, everything is projected and read
    history = await asyncio.wait_for(read, 10)
    assert [m["id"] for m in history] == [f"m{i}" for i in range(21)]
    assert [m["id"] for m in await session.get_history()] == [f"m{i}" for i in range(21)]


@pytest.mark.both_backends
async def test_reads_here_see_writes_kept_open_that_other_connections_do_not_see_yet(
    settings: Settings, keeping: Memstream
) -> None:
    # Given a client whose acknowledged writes stay in its projector's open transaction
    writer = keeping
    projector = writer.core.workers.projector
    assert projector is not None
    # (and no delivered batch commits them for 30 s: another client's open takes a while)
    projector.linger = 30.0
    session = writer.session("s")
    await turn(session, "m0")
    # When it appends and reads
    history = await turn(session, "m1")
    # Then its read went through the projector's transaction, which has the write
    assert [m["id"] for m in history] == ["m0", "m1"]
    assert writer.core.reads.read_models.lent()
    assert projector.committed > writer.core.ryw.positions["sessions"].position
    # And another connection does not see it yet (nothing uncommitted leaks)
    count, tracked = await committed_messages(settings, "s")
    assert tracked < projector.committed
    assert count < 2


async def test_a_consumer_a_little_behind_its_read_model_is_bound_again_as_it_is(
    settings: Settings, tmp_path: Path
) -> None:
    # Given a projector that projected a log of 10 writes into a copy, and stopped
    writer = await open_memstream(settings, workers=False)
    try:
        session = writer.session("s")
        for i in range(10):
            await session.append_message({"id": f"m{i}", "role": "user", "content": f"t {i}"})
        first = writer.core.ryw.last_write_seq
        store = SqliteReadModelStore(open_database(tmp_path / "copy.db"))
        worker, reached = copy_projector(writer.core.log, store, first)
        await run_until(worker, reached)
        js, stream = writer.core.log.js, writer.core.log.stream
        created = (await js.consumer_info(stream, worker.durable)).created
        # When 3 more writes are committed to the copy but never acknowledged to the consumer
        # (a process that died between its commit and its ack)
        for i in range(10, 13):
            await session.append_message({"id": f"m{i}", "role": "user", "content": f"t {i}"})
        subject = writer.core.commands.session_subject("s")
        kept = [e async for e in writer.core.log.read_subject(subject, after_seq=first)]
        assert store.apply(kept, ProjectorStats()) == writer.core.ryw.last_write_seq
        # Then the next projector binds the same consumer (not made anew), passes over what
        # it delivers again, and goes on from there
        for i in range(13, 15):
            await session.append_message({"id": f"m{i}", "role": "user", "content": f"t {i}"})
        again, reached = copy_projector(writer.core.log, store, writer.core.ryw.last_write_seq)
        await run_until(again, reached)
        assert (await js.consumer_info(stream, again.durable)).created == created
        assert again.stats.skipped == 3
        assert again.stats.applied == 2
        assert store.positions()["sessions"] == writer.core.ryw.last_write_seq
        store.close()
    finally:
        await writer.close()
