"""The projector's batches on a real SQLite read model: what they keep between transactions, the
search rows they hold back until commit, reads through the projector's connection, and WAL
checkpoints in a thread of their own. No NATS: events are encoded as the log holds them.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.messages import msg

from memstream.domain.session import SessionAggregate
from memstream.projections.ports import ProjectorStats
from memstream.projections.session_projector import project_session_event
from memstream.projections.sql.batches import SqlContextProjection, SqlSessionProjection
from memstream.projections.sqlite.batches import (
    WRITES,
    BatchMemo,
    apply_batch,
)
from memstream.projections.sqlite.checkpointer import Checkpointer, defer_checkpoints
from memstream.projections.sqlite.checksum import checksum
from memstream.projections.sqlite.database import drop_projection, open_database
from memstream.projections.sqlite.read_connection import ReadConnection
from memstream.projections.sqlite.session_queries import SqliteSessionQueries
from memstream.projections.sqlite.session_snapshots import SqliteSessionSnapshots
from memstream.projections.sqlite.session_writer import apply_session_writes
from memstream.workers.log.codec import CommandMeta, encode_event
from memstream.workers.log.event_log import LogEntry
from memstream.workers.log.subjects import subject_for

NAMESPACE = "default"


class Log:
    """Session events as log entries, in stream order."""

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []
        self.sessions: dict[str, SessionAggregate] = {}

    def command(self, session_id: str, decide: Callable[[SessionAggregate], list[Any]]) -> None:
        session = self.sessions.setdefault(
            session_id, SessionAggregate.empty(NAMESPACE, session_id)
        )
        for event in decide(session):
            event.mutate(session)
            payload, headers = encode_event(event, CommandMeta(), "id")
            self.entries.append(
                LogEntry(
                    len(self.entries) + 1,
                    subject_for("ms", NAMESPACE, "session", session_id),
                    payload,
                    headers,
                )
            )

    def append(self, session_id: str, message_id: str, text: str) -> None:
        self.command(session_id, lambda s: s.append_messages([msg(message_id, text)]))


def segments(connection: sqlite3.Connection) -> int:
    """How many FTS5 segments the message search index has (each has rows in ``_idx``)."""
    return int(
        connection.execute("SELECT count(DISTINCT segid) FROM messages_fts_idx").fetchone()[0]
    )


def replayed(tmp_path: Path, entries: list[LogEntry], name: str) -> sqlite3.Connection:
    """A read model built event by event, one transaction each (the reference)."""
    connection = open_database(tmp_path / name)
    for entry in entries:
        apply_batch(
            connection,
            [SqlSessionProjection(WRITES), SqlContextProjection(WRITES)],
            [entry],
            ProjectorStats(),
        )
    return connection


@pytest.fixture
def database(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    connection = open_database(tmp_path / "memstream.db")
    yield connection
    connection.close()


def test_a_batch_of_inserts_writes_its_search_rows_as_one_segment(
    database: sqlite3.Connection,
) -> None:
    # Every event also records the session's position with an upsert, which opens a statement
    # journal: FTS5 wrote the terms inserted before it as a segment of their own each time.
    log = Log()
    for n in range(200):
        log.append(f"s{n % 4}", f"m{n}", f"word{n} common text of message {n}")
    apply_batch(
        database,
        [SqlSessionProjection(WRITES), SqlContextProjection(WRITES)],
        log.entries,
        ProjectorStats(),
    )
    assert segments(database) == 1
    queries = SqliteSessionQueries(database)
    assert [h["id"] for h in queries.search(NAMESPACE, "s1", "word13", 10)] == ["m13"]
    assert len(queries.search(NAMESPACE, None, "common", 500)) == 200


def test_search_rows_follow_updates_deletes_and_clears_within_one_batch(
    database: sqlite3.Connection, tmp_path: Path
) -> None:
    log = Log()
    log.append("a", "m1", "apple")
    log.append("a", "m2", "banana")
    log.command("a", lambda s: s.update_message(msg("m1", "cherry")))
    log.command("a", lambda s: s.delete_messages(["m2"]))
    log.append("a", "m3", "apple pie")
    log.append("b", "x1", "banana bread")
    log.command("b", lambda s: s.clear_messages())
    log.append("b", "x2", "banana split")
    apply_batch(
        database,
        [SqlSessionProjection(WRITES), SqlContextProjection(WRITES)],
        log.entries,
        ProjectorStats(),
    )

    queries = SqliteSessionQueries(database)

    def found(session_id: str, query: str) -> list[str]:
        return [h["id"] for h in queries.search(NAMESPACE, session_id, query, 10)]

    assert found("a", "apple") == ["m3"]
    assert found("a", "cherry") == ["m1"]
    assert found("a", "banana") == []
    assert found("b", "banana") == ["x2"]
    reference = replayed(tmp_path, log.entries, "reference.db")
    assert checksum(database, "sessions") == checksum(reference, "sessions")
    reference.close()


def test_a_projector_forgets_what_it_knew_once_another_connection_rewrote_the_file(
    tmp_path: Path,
) -> None:
    log = Log()
    for n in range(40):
        log.append(f"s{n % 2}", f"m{n}", f"text {n}")
    path = tmp_path / "memstream.db"
    projector = open_database(path)
    projections = [SqlSessionProjection(WRITES), SqlContextProjection(WRITES)]
    memo = BatchMemo()
    assert apply_batch(projector, projections, log.entries[:20], ProjectorStats(), memo=memo) == 20

    # A rebuild in another process: the sessions get other keys, and it projects further.
    rebuilder = open_database(path)
    drop_projection(rebuilder, "sessions")
    drop_projection(rebuilder, "context")
    rebuilder.execute("INSERT INTO session_keys (namespace, session_id) VALUES ('x', 'y')")
    apply_batch(
        rebuilder,
        [SqlSessionProjection(WRITES), SqlContextProjection(WRITES)],
        log.entries[:30],
        ProjectorStats(),
    )
    rebuilder.execute("DELETE FROM session_keys WHERE namespace = 'x'")
    assert rebuilder.execute("SELECT min(sid) FROM session_keys").fetchone()[0] == 2
    rebuilder.close()

    # The projector's cached keys, chain tips and positions are stale now.
    assert apply_batch(projector, projections, log.entries[20:], ProjectorStats(), memo=memo) == 40
    reference = replayed(tmp_path, log.entries, "reference.db")
    assert checksum(projector, "sessions") == checksum(reference, "sessions")
    history = SqliteSessionQueries(projector).history(NAMESPACE, "s0")
    assert [m["id"] for m in history] == [f"m{n}" for n in range(0, 40, 2)]
    reference.close()
    projector.close()


def test_a_projector_keeps_its_positions_between_batches_while_it_writes_alone(
    database: sqlite3.Connection,
) -> None:
    log = Log()
    for n in range(10):
        log.append("s", f"m{n}", f"text {n}")
    memo = BatchMemo()
    projections = [SqlSessionProjection(WRITES), SqlContextProjection(WRITES)]
    apply_batch(database, projections, log.entries[:5], ProjectorStats(), memo=memo)
    assert memo.positions == {"sessions": 5, "context": 5}
    statements: list[str] = []
    database.set_trace_callback(statements.append)
    apply_batch(database, projections, log.entries[5:], ProjectorStats(), memo=memo)
    database.set_trace_callback(None)
    assert not [s for s in statements if s.startswith("SELECT projection, seq FROM tracking")]
    assert not [s for s in statements if "FROM session_keys" in s and s.startswith("SELECT")]
    assert memo.positions == {"sessions": 10, "context": 10}


def test_a_rolled_back_batch_leaves_nothing_remembered(database: sqlite3.Connection) -> None:
    log = Log()
    for n in range(6):
        log.append("s", f"m{n}", f"text {n}")
    memo = BatchMemo()
    projection = SqlSessionProjection(WRITES)
    apply_batch(database, [projection], log.entries[:3], ProjectorStats(), memo=memo)

    class Failing(SqlSessionProjection):
        name = "sessions"

        def apply(
            self, connection: sqlite3.Connection, subject: str, seq: int, event: object
        ) -> None:
            super().apply(connection, subject, seq, event)
            if seq == 5:
                raise RuntimeError("boom")

    failing = Failing(WRITES)
    failing.rows = projection.rows  # the same memory, as one projector's projection has
    with pytest.raises(RuntimeError):
        apply_batch(database, [failing], log.entries[3:], ProjectorStats(), memo=memo)
    assert memo.positions is None
    assert not projection.rows.texts
    assert not projection.rows.tips
    assert not projection.rows.sids
    assert not projection.rows.positions
    assert not projection.rows.children
    assert apply_batch(database, [projection], log.entries[3:], ProjectorStats(), memo=memo) == 6
    queries = SqliteSessionQueries(database)
    assert [m["id"] for m in queries.history(NAMESPACE, "s")] == [f"m{n}" for n in range(6)]
    assert [h["id"] for h in queries.search(NAMESPACE, "s", "4", 10)] == ["m4"]


def test_reads_go_through_the_lent_connection_and_a_reading_stays_on_one(tmp_path: Path) -> None:
    path = tmp_path / "memstream.db"
    writer = open_database(path)
    own = open_database(path)
    lent: list[sqlite3.Connection | None] = [writer]
    reads = ReadConnection(own, lambda: lent[0])
    assert reads.current() is writer
    lent[0] = None
    assert reads.current() is own

    lent[0] = writer
    assert reads.begin()
    assert not reads.begin()  # one reading at a time: nested readings join it
    assert writer.in_transaction
    assert reads.in_transaction
    lent[0] = None  # e.g. the projector would be busy now: the reading keeps its connection
    assert reads.current() is writer
    reads.commit()
    assert not writer.in_transaction
    assert not reads.in_transaction
    assert reads.current() is own

    # A writer-side reading works the same over it (snapshots restore sessions in one).
    snapshots = SqliteSessionSnapshots(reads, NAMESPACE)
    with snapshots.reading():
        assert snapshots.snapshot("nobody").seq == 0
    assert not own.in_transaction
    writer.close()
    own.close()


def test_checkpoints_run_in_their_own_thread_and_bound_the_wal(tmp_path: Path) -> None:
    path = tmp_path / "memstream.db"
    connection = open_database(path)
    defer_checkpoints(connection)
    assert connection.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    connection.execute("CREATE TABLE t (x BLOB)")
    checkpointer = Checkpointer(path, delay=0.0)
    checkpointer.start()
    wal = Path(f"{path}-wal")
    sizes = []
    try:
        for _ in range(12):
            for _ in range(100):  # 100 commits of a 4 KiB row: 100+ WAL frames each round
                connection.execute("INSERT INTO t VALUES (zeroblob(4000))")
            done = checkpointer.checkpoints
            checkpointer.committed()
            deadline = time.monotonic() + 10
            while checkpointer.checkpoints == done and time.monotonic() < deadline:
                time.sleep(0.005)
            assert checkpointer.checkpoints > done
            sizes.append(wal.stat().st_size)
    finally:
        checkpointer.stop()
    # Without checkpoints the WAL would hold all 1,200 commits (over 5 MiB); it is rewound
    # after each one instead.
    assert max(sizes) < 3 * 1024 * 1024, sizes
    busy, frames, copied = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert busy == 0
    assert frames == copied
    connection.close()


def test_a_stopped_checkpointer_ends_its_thread(tmp_path: Path) -> None:
    path = tmp_path / "memstream.db"
    open_database(path).close()
    checkpointer = Checkpointer(path)
    checkpointer.start()
    thread = checkpointer._thread
    assert thread is not None
    assert thread.is_alive()
    checkpointer.stop()
    assert not thread.is_alive()


def test_apply_session_writes_without_rows_writes_its_search_rows_itself(
    database: sqlite3.Connection,
) -> None:
    session = SessionAggregate.empty(NAMESPACE, "s")
    database.execute("BEGIN")
    for seq, event in enumerate(session.append_messages([msg("m1", "kiwi")]), start=1):
        apply_session_writes(database, project_session_event(NAMESPACE, seq, event))
    database.execute("COMMIT")
    hits = SqliteSessionQueries(database).search(NAMESPACE, "s", "kiwi", 5)
    assert [h["id"] for h in hits] == ["m1"]


def test_a_checkpoint_that_fails_is_logged_and_tried_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a checkpointer of a file that is not there (moved aside, say)
    path = tmp_path / "memstream.db"
    checkpointer = Checkpointer(path, delay=0.0)
    checkpointer.start()
    try:
        checkpointer.committed()
        deadline = time.monotonic() + 10
        while "checkpoint of" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.01)
        # Then the failure is one warning naming the file, and nothing was created in its place
        assert f"checkpoint of {path} failed" in caplog.text
        assert not path.exists()
        assert checkpointer.checkpoints == 0
        # And once the file is back, the next commit is checkpointed
        open_database(path).close()
        checkpointer.committed()
        while checkpointer.checkpoints == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert checkpointer.checkpoints == 1
    finally:
        checkpointer.stop()


class _Preparing(SqlSessionProjection):
    """The session projection with a ``prepare`` step (as the vectors projection embeds its
    texts there), which records whether another connection could take the write lock then."""

    def __init__(self, path: Path) -> None:
        super().__init__(WRITES)
        self.path = path
        self.lock_free: list[bool] = []

    def prepare(self, events: Any) -> None:
        other = sqlite3.connect(self.path, isolation_level=None, timeout=0)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            self.lock_free.append(True)
        except sqlite3.OperationalError:  # database is locked
            self.lock_free.append(False)
        finally:
            other.close()


def test_a_batch_is_prepared_before_its_transaction_takes_the_write_lock(
    database: sqlite3.Connection, tmp_path: Path
) -> None:
    # A model loading or encoding in prepare takes seconds: holding the write lock meanwhile
    # stalled every other writer, an event loop's projector among them, for as long as the
    # model took (bench/RESULTS.md, 'Figures moved from code comments').
    log = Log()
    for n in range(3):
        log.append("s", f"m{n}", f"text {n}")
    preparing = _Preparing(tmp_path / "memstream.db")
    assert apply_batch(database, [preparing], log.entries, ProjectorStats()) == 3
    assert preparing.lock_free == [True]
    assert SqliteSessionQueries(database).search(NAMESPACE, "s", "text", 10)
