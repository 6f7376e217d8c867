"""The projector gathers a burst of writes into few transactions, and any reader waiting for
more than is committed, in this process or another, cuts that short; a batch lets the event loop
run between its events, and a projector stopped in the middle of one rolls it back."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

import memstream.local_workers
from memstream.client import Memstream, open_memstream
from memstream.domain.errors import ProjectionLagError
from memstream.projections.registry import MODEL_FREE_PROJECTIONS
from memstream.projections.sql.batches import SqlContextProjection, SqlSessionProjection
from memstream.projections.sqlite.batches import WRITES, Projection
from memstream.projections.sqlite.database import open_database, tracked_seq
from memstream.projections.sqlite.store import SqliteReadModelStore
from memstream.settings import Settings
from memstream.workers.admin.rebuild import verify
from memstream.workers.log.subjects import demand_subject
from memstream.workers.position import Demand, PositionWatch
from memstream.workers.projector import ProjectorWorker
from memstream.workers.service import WorkerConfig, run_worker


def _message(i: int) -> dict[str, object]:
    return {"id": f"m{i}", "role": "user", "content": f"message {i}"}


async def test_a_burst_of_writes_is_committed_in_a_few_batches(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a memstream whose projector lingers up to 2 s
    monkeypatch.setattr(memstream.local_workers, "PROJECTOR_LINGER", 2.0)
    ms = await open_memstream(settings, workers=True)
    try:
        assert ms.core.workers.projector is not None
        session = ms.session("s")
        await session.append_message(_message(0))
        await session.get_history()
        batches = ms.core.workers.projector.stats.batches
        # When 30 messages are appended one by one, nobody reading
        for i in range(1, 31):
            await session.append_message(_message(i))
        # Then a reader gets all of them at once (it cuts the lingering short)
        started = time.monotonic()
        history = await session.get_history()
        assert time.monotonic() - started < 1.5
        assert [m["id"] for m in history] == [f"m{i}" for i in range(31)]
        # And they were committed in a few transactions, not one each
        assert ms.core.workers.projector.stats.batches - batches <= 3
        assert ms.core.workers.projector.stats.applied == 31
    finally:
        await ms.close()


@pytest.fixture
async def lingering(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Memstream, Memstream]]:
    """An owner whose projector lingers up to 10 s, and a client without workers."""
    monkeypatch.setattr(memstream.local_workers, "PROJECTOR_LINGER", 10.0)
    owner = await open_memstream(settings, workers=True)
    guest = await open_memstream(settings, workers=False)
    try:
        yield owner, guest
    finally:
        await guest.close()
        await owner.close()


async def test_a_reader_in_another_process_cuts_the_lingering_short(
    lingering: tuple[Memstream, Memstream],
) -> None:
    # Given an owner whose projector lingers up to 10 s, and a client without workers
    _, guest = lingering
    session = guest.session("s")
    for i in range(3):
        # When the client writes and reads its write
        started = time.monotonic()
        await session.append_message(_message(i))
        history = await session.get_history()
        # Then it waits far less than the linger: it told the owner's projector over NATS
        assert time.monotonic() - started < 3.0
        assert [m["id"] for m in history] == [f"m{j}" for j in range(i + 1)]


async def test_verify_cuts_the_lingering_of_the_projectors_it_waits_for_short(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a memstream whose projector and analytics worker linger far longer than verify
    # waits for them
    monkeypatch.setattr(memstream.local_workers, "PROJECTOR_LINGER", 60.0)
    monkeypatch.setattr(memstream.local_workers, "ANALYTICS_LINGER", 60.0)
    ms = await open_memstream(settings, workers=True)
    try:
        session = ms.session("s")
        for i in range(5):
            await session.append_message(_message(i))
        # When the read models are verified against the log (waiting at most 10 s for them)
        results = await verify(
            ms.core.log, ms.core.reads.copy, list(MODEL_FREE_PROJECTIONS), wait_timeout=10.0
        )
        # Then every projection reached the log's end and equals a rebuild: the wait told
        # the lingering workers to commit
        assert {r.projection for r in results} == set(MODEL_FREE_PROJECTIONS)
        assert all(r.ok for r in results), results
    finally:
        await ms.close()


async def test_a_reader_elsewhere_repeats_what_it_waits_for_at_every_poll() -> None:
    # Given a watch of a projection that never moves, and a record of the reader's signals
    told: list[int] = []

    async def nudge(seq: int, partitions: Mapping[int, int] | None) -> None:
        assert partitions is None  # (a stream without partitions)
        told.append(seq)

    watch = PositionWatch("sessions", lambda: 0, nudge=nudge)
    # When a reader waits for sequence 7 until its timeout
    with pytest.raises(ProjectionLagError):
        await watch.wait_for(7, timeout=0.05)
    # Then it said so more than once (a signal may be lost, or reach nobody yet), and only that
    assert len(told) >= 3
    assert set(told) == {7}


async def test_a_reader_of_partitions_tells_each_the_target_it_is_behind_on() -> None:
    # Given a watch of a partitioned projection whose partition 1 is current, 0 behind
    told: list[tuple[int, dict[int, int] | None]] = []

    async def nudge(seq: int, partitions: Mapping[int, int] | None) -> None:
        told.append((seq, None if partitions is None else dict(partitions)))

    watch = PositionWatch("sessions", lambda: 0, nudge=nudge, read_partitions=lambda: {0: 2, 1: 9})
    # When a reader waits for sequence 9 in partition 1 and 3 in partition 0
    with pytest.raises(ProjectionLagError):
        await watch.wait_for_partitions({0: 3, 1: 9}, 9, timeout=0.05)
    # Then it asked for partition 0's target alone, naming the partition
    assert told
    assert set(map(repr, told)) == {repr((3, {0: 3}))}


async def test_a_reader_next_to_its_projector_waits_for_its_report_without_polling() -> None:
    # Given a watch whose projector runs in this process (it reports each commit)
    reads: list[int] = []
    told: list[int] = []

    def read_position() -> int:
        reads.append(1)
        return 0

    async def nudge(seq: int, partitions: Mapping[int, int] | None) -> None:
        told.append(seq)

    watch = PositionWatch("sessions", read_position, nudge=nudge, pushed=lambda: True)
    # When a reader waits for sequence 3 and the projector reports it 5 ms later
    asyncio.get_running_loop().call_later(0.005, watch.advance, 3)
    await watch.wait_for(3, timeout=5)
    # Then it read the tracking row once (on arrival), polled nothing and nudged nobody
    assert len(reads) == 1
    assert told == []
    # And a report that never comes still ends in the timeout, with a slow poll meanwhile
    with pytest.raises(ProjectionLagError):
        await watch.wait_for(9, timeout=0.05)
    assert 2 <= len(reads) <= 8


async def test_a_projector_ignores_a_demand_signal_that_is_not_a_sequence(
    lingering: tuple[Memstream, Memstream],
) -> None:
    # Given an owner whose projector lingers up to 10 s, and a client without workers
    owner, guest = lingering
    # When garbage arrives on the demand subject
    for junk in (b"", b"abc", b"-", b"9" * 5000, "\u00e9".encode()):
        await guest.core.nats.publish(demand_subject(guest.core.log.stream), junk)
    await guest.core.nats.flush()
    # Then the projector keeps projecting and still hears real readers
    session = guest.session("s")
    started = time.monotonic()
    await session.append_message(_message(0))
    assert [m["id"] for m in await session.get_history()] == ["m0"]
    assert time.monotonic() - started < 3.0
    assert owner.core.workers.projector is not None
    assert owner.core.workers.projector.stats.dead_lettered == 0


def test_demand_presses_while_a_reader_here_or_elsewhere_waits_for_more() -> None:
    demand = Demand()
    assert not demand.pressing(0)
    # A reader here presses until it leaves
    demand.enter()
    assert demand.pressing(10)
    assert demand.event.is_set()
    demand.leave()
    assert not demand.pressing(10)
    # A reader elsewhere presses until its sequence is committed
    demand.event.clear()
    demand.want(12)
    assert demand.event.is_set()
    assert demand.pressing(11)
    assert not demand.pressing(12)
    demand.want(5)  # an older wish does not lower it
    assert demand.wanted == 12


@pytest.mark.sqlite_only
async def test_a_projector_worker_of_its_own_lingers_and_hears_readers_too(
    settings: Settings,
) -> None:
    # Given a separate projector worker (the distributed shape) that lingers up to 10 s
    assert settings.nats_url is not None
    config = WorkerConfig(
        settings.nats_url,
        settings.stream,
        settings.database_path,
        linger=10.0,
        subject_prefix=settings.subject_prefix,
        stream_partitions=settings.stream_partitions,
    )
    settings.database_path.parent.mkdir(parents=True, exist_ok=True)
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker("projector", config, stop))
    client = await open_memstream(settings, workers=False)
    try:
        session = client.session("s")
        # When a client writes 20 messages and then reads them
        for i in range(20):
            await session.append_message(_message(i))
        started = time.monotonic()
        history = await session.get_history()
        # Then its read cut the worker's lingering short
        assert time.monotonic() - started < 3.0
        assert len(history) == 20
    finally:
        await client.close()
        stop.set()
        await worker


class _Halfway(SqlSessionProjection):
    """The session projection, announcing when it has applied ``at`` events."""

    def __init__(self, at: int) -> None:
        super().__init__(WRITES)
        self.at = at
        self.count = 0
        self.reached = asyncio.Event()

    def apply(
        self, connection: sqlite3.Connection, namespace: str, seq: int, event: object
    ) -> None:
        super().apply(connection, namespace, seq, event)
        self.count += 1
        if self.count == self.at:
            self.reached.set()


@pytest.fixture
async def log_of_300(settings: Settings) -> AsyncIterator[Memstream]:
    """A client (no projector) whose log holds 300 appends to session "s"."""
    writer = await open_memstream(settings, workers=False)
    try:
        session = writer.session("s")
        for i in range(300):
            await session.append_message(_message(i))
        yield writer
    finally:
        await writer.close()


def _one_batch_projector(
    writer: Memstream, connection: sqlite3.Connection, projection: Projection, **options: Any
) -> ProjectorWorker:
    """A projector taking the 300 events as one batch (a pull request per batch: all are in
    the log), applied in the event loop unless ``options`` say otherwise."""
    settings = {"standing_pull": False, "thread_bytes": 0, **options}
    return ProjectorWorker(
        writer.core.log,
        SqliteReadModelStore(connection, [projection, SqlContextProjection(WRITES)]),
        demand=Demand(),
        **settings,
    )


async def test_a_batch_lets_others_run_between_its_events_and_an_abandoning_stop_rolls_it_back(
    settings: Settings, log_of_300: Memstream
) -> None:
    # Given 300 appends in the log and a projector that will take them in one batch
    writer = log_of_300
    connection = open_database(settings.database_path)
    halfway = _Halfway(150)
    commits: list[int] = []
    worker = _one_batch_projector(writer, connection, halfway, on_commit=commits.append)
    # When this task runs while the batch is half applied (it can only if the projector
    # lets the event loop run between events), and stops the projector there without
    # letting it finish the batch (drain=0)
    worker.start()
    async with asyncio.timeout(10):
        await halfway.reached.wait()
    before_stop = list(commits)
    await worker.stop(drain=0)
    # Then nothing of the batch was committed, and no transaction is left open. (A loaded
    # server may answer the pull with a shorter first batch, committed before event 150:
    # then only that batch is in the read model.)
    assert halfway.count < 300
    assert not connection.in_transaction
    assert commits == before_stop
    committed = commits[-1] if commits else 0
    assert committed < 150
    assert tracked_seq(connection, "sessions") == committed
    assert connection.execute("SELECT count(*) FROM messages").fetchone()[0] == committed
    connection.close()
    # And a projector started again applies every event once
    connection = open_database(settings.database_path)
    caught_up = asyncio.Event()

    def committed(seq: int) -> None:
        if seq >= 300:
            caught_up.set()

    again = ProjectorWorker(
        writer.core.log, SqliteReadModelStore(connection), demand=Demand(), on_commit=committed
    )
    again.start()
    try:
        async with asyncio.timeout(10):
            await caught_up.wait()
        assert again.stats.applied == 300
        rows = connection.execute("SELECT count(*), count(DISTINCT id) FROM messages")
        assert rows.fetchone() == (300, 300)
    finally:
        await again.stop()
        connection.close()


async def test_a_clean_stop_commits_the_batch_in_hand(
    settings: Settings, log_of_300: Memstream
) -> None:
    # Given 300 appends in the log and a projector half way through them in one batch
    connection = open_database(settings.database_path)
    halfway = _Halfway(150)
    worker = _one_batch_projector(log_of_300, connection, halfway)
    worker.start()
    async with asyncio.timeout(10):
        await halfway.reached.wait()
    # When it is stopped cleanly (the default drain)
    await worker.stop()
    # Then what it had received is projected before it stopped
    assert not connection.in_transaction
    assert tracked_seq(connection, "sessions") == 300
    assert connection.execute("SELECT count(*) FROM messages").fetchone()[0] == 300
    connection.close()


class _SlowInThread(SqlSessionProjection):
    """The session projection, announcing its first event and then taking its time."""

    def __init__(self) -> None:
        super().__init__(WRITES)
        self.started = threading.Event()

    def apply(
        self, connection: sqlite3.Connection, namespace: str, seq: int, event: object
    ) -> None:
        self.started.set()
        time.sleep(0.002)
        super().apply(connection, namespace, seq, event)


async def test_a_stop_during_a_batch_applied_in_a_thread_lets_it_end_first(
    settings: Settings, log_of_300: Memstream
) -> None:
    # Given 300 appends in the log and a projector that applies every batch in a worker thread
    connection = open_database(settings.database_path)
    slow = _SlowInThread()
    worker = _one_batch_projector(
        log_of_300, connection, slow, thread_bytes=1, thread_events=10_000
    )
    worker.start()
    assert await asyncio.to_thread(slow.started.wait, 10)
    # When it is stopped without draining while the thread is in the middle of the batch
    await worker.stop(drain=0)
    # Then the stop returned only after the thread's transaction ended (committed), so the
    # connection can be closed and nothing is left half done
    assert not connection.in_transaction
    seq = tracked_seq(connection, "sessions")
    assert seq > 0
    assert connection.execute("SELECT count(*) FROM messages").fetchone()[0] == seq
    connection.close()
