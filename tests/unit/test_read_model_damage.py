"""Damaged and foreign read-model files: detection at open, moving aside, noticing a replacement.

Real SQLite files in a temp dir, a read model written by the session projection; no NATS.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import stat
import subprocess
import threading
from pathlib import Path

import pytest
from support.damage import overwrite_middle

from memstream.domain.errors import ReadModelDamagedError, UnavailableError
from memstream.domain.session import SessionAggregate
from memstream.projections.session_projector import project_session_event
from memstream.projections.sqlite.damage import file_identity, is_damage, move_aside
from memstream.projections.sqlite.database import (
    file_replaced,
    open_database,
    set_tracked_seq,
    tracked_seq,
)
from memstream.projections.sqlite.schema import APPLICATION_ID, SCHEMA_VERSION, migrate
from memstream.projections.sqlite.session_queries import SqliteSessionQueries
from memstream.projections.sqlite.session_writer import apply_session_writes


def write_read_model(path: Path, messages: int = 600, sessions: int = 3) -> None:
    """A read model of ``sessions`` sessions with ``messages`` ~500-byte messages in all, written
    by the session projection and checkpointed into the database file (no ``-wal`` left)."""
    connection = open_database(path)
    seq = 0
    connection.execute("BEGIN")
    for n in range(messages):
        session_id = f"s{n % sessions}"
        session = SessionAggregate.empty("default", session_id)
        for event in session.append_messages(
            [{"id": f"m{n}", "role": "user", "parts": [{"type": "text", "text": f"{n} " * 200}]}],
            None,
        ):
            seq += 1
            apply_session_writes(connection, project_session_event("default", seq, event))
    set_tracked_seq(connection, "sessions", seq)
    connection.execute("COMMIT")
    connection.close()  # the last connection checkpoints and removes the -wal file
    assert not Path(f"{path}-wal").exists()


def read_everything(queries: SqliteSessionQueries) -> None:
    for session_id in ("s0", "s1", "s2"):
        queries.history("default", session_id)
        queries.search("default", session_id, "1", 500)


def corrupt_files(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.corrupt-*"))


def test_a_file_that_is_not_a_database_is_refused_in_one_line_or_moved_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a file of text where the read model should be
    path = tmp_path / "memstream.db"
    path.write_bytes(b"this is not a database\n" * 400)

    # When a reader opens it: one line that says what to do, and the file is left alone
    with pytest.raises(ReadModelDamagedError) as refused:
        open_database(path)
    message = str(refused.value)
    assert "\n" not in message
    assert str(path) in message
    assert "file is not a database" in message
    assert "memstream projections rebuild" in message
    assert path.read_bytes().startswith(b"this is not a database")

    # When the projector opens it (repair): moved aside, with a warning, and a fresh one opened
    with caplog.at_level(logging.WARNING):
        connection = open_database(path, repair=True)
    [moved] = corrupt_files(path)
    assert connection.replaced == moved
    assert moved.read_bytes().startswith(b"this is not a database")
    assert stat.S_IMODE(moved.stat().st_mode) == 0o600
    # (and the fresh one and its WAL files are readable by their owner only, whatever the umask)
    assert {stat.S_IMODE(p.stat().st_mode) for p in path.parent.glob("memstream.db*")} == {0o600}
    assert any(str(path) in r.message and str(moved) in r.message for r in caplog.records)
    assert connection.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert tracked_seq(connection, "sessions") == 0
    connection.close()


def test_garbage_in_the_middle_of_a_read_model_is_found_when_the_projector_opens_it(
    tmp_path: Path,
) -> None:
    # Given a real read model with pages in its middle overwritten
    path = tmp_path / "memstream.db"
    write_read_model(path)
    overwrite_middle(path)

    # Then a reader's cheap checks at open pass, but reading the damaged pages is damage
    reader = open_database(path)
    with pytest.raises(sqlite3.DatabaseError) as met:
        read_everything(SqliteSessionQueries(reader))
    assert is_damage(met.value)
    reader.close()

    # When the projector opens it: quick_check finds it, the file is moved aside, a fresh one
    # takes its place
    identity = file_identity(path)
    connection = open_database(path, repair=True)
    [moved] = corrupt_files(path)
    assert connection.replaced == moved
    assert file_identity(moved) == identity
    assert file_identity(path) != identity
    assert tracked_seq(connection, "sessions") == 0
    assert connection.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    connection.close()


def test_an_intact_read_model_passes_the_projectors_check_untouched(tmp_path: Path) -> None:
    path = tmp_path / "memstream.db"
    write_read_model(path, messages=60)
    identity = file_identity(path)
    connection = open_database(path, repair=True)
    assert connection.replaced is None
    assert file_identity(path) == identity
    assert tracked_seq(connection, "sessions") == 60
    assert corrupt_files(path) == []
    connection.close()


def test_a_foreign_sqlite_database_is_not_taken_for_a_read_model(tmp_path: Path) -> None:
    # Given another application's SQLite database at the read model's path
    path = tmp_path / "memstream.db"
    foreign = sqlite3.connect(path)
    foreign.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
    foreign.execute("INSERT INTO notes (text) VALUES ('keep me')")
    foreign.commit()
    foreign.close()

    # When a reader opens it: refused in one line, and nothing is migrated into it
    with pytest.raises(ReadModelDamagedError, match="not a memstream read model") as refused:
        open_database(path)
    assert "holds tables notes" in str(refused.value)
    check = sqlite3.connect(path)
    assert [r[0] for r in check.execute("SELECT name FROM sqlite_master")] == ["notes"]
    check.close()

    # When the projector opens it: moved aside whole, a fresh read model in its place
    connection = open_database(path, repair=True)
    [moved] = corrupt_files(path)
    kept = sqlite3.connect(moved)
    assert kept.execute("SELECT text FROM notes").fetchall() == [("keep me",)]
    kept.close()
    assert connection.execute("SELECT count(*) FROM tracking").fetchone()[0] == 0
    connection.close()


def test_a_database_with_another_application_id_is_foreign(tmp_path: Path) -> None:
    path = tmp_path / "memstream.db"
    other = sqlite3.connect(path)
    other.execute("PRAGMA application_id = 1234")
    other.execute("CREATE TABLE tracking (projection TEXT PRIMARY KEY, seq INTEGER NOT NULL)")
    other.commit()
    other.close()
    with pytest.raises(ReadModelDamagedError, match="application_id is 1234"):
        open_database(path)


def test_a_read_model_from_before_the_application_id_is_migrated_not_refused(
    tmp_path: Path,
) -> None:
    # Given a read model at schema version 4 (no application_id yet), with a position
    path = tmp_path / "memstream.db"
    old = sqlite3.connect(path, isolation_level=None)
    migrate(old, target=4)
    # (later migrations re-project "sessions" and "context" on purpose: a row they keep)
    set_tracked_seq(old, "a-later-projection", 42)
    old.close()

    # When it is opened: migrated, marked as ours, its rows kept
    connection = open_database(path, repair=True)
    assert connection.replaced is None
    assert connection.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert tracked_seq(connection, "a-later-projection") == 42
    connection.close()


def test_damage_is_told_apart_from_busy_and_constraint_errors(tmp_path: Path) -> None:
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
    connection.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(sqlite3.IntegrityError) as constraint:
        connection.execute("INSERT INTO t VALUES (1)")
    assert not is_damage(constraint.value)
    with pytest.raises(sqlite3.OperationalError) as missing:
        connection.execute("SELECT * FROM nowhere")
    assert not is_damage(missing.value)
    assert not is_damage(ValueError("malformed"))

    path = tmp_path / "text.db"
    path.write_bytes(b"x" * 8192)
    with pytest.raises(sqlite3.DatabaseError) as not_a_database:
        sqlite3.connect(path).execute("PRAGMA user_version")
    assert is_damage(not_a_database.value)


def test_the_wal_switch_of_a_new_file_waits_for_another_opener(tmp_path: Path) -> None:
    # Given a new file held by another connection in the middle of a write transaction (in
    # rollback-journal mode: SQLite answers the WAL switch SQLITE_BUSY without waiting)
    path = tmp_path / "memstream.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE early (x)")
    probe = sqlite3.connect(path, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        probe.execute("PRAGMA journal_mode = WAL")
    probe.close()

    # When the read model is opened while the holder commits a moment later
    release = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        with pytest.raises(ReadModelDamagedError, match="holds tables early"):
            open_database(path)  # it waited for the holder (its table makes the file foreign)
    finally:
        release.join()
        holder.close()
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_reader_notices_the_file_was_replaced(tmp_path: Path) -> None:
    path = tmp_path / "memstream.db"
    write_read_model(path, messages=30)
    reader = open_database(path)
    assert not file_replaced(reader)
    moved = move_aside(path, file_identity(path))
    assert moved is not None
    assert file_replaced(reader)  # no file at the path
    fresh = open_database(path)
    assert file_replaced(reader)
    assert not file_replaced(fresh)
    # the old connection still reads the old file
    assert tracked_seq(reader, "sessions") == 30
    assert tracked_seq(fresh, "sessions") == 0
    reader.close()
    fresh.close()


def test_moving_aside_a_file_another_process_replaced_already_leaves_the_new_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "memstream.db"
    write_read_model(path, messages=10)
    damaged = file_identity(path)
    assert move_aside(path, damaged) is not None
    open_database(path).close()
    assert move_aside(path, damaged) is None  # the new file is not the damaged one
    assert len(corrupt_files(path)) == 1
    assert path.exists()


def test_an_old_connection_closing_keeps_the_new_files_log(tmp_path: Path) -> None:
    # Given a connection on a read model that is then moved aside and replaced, and commits in
    # the new file's write-ahead log (not checkpointed yet)
    path = tmp_path / "memstream.db"
    write_read_model(path, messages=30)
    old = open_database(path)
    assert tracked_seq(old, "sessions") == 30
    assert move_aside(path, file_identity(path)) is not None
    new = open_database(path)
    new.execute("PRAGMA wal_autocheckpoint = 0")
    set_tracked_seq(new, "context", 7)
    assert Path(f"{path}-wal").stat().st_size > 0

    # When the old connection closes (the last one on the old file in this process)
    old.close()

    # Then the new file's log is still there, and another connection reads the commit
    assert Path(f"{path}-wal").exists()
    other = open_database(path)
    assert tracked_seq(other, "context") == 7
    other.close()
    new.close()


def test_a_data_dir_that_does_not_exist_is_one_unavailable_error(tmp_path: Path) -> None:
    with pytest.raises(UnavailableError, match="cannot open read-model database"):
        open_database(tmp_path / "missing" / "memstream.db")


def test_moved_aside_names_do_not_collide(tmp_path: Path) -> None:
    path = tmp_path / "memstream.db"
    names = []
    for _ in range(3):
        path.write_bytes(b"junk")
        moved = move_aside(path)
        assert moved is not None
        names.append(moved)
    assert len(set(names)) == 3
    assert all(n.read_bytes() == b"junk" for n in names)
    assert all(stat.S_IMODE(os.stat(n).st_mode) == 0o600 for n in names)


def test_a_file_that_cannot_be_moved_aside_is_one_line_that_says_what_to_do(
    tmp_path: Path,
) -> None:
    # Given a damaged file in a folder where nothing can be renamed (immutable, as root can make
    # it: permissions alone do not stop root)
    folder = tmp_path / "data"
    folder.mkdir()
    path = folder / "memstream.db"
    path.write_bytes(b"not a database" * 100)
    Path(f"{path}.recovery-lock").touch()
    if shutil.which("chattr") is None or os.geteuid() != 0:
        pytest.skip("needs root and chattr to make a folder immutable")
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("this filesystem has no immutable flag")
    try:
        # When the projector opens it
        with pytest.raises(ReadModelDamagedError) as refused:
            open_database(path, repair=True)
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    # Then one line says why and what to do, and the file is where it was
    message = str(refused.value)
    assert "\n" not in message
    assert "cannot be moved aside" in message
    assert "memstream projections rebuild" in message
    assert path.read_bytes().startswith(b"not a database")
