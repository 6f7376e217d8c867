"""SQLite read-model database: opening it (checked, migrated, in WAL mode), tracking and dead
letters. Its schema and migrations: :mod:`memstream.projections.sqlite.schema`."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from memstream.domain.errors import ReadModelDamagedError, UnavailableError
from memstream.projections.ports import REBUILD_HINT
from memstream.projections.registry import VERSIONS
from memstream.projections.sql.dialect import SQLITE
from memstream.projections.sql.tables import with_indexes
from memstream.projections.sql.tracking import changed_versions, tracking_rows
from memstream.projections.sql.tracking import dead_letters as shared_dead_letters
from memstream.projections.sql.tracking import tracked_seq as shared_tracked_seq
from memstream.projections.sqlite.damage import (
    FileIdentity,
    file_identity,
    is_damage,
    move_aside,
    recovery_lock,
)
from memstream.projections.sqlite.schema import (
    APPLICATION_ID,
    APPLICATION_ID_VERSION,
    migrate,
)
from memstream.projections.tracking import PARTITION_ROW, projection_of

logger = logging.getLogger(__name__)

# Up to this size, opening for the projector (``repair=True``) runs ``PRAGMA quick_check``:
# its time grows with the file (bench/RESULTS.md, 'Figures moved from code comments'). Larger
# files are checked at their first error.
QUICK_CHECK_LIMIT = 32 * 1024 * 1024
# How long a statement waits for another connection's write lock before it fails.
BUSY_TIMEOUT_MS = 30_000

# Switching a fresh file to WAL needs an exclusive lock that SQLite's busy handler does not
# wait for, so concurrent first opens retry it (bounded).
WAL_SWITCH_TIMEOUT = 30.0
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6

# Tables each projection owns: dropped and rebuilt together by ``projections rebuild``.
PROJECTION_TABLES = with_indexes(
    {
        "messages": "messages_fts",
        "search_entries": "search_entries_fts",
        "memory_messages": "memory_messages_fts",
        "memories": "memories_fts",
    }
)

# How a table is emptied where DELETE cannot (a contentless FTS5 table).
_EMPTY = {
    "messages_fts": "INSERT INTO messages_fts (messages_fts) VALUES ('delete-all')",
    "memory_messages_fts": "INSERT INTO memory_messages_fts (memory_messages_fts) "
    "VALUES ('delete-all')",
    "memories_fts": "INSERT INTO memories_fts (memories_fts) VALUES ('delete-all')",
}


class ReadModelConnection(sqlite3.Connection):
    """A read-model connection that knows its file, to notice when the file is replaced.

    ``replaced`` is the name a damaged file was moved aside to when opening it did so.
    """

    path: Path
    identity: FileIdentity | None
    replaced: Path | None = None


def open_database(
    path: str | Path, *, repair: bool = False, quick_check_limit: int = QUICK_CHECK_LIMIT
) -> ReadModelConnection:
    """Open (and migrate) the read-model database in WAL mode.

    Every open checks cheaply that the file is a memstream read model (a database, with our
    ``application_id``, whose schema reads). With ``repair`` (the process that runs the
    projector, or a rebuild), a file up to ``quick_check_limit`` bytes is checked whole too,
    and a damaged or foreign file is moved aside (:func:`replace_damaged`) and a fresh one
    opened, to be rebuilt from the log.

    Raises:
        ReadModelDamagedError: the file is damaged or foreign (and ``repair`` is off, or it
            cannot be moved aside).
        UnavailableError: the file cannot be opened or migrated.
    """
    path = Path(path)
    try:
        return _open_checked(path, quick_check_limit if repair else -1)
    except _Damaged as damage:
        if not repair:
            raise ReadModelDamagedError(
                f"read model {path} is damaged ({damage.reason}); {REBUILD_HINT}"
            ) from damage
        return replace_damaged(path, damage.reason, damage.identity)


def replace_damaged(path: Path, reason: str, identity: FileIdentity | None) -> ReadModelConnection:
    """Move the damaged read model at ``path`` aside and open a fresh one in its place.

    ``identity`` is the damaged file's (:func:`file_identity`): when another file is at
    ``path`` already, another process has replaced it, and that one is opened.

    Raises:
        ReadModelDamagedError: the file cannot be moved aside, or its replacement is damaged.
        UnavailableError: the new file cannot be opened.
    """
    try:
        moved = move_aside(path, identity)
    except OSError as error:
        raise ReadModelDamagedError(
            f"read model {path} is damaged ({reason}) and cannot be moved aside "
            f"({error.strerror or error}): move it away by hand, then "
            "run `memstream projections rebuild`"
        ) from error
    if moved is not None:
        logger.warning(
            "read model %s is damaged (%s); moved it aside to %s; rebuilding it from the log",
            path,
            reason,
            moved,
        )
    try:
        connection = _open_checked(path, -1)
    except _Damaged as damage:
        raise ReadModelDamagedError(
            f"read model {path} is damaged ({damage.reason}); {REBUILD_HINT}"
        ) from damage
    connection.replaced = moved
    return connection


def file_replaced(connection: sqlite3.Connection) -> bool:
    """Whether the read model at ``connection``'s path is no longer the file it opened (a
    damaged one moved aside and rebuilt): one ``stat``."""
    if not isinstance(connection, ReadModelConnection):
        return False
    return file_identity(connection.path) != connection.identity


def database_path(connection: sqlite3.Connection) -> Path | None:
    """The file of a connection :func:`open_database` made (``None`` for any other)."""
    return connection.path if isinstance(connection, ReadModelConnection) else None


class _Damaged(Exception):
    """The file at hand is corrupt or foreign (inside this module)."""

    def __init__(self, reason: str, identity: FileIdentity | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.identity = identity


def _create_private(path: Path) -> None:
    """Create a new read-model file readable by its owner only (0600) before SQLite opens it:
    SQLite gives its -wal and -shm files the database file's mode. An existing file is left as
    it is; any other problem is SQLite's to report when it opens the path."""
    with contextlib.suppress(OSError):
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        os.close(os.open(path, flags, 0o600))


def _open_checked(path: Path, quick_check_limit: int) -> ReadModelConnection:
    """Connect, check (whole when the file is at most ``quick_check_limit`` bytes) and migrate.

    Raises:
        _Damaged: the file is corrupt or foreign.
        UnavailableError: the file cannot be opened or migrated.
    """
    identity: FileIdentity | None = None
    connection: ReadModelConnection | None = None
    try:
        with recovery_lock(path, exclusive=False):
            _create_private(path)
            connection = sqlite3.connect(
                str(path),
                isolation_level=None,
                check_same_thread=False,
                timeout=30.0,
                factory=ReadModelConnection,
            )
            identity = file_identity(path)
            connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            _use_wal(connection)
            connection.execute("PRAGMA synchronous = NORMAL")
            connection.execute("PRAGMA temp_store = MEMORY")
            connection.execute("PRAGMA cache_size = -65536")
            # Deleted rows are overwritten with zeros in the file, not left in free pages: a
            # purge or a delete must not leave personal data behind (Debian's SQLite has this
            # on by default, others do not).
            connection.execute("PRAGMA secure_delete = ON")
            foreign = _foreign(connection)
            if foreign is None and 0 <= os.stat(path).st_size <= quick_check_limit:
                foreign = _quick_check(connection)
        if foreign is not None:
            raise _Damaged(foreign, identity)
        migrate(connection)
    except sqlite3.Error as error:
        if connection is not None:
            connection.close()
        if is_damage(error):
            raise _Damaged(str(error), identity) from error
        raise UnavailableError(f"cannot open read-model database {path}: {error}") from error
    except OSError as error:  # the lock file: e.g. no such data dir
        if connection is not None:
            connection.close()
        raise UnavailableError(f"cannot open read-model database {path}: {error}") from error
    except BaseException:
        if connection is not None:
            connection.close()
        raise
    connection.path = path
    connection.identity = identity
    return connection


def _use_wal(connection: sqlite3.Connection) -> None:
    """``PRAGMA journal_mode = WAL``, retried while another opener holds the file (bounded)."""
    deadline = time.monotonic() + WAL_SWITCH_TIMEOUT
    delay = 0.001
    while True:
        try:
            connection.execute("PRAGMA journal_mode = WAL").fetchone()
            return
        except sqlite3.OperationalError as error:
            code = getattr(error, "sqlite_errorcode", 0) & 0xFF
            if code not in (_SQLITE_BUSY, _SQLITE_LOCKED) or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _foreign(connection: sqlite3.Connection) -> str | None:
    """Why the database is not a memstream read model (``None``: it is one, or empty).

    Reads the header and the schema, so a file that is not a database, or whose schema is
    damaged, raises here.
    """
    application_id = connection.execute("PRAGMA application_id").fetchone()[0]
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    tables = {
        row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    if application_id == APPLICATION_ID:
        return None
    if application_id != 0:
        return f"not a memstream read model: its application_id is {application_id}"
    if not tables:
        return None  # a new file
    if 1 <= version < APPLICATION_ID_VERSION and {"tracking", "messages"} <= tables:
        return None  # written before the application_id migration
    listed = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
    return f"not a memstream read model: it holds tables {listed}"


def _quick_check(connection: sqlite3.Connection) -> str | None:
    """The first problem ``PRAGMA quick_check`` finds (``None``: none).

    Raises:
        sqlite3.DatabaseError: the check itself met damage.
    """
    rows = connection.execute("PRAGMA quick_check(1)").fetchall()
    problem = str(rows[0][0]) if rows else "ok"
    return None if problem == "ok" else f"quick_check: {problem}"


def tracked_seq(connection: sqlite3.Connection, projection: str) -> int:
    """The last stream sequence ``projection`` committed (0 if none); of a partitioned one, the
    lowest of its partitions' (see :func:`tracked_partitions`)."""
    return shared_tracked_seq(connection, SQLITE, projection)


def tracked_partitions(connection: sqlite3.Connection, projection: str) -> dict[int, int]:
    """Each partition's position of ``projection`` (see
    :class:`~memstream.projections.tracking.TrackingRows`); empty when it is not partitioned."""
    return tracking_rows(connection, SQLITE, projection)[1]


def track_partitions(
    connection: sqlite3.Connection, projections: Sequence[str], count: int
) -> None:
    """Create the missing partition rows of ``projections`` (``count`` partitions), each at the
    projection's unpartitioned position if it has one (every event up to it is applied, in
    every partition), else at 0."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        for projection in projections:
            plain = connection.execute(
                "SELECT seq, event FROM tracking WHERE projection = ?", (projection,)
            ).fetchone()
            connection.executemany(
                "INSERT INTO tracking (projection, seq, version, event) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (projection) DO NOTHING",
                [
                    (
                        f"{projection}{PARTITION_ROW}{p}",
                        int(plain[0]) if plain else 0,
                        VERSIONS.get(projection, 1),
                        plain[1] if plain else None,
                    )
                    for p in range(count)
                ],
            )
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise


def tracked_seqs(connection: sqlite3.Connection, projections: list[str]) -> dict[str, int]:
    """The last stream sequence each of ``projections`` committed (0 if none), in one query."""
    positions = dict.fromkeys(projections, 0)
    for name, seq in connection.execute("SELECT projection, seq FROM tracking"):
        if name in positions:
            positions[name] = int(seq)
    return positions


def set_tracked_seqs(
    connection: sqlite3.Connection,
    positions: dict[str, int],
    events: Mapping[int, str] | None = None,
) -> None:
    """Record each projection's processed sequence (inside the caller's transaction), in one
    statement, with the identity of the event there (``events``, by sequence: see
    :meth:`~memstream.projections.ports.LogRecord.identity`); a row whose sequence did not
    move keeps the identity it had. A new row records the projection's version."""
    if not positions:
        return
    events = events or {}
    connection.execute(
        "INSERT INTO tracking (projection, seq, version, event) VALUES "
        + ", ".join(["(?, ?, ?, ?)"] * len(positions))
        + " ON CONFLICT (projection) DO UPDATE SET seq = excluded.seq, event = "
        "coalesce(excluded.event, CASE WHEN tracking.seq = excluded.seq THEN tracking.event END)",
        [
            value
            for name, seq in positions.items()
            for value in (name, seq, VERSIONS.get(projection_of(name), 1), events.get(seq))
        ],
    )


def tracked_marks(connection: sqlite3.Connection) -> list[tuple[str, int, str | None]]:
    """Every tracking row past 0: its name, its sequence and the identity of the event there
    (``None``: recorded before identities were, or by a writer that had none)."""
    return [
        (str(name), int(seq), None if event is None else str(event))
        for name, seq, event in connection.execute(
            "SELECT projection, seq, event FROM tracking WHERE seq > 0 ORDER BY projection"
        )
    ]


def tracked_versions(connection: sqlite3.Connection) -> dict[str, int]:
    """The version each projection with a tracking row was projected by."""
    return {
        str(name): int(version)
        for name, version in connection.execute("SELECT projection, version FROM tracking")
    }


def renew_changed_projections(
    connection: sqlite3.Connection, projections: Sequence[str]
) -> list[str]:
    """Empty each of ``projections`` whose rows were written by another version of it than
    this code's (:data:`~memstream.projections.registry.VERSIONS`), so that it is projected again
    from the log; returns their names. Projections without rows are left alone."""
    found = changed_versions(tracked_versions(connection).items(), projections)
    changed = [name for name in projections if name in found]
    for name in changed:
        logger.warning(
            "projection %s: its rows are of version %d, this code writes version %d; "
            "emptying it to project it again from the log",
            name,
            found[name],
            VERSIONS.get(name, 1),
        )
        drop_projection(connection, name)
    return changed


def renew_vectors_of_other_models(connection: sqlite3.Connection, model: str) -> bool:
    """Empty the ``vectors`` projection when it holds vectors of another model than ``model``
    (the embedding model was changed): it is projected again from the log, never mixed."""
    row = connection.execute(
        "SELECT model FROM memory_vectors WHERE model != ? LIMIT 1", (model,)
    ).fetchone()
    if row is None:
        return False
    logger.warning(
        "projection vectors: it holds vectors of model %s, the indexer embeds with %s; "
        "emptying it to index the log again",
        row[0],
        model,
    )
    drop_projection(connection, "vectors")
    return True


def set_tracked_seq(
    connection: sqlite3.Connection, projection: str, seq: int, event: str | None = None
) -> None:
    """Record ``seq`` as processed, the event there being ``event`` (inside the caller's
    transaction)."""
    if event is None:  # (a statement any schema version takes)
        connection.execute(
            "INSERT INTO tracking (projection, seq) VALUES (?, ?) "
            "ON CONFLICT (projection) DO UPDATE SET seq = excluded.seq",
            (projection, seq),
        )
        return
    connection.execute(
        "INSERT INTO tracking (projection, seq, event) VALUES (?, ?, ?) "
        "ON CONFLICT (projection) DO UPDATE SET seq = excluded.seq, event = excluded.event",
        (projection, seq, event),
    )


def record_dead_letter(
    connection: sqlite3.Connection,
    projection: str,
    seq: int,
    subject: str,
    topic: str,
    error: str,
    attempts: int,
) -> None:
    """Remember an event a projection could not apply (inside the caller's transaction)."""
    connection.execute(
        "INSERT OR REPLACE INTO dead_letters (projection, seq, subject, topic, error, attempts) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (projection, seq, subject, topic, error[:2000], attempts),
    )


def dead_letters(connection: sqlite3.Connection) -> list[dict[str, object]]:
    """Every recorded dead letter, oldest first."""
    return shared_dead_letters(connection, "seq, projection")


def forget_dead_letters(connection: sqlite3.Connection, letters: Sequence[tuple[str, int]]) -> int:
    """Delete the dead letters ``(projection, seq)`` in a transaction of their own; how many
    there were."""
    if not letters:
        return 0
    connection.execute("BEGIN IMMEDIATE")
    try:
        before = connection.total_changes
        connection.executemany(
            "DELETE FROM dead_letters WHERE projection = ? AND seq = ?", list(letters)
        )
        forgotten = connection.total_changes - before
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    return forgotten


def drop_projection(connection: sqlite3.Connection, projection: str) -> None:
    """Empty a projection's tables and reset its tracking (for a rebuild from the log)."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        for table in PROJECTION_TABLES[projection]:
            connection.execute(_EMPTY.get(table, f"DELETE FROM {table}"))
        # Position 0, of this code's version: what is projected next is written by it.
        connection.execute(
            "INSERT INTO tracking (projection, seq, version) VALUES (?, 0, ?) "
            "ON CONFLICT (projection) DO UPDATE SET seq = 0, version = excluded.version, "
            "event = NULL",
            (projection, VERSIONS.get(projection, 1)),
        )
        connection.execute(  # and each partition's
            "UPDATE tracking SET seq = 0, version = ?, event = NULL "
            "WHERE substr(projection, 1, ?) = ?",
            (VERSIONS.get(projection, 1), len(projection) + 1, projection + PARTITION_ROW),
        )
        connection.execute("DELETE FROM dead_letters WHERE projection = ?", (projection,))
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
