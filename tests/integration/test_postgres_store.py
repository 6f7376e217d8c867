"""The PostgreSQL store's transactions against a real server: batches with their positions in
one commit, redeliveries skipped, failing events retried then dead-lettered, rollbacks, drops
and rewinds, versions, busy and lost connections."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator

import psycopg
import pytest
from contract.test_read_model_store import _conversation, _failing_third, _fields, _Undecodable
from support.events import RecordedLog, every_event
from support.messages import ids, msg
from support.postgres import create_database, drop_database

from memstream.domain.errors import UnavailableError
from memstream.projections.ports import MAX_ATTEMPTS, ProjectorStats, ReadModelRewound, StoreBusy
from memstream.projections.postgres.connection import connect
from memstream.projections.postgres.context_queries import PgContextQueries
from memstream.projections.postgres.memory_queries import PgMemoryQueries
from memstream.projections.postgres.registry_queries import PgRegistryQueries
from memstream.projections.postgres.session_queries import PgSessionQueries
from memstream.projections.postgres.store import PostgresReadModelStore
from memstream.projections.registry import PROJECTOR_PROJECTIONS, VERSIONS
from memstream.projections.tracking import TrackingRows

pytestmark = pytest.mark.postgres
NS = "default"
AT_ZERO = dict.fromkeys(PROJECTOR_PROJECTIONS, 0)


@pytest.fixture
def store(postgres_url: str) -> Iterator[PostgresReadModelStore]:
    store = PostgresReadModelStore(postgres_url, long_lived=True)
    yield store
    store.close()


@pytest.fixture
def reads(postgres_url: str, store: PostgresReadModelStore) -> Iterator[psycopg.Connection]:
    connection = connect(postgres_url, autocommit=True)
    yield connection
    connection.close()


def test_a_batch_is_applied_with_its_positions_in_one_commit(
    store: PostgresReadModelStore, reads: psycopg.Connection
) -> None:
    assert store.positions() == AT_ZERO
    stats = ProjectorStats()
    assert store.apply(_conversation(RecordedLog()), stats) == 3
    assert store.positions() == dict.fromkeys(PROJECTOR_PROJECTIONS, 3)
    assert (stats.batches, stats.applied, stats.skipped) == (1, 3, 0)
    assert ids(PgSessionQueries(reads).history(NS, "s")) == ["m1", "m2", "m3"]


def test_every_event_type_is_applied(
    store: PostgresReadModelStore, reads: psycopg.Connection
) -> None:
    entries = RecordedLog().record(every_event())
    stats = ProjectorStats()
    assert store.apply(entries, stats) == len(entries)
    assert stats.dead_lettered == 0
    assert store.dead_letters() == []
    context = PgContextQueries(reads)
    assert context.block_content(NS, "notes", "s") == "some notes"
    assert context.search_entries(NS, "kb", "entry", 5) == [("k1", "an entry")]
    assert PgRegistryQueries(reads).count(NS) == 0  # created, then deleted
    assert PgMemoryQueries(reads).exists(NS, "alice") is False  # created, then deleted
    assert PgSessionQueries(reads).message_count(NS, "s") == 0  # cleared


def test_redelivered_sequences_are_skipped(
    store: PostgresReadModelStore, reads: psycopg.Connection
) -> None:
    entries = _conversation(RecordedLog(), count=6)
    stats = ProjectorStats()
    assert store.apply(entries[:4], stats) == 4
    assert store.apply(entries[:4], stats) == 4
    assert (stats.applied, stats.skipped) == (4, 4)
    assert store.apply(entries[2:], stats) == 6
    assert (stats.applied, stats.skipped) == (6, 6)
    assert ids(PgSessionQueries(reads).history(NS, "s")) == [f"m{i}" for i in range(1, 7)]


def test_a_failing_batch_leaves_no_rows_then_its_event_becomes_a_dead_letter(
    store: PostgresReadModelStore, reads: psycopg.Connection
) -> None:
    batch = _failing_third()
    stats = ProjectorStats()
    for attempt in range(1, MAX_ATTEMPTS):
        with pytest.raises(RuntimeError):
            store.apply(batch, stats)
        assert store.positions() == AT_ZERO
        assert PgSessionQueries(reads).history(NS, "s") == []
        assert stats.attempts == {3: attempt}
    assert store.apply(batch, stats) == 4
    assert store.positions() == dict.fromkeys(PROJECTOR_PROJECTIONS, 4)
    assert ids(PgSessionQueries(reads).history(NS, "s", "m4")) == ["m4"]  # its parent was m3
    letters = store.dead_letters()
    assert [(d["projection"], d["seq"]) for d in letters] == [
        (name, 3) for name in sorted(PROJECTOR_PROJECTIONS)
    ]
    assert {d["topic"] for d in letters} == {"session.message_appended"}
    assert stats.dead_lettered == len(PROJECTOR_PROJECTIONS)


def test_an_undecodable_record_is_a_dead_letter_at_once(
    store: PostgresReadModelStore, reads: psycopg.Connection
) -> None:
    entries = _conversation(RecordedLog(), count=3)
    broken = _Undecodable(*_fields(entries[1:2]))
    stats = ProjectorStats()
    assert store.apply([entries[0], broken, entries[2]], stats) == 3
    queries = PgSessionQueries(reads)
    assert queries.message(NS, "s", "m2") is None
    assert queries.message(NS, "s", "m3") == msg("m3")
    assert [d["seq"] for d in store.dead_letters()] == [2] * len(PROJECTOR_PROJECTIONS)


def test_closing_the_steps_of_a_batch_rolls_it_back(
    store: PostgresReadModelStore, reads: psycopg.Connection
) -> None:
    entries = _conversation(RecordedLog(), count=3)
    steps = store.steps(entries, ProjectorStats())
    next(steps)
    next(steps)
    steps.close()
    assert store.positions() == AT_ZERO
    assert PgSessionQueries(reads).history(NS, "s") == []
    assert store.apply(entries, ProjectorStats()) == 3


def test_a_batch_after_the_projection_was_dropped_writes_nothing(
    store: PostgresReadModelStore, reads: psycopg.Connection
) -> None:
    entries = _conversation(RecordedLog(), count=5)
    stats = ProjectorStats()
    assert store.apply(entries[:3], stats) == 3
    store.drop("sessions")
    with pytest.raises(ReadModelRewound):
        store.apply(entries[3:], stats, committed=3)
    assert store.positions() == {"sessions": 0, "context": 3, "registry": 3, "memory": 3}
    assert PgSessionQueries(reads).history(NS, "s") == []
    assert store.apply(entries, stats) == 5
    assert PgSessionQueries(reads).path_length(NS, "s") == 5


def test_stores_of_disjoint_projections_keep_their_own_positions(
    postgres_url: str, reads: psycopg.Connection
) -> None:
    log = RecordedLog()
    entries = [*_conversation(log), *log.block("notes", "s", "hi")]
    sessions = PostgresReadModelStore(postgres_url, ["sessions"])
    context = PostgresReadModelStore(postgres_url, ["context"])
    try:
        assert sessions.apply(entries, ProjectorStats()) == 4
        assert context.positions() == {"context": 0}
        assert PgContextQueries(reads).block_content(NS, "notes", "s") is None
        assert context.apply(entries, ProjectorStats()) == 4
        assert PgContextQueries(reads).block_content(NS, "notes", "s") == "hi"
        assert sessions.positions() == {"sessions": 4}
    finally:
        sessions.close()
        context.close()


def test_a_projection_of_another_version_starts_over_alone(
    postgres_url: str, reads: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = RecordedLog()
    entries = [*_conversation(log), *log.block("notes", "s", "hi")]
    store = PostgresReadModelStore(postgres_url, long_lived=True)
    assert store.apply(entries, ProjectorStats()) == 4
    store.close()
    monkeypatch.setitem(VERSIONS, "sessions", 2)
    rebuild = PostgresReadModelStore(postgres_url)  # not a projector's: it empties nothing
    assert rebuild.positions()["sessions"] == 4
    rebuild.close()
    store = PostgresReadModelStore(postgres_url, long_lived=True)
    try:
        assert store.positions() == {"sessions": 0, "context": 4, "registry": 4, "memory": 4}
        assert PgSessionQueries(reads).history(NS, "s") == []
        assert PgContextQueries(reads).block_content(NS, "notes", "s") == "hi"
        assert store.apply(entries, ProjectorStats()) == 4
        assert ids(PgSessionQueries(reads).history(NS, "s")) == ["m1", "m2", "m3"]
    finally:
        store.close()
    again = PostgresReadModelStore(postgres_url, long_lived=True)
    try:
        assert again.positions()["sessions"] == 4  # the new version carries on
    finally:
        again.close()


def test_a_busy_projection_refuses_at_once_without_wait(
    postgres_url: str, store: PostgresReadModelStore
) -> None:
    other = PostgresReadModelStore(postgres_url, ["sessions"])
    transaction = other.transaction()  # holds the sessions tracking row
    try:
        with pytest.raises(StoreBusy):
            store.transaction(wait=False)
        # Waiting, it proceeds once the other commits.
        done = threading.Event()

        def apply() -> None:
            store.apply(_conversation(RecordedLog()), ProjectorStats())
            done.set()

        waiter = threading.Thread(target=apply)
        waiter.start()
        assert not done.wait(0.3)
        transaction.commit(ProjectorStats())
        waiter.join(10)
        assert done.is_set()
        assert store.positions()["sessions"] == 3
    finally:
        transaction.rollback()
        other.close()


def test_a_lost_connection_is_unavailable_and_the_next_batch_applies(
    postgres_url: str, store: PostgresReadModelStore, reads: psycopg.Connection
) -> None:
    entries = _conversation(RecordedLog(), count=4)
    assert store.apply(entries[:2], ProjectorStats()) == 2
    reads.execute("SELECT pg_terminate_backend(%s)", (store.connection.info.backend_pid,))
    with pytest.raises(UnavailableError, match="lost the read-model database"):
        store.apply(entries[2:], ProjectorStats())
    assert store.apply(entries, ProjectorStats()) == 4
    assert ids(PgSessionQueries(reads).history(NS, "s")) == ["m1", "m2", "m3", "m4"]


def test_a_transaction_on_a_lost_connection_is_unavailable_and_the_next_one_works(
    postgres_url: str, store: PostgresReadModelStore, reads: psycopg.Connection
) -> None:
    reads.execute("SELECT pg_terminate_backend(%s)", (store.connection.info.backend_pid,))
    with pytest.raises(UnavailableError, match="lost the read-model database"):
        store.transaction()
    transaction = store.transaction()
    for _ in transaction.apply(_conversation(RecordedLog(), count=2), ProjectorStats()):
        pass
    assert transaction.commit(ProjectorStats()) == 2
    assert ids(PgSessionQueries(reads).history(NS, "s")) == ["m1", "m2"]


def test_a_batch_on_a_replaced_copy_writes_nothing(
    postgres_url: str, store: PostgresReadModelStore
) -> None:
    # Given a store whose database now holds another copy (a new copy id, as when another
    # process replaced it)
    assert store.apply(_conversation(RecordedLog()), ProjectorStats()) == 3
    with psycopg.connect(postgres_url, autocommit=True) as other:
        other.execute("UPDATE memstream.meta SET value = 'another-copy' WHERE key = 'copy_id'")
    # When it begins a batch, Then the batch's lock statement refuses it (whatever the
    # throttled probe last said) and nothing is written
    with pytest.raises(ReadModelRewound, match="replaced"):
        store.apply(_conversation(RecordedLog(), "t"), ProjectorStats())
    assert store.positions()["sessions"] == 3
    # And the store says so when asked (the projector then opens the new copy)
    assert store.replaced()


def test_two_stores_of_one_partition_take_turns_without_stale_rows(
    postgres_url: str, postgres_server: str
) -> None:
    # Given two stores of partition 0 (a projector that lost its lease and one that took it
    # over, both still running), each with what it learnt of the rows in its last batch
    rows = TrackingRows(1, frozenset({0}))
    entries = [
        dataclasses.replace(e, subject=f"{e.subject}.0")
        for e in _conversation(RecordedLog(), count=8)
    ]
    first, second = (PostgresReadModelStore(postgres_url, long_lived=True) for _ in range(2))
    try:
        for store in (first, second):
            store.track(rows)
        stats = ProjectorStats()
        # When they apply overlapping deliveries in turns
        assert first.apply(entries[:2], stats) == 2
        assert second.apply(entries[:5], stats) == 5
        assert first.apply(entries[:7], stats) == 7  # m3..m5 skipped: the other applied them
        assert second.apply(entries, stats) == 8
        assert stats.applied == 8
        # Then the read model is what one store applying them in order builds
        url = create_database(postgres_server)
        try:
            alone = PostgresReadModelStore(url, long_lived=True)
            try:
                alone.track(rows)
                alone.apply(entries, ProjectorStats())
                for projection in PROJECTOR_PROJECTIONS:
                    assert first.checksum(projection) == alone.checksum(projection), projection
            finally:
                alone.close()
        finally:
            drop_database(postgres_server, url)
    finally:
        first.close()
        second.close()
