"""SQLite read-model database: connection settings, versioned schema, tracking and dead letters."""

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
from memstream.projections.tracking import PARTITION_ROW, projection_of

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 17
# ``PRAGMA application_id`` of a memstream read model ("MSDB"), set by migration
# APPLICATION_ID_VERSION. A database at a lower version without it is an older memstream read
# model; any other non-empty database without it is foreign.
APPLICATION_ID = 0x4D534442
APPLICATION_ID_VERSION = 6
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

_MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE IF NOT EXISTS tracking (
        projection TEXT PRIMARY KEY,
        seq INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS dead_letters (
        projection TEXT NOT NULL,
        seq INTEGER NOT NULL,
        subject TEXT NOT NULL,
        topic TEXT NOT NULL,
        error TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        recorded_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        PRIMARY KEY (projection, seq)
    );
    CREATE TABLE IF NOT EXISTS session_keys (
        sid INTEGER PRIMARY KEY,
        namespace TEXT NOT NULL,
        session_id TEXT NOT NULL,
        UNIQUE (namespace, session_id)
    );
    CREATE TABLE IF NOT EXISTS messages (
        mid INTEGER PRIMARY KEY,
        sid INTEGER NOT NULL,
        id TEXT NOT NULL,
        parent_id TEXT,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        position INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        child_count INTEGER NOT NULL DEFAULT 0,
        UNIQUE (sid, id)
    );
    CREATE INDEX IF NOT EXISTS messages_children ON messages (sid, parent_id, position);
    CREATE INDEX IF NOT EXISTS messages_leaves ON messages (sid, position) WHERE child_count = 0;
    CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
        text, tokenize = 'porter unicode61'
    );
    CREATE TABLE IF NOT EXISTS compactions (
        cid INTEGER PRIMARY KEY,
        sid INTEGER NOT NULL,
        id TEXT NOT NULL,
        summary TEXT NOT NULL,
        from_message_id TEXT NOT NULL,
        to_message_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS compactions_session ON compactions (sid, position);
    """,
    # The message FTS gets a ``scope`` column holding the session key (``sid``) as a token, so
    # a session's search is one FTS5 query instead of a ``messages`` lookup for every match in
    # the whole table to check its session, which costs more the more of the matches are other
    # sessions' (bench/RESULTS.md, 'Figures moved from code comments').
    2: """
    CREATE VIRTUAL TABLE messages_fts_v2 USING fts5(
        text, scope, tokenize = 'porter unicode61'
    );
    INSERT INTO messages_fts_v2 (rowid, text, scope)
        SELECT f.rowid, f.text, m.sid FROM messages_fts AS f JOIN messages AS m ON m.mid = f.rowid;
    DROP TABLE messages_fts;
    ALTER TABLE messages_fts_v2 RENAME TO messages_fts;
    """,
    # Context read models: built-in block documents, cached prompts, loaded skills, and the
    # entries of search blocks with their own FTS5 index (scope = the block's integer key).
    3: """
    CREATE TABLE context_blocks (
        namespace TEXT NOT NULL,
        session_id TEXT NOT NULL,
        label TEXT NOT NULL,
        key TEXT NOT NULL,
        content TEXT NOT NULL,
        seq INTEGER NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (namespace, session_id, label)
    );
    CREATE TABLE cached_prompts (
        namespace TEXT NOT NULL,
        session_id TEXT NOT NULL,
        prompt TEXT NOT NULL,
        seq INTEGER NOT NULL,
        frozen_at TEXT NOT NULL,
        PRIMARY KEY (namespace, session_id)
    );
    CREATE TABLE loaded_skills (
        namespace TEXT NOT NULL,
        session_id TEXT NOT NULL,
        label TEXT NOT NULL,
        key TEXT NOT NULL,
        seq INTEGER NOT NULL,
        PRIMARY KEY (namespace, session_id, label, key)
    );
    CREATE TABLE search_blocks (
        bid INTEGER PRIMARY KEY,
        namespace TEXT NOT NULL,
        key TEXT NOT NULL,
        UNIQUE (namespace, key)
    );
    CREATE TABLE search_entries (
        eid INTEGER PRIMARY KEY,
        bid INTEGER NOT NULL,
        key TEXT NOT NULL,
        content TEXT NOT NULL,
        seq INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        UNIQUE (bid, key)
    );
    CREATE VIRTUAL TABLE search_entries_fts USING fts5(
        text, scope, tokenize = 'porter unicode61'
    );
    """,
    # A message links to its parent's row (``parent_mid``) as well as its id, so that a path walk
    # follows integer primary keys instead of (sid, id) text-index lookups: each hop is one b-tree
    # search instead of two (the index, then the row; bench/RESULTS.md,
    # 'Figures moved from code comments'). NULL while the parent is not stored (deleted or unknown).
    4: """
    ALTER TABLE messages ADD COLUMN parent_mid INTEGER;
    UPDATE messages SET parent_mid = (
        SELECT p.mid FROM messages AS p WHERE p.sid = messages.sid AND p.id = messages.parent_id
    ) WHERE parent_id IS NOT NULL;
    """,
    # A read-model copy has an identity, created with it and kept inside it: its durable
    # consumers are named from it, so any number of copies project the whole stream each.
    5: """
    CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    INSERT INTO meta (key, value) VALUES ('copy_id', lower(hex(randomblob(6))));
    """,
    # Marks the file as a memstream read model, so that a foreign database is not taken for one.
    APPLICATION_ID_VERSION: f"PRAGMA application_id = {APPLICATION_ID}",
    # Each message carries aggregates of its path (``depth``: hops below its root;
    # ``path_bytes``: bytes of the rows root→it) and each session its message count, so that a
    # recent-history read visits only its window (the path's length and total bytes are the
    # leaf's), and every walk is bounded by the session's size instead of a fixed depth.
    7: """
    ALTER TABLE messages ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE messages ADD COLUMN path_bytes INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE session_keys ADD COLUMN messages INTEGER NOT NULL DEFAULT 0;
    UPDATE session_keys SET messages = (
        SELECT count(*) FROM messages WHERE messages.sid = session_keys.sid
    );
    WITH RECURSIVE walk (mid, sid, id, depth, path_bytes) AS (
        SELECT mid, sid, id, 0, bytes FROM messages WHERE parent_mid IS NULL
        UNION
        SELECT c.mid, c.sid, c.id, walk.depth + 1, walk.path_bytes + c.bytes
        FROM walk JOIN messages AS c
        ON c.sid = walk.sid AND c.parent_id = walk.id AND c.parent_mid = walk.mid
    )
    UPDATE messages SET depth = walk.depth, path_bytes = walk.path_bytes
    FROM walk WHERE walk.mid = messages.mid;
    """,
    # Each session's decision state, kept by the sessions projection in the same transaction as
    # its messages: the stream sequence and aggregate version of its last event, its frozen
    # prompt and loaded skills. A writer restores a session from it plus the events after it
    # instead of replaying the session's subject. Sessions projected before have no such row,
    # so the sessions projection is emptied here and projected again from the log.
    8: """
    CREATE TABLE session_state (
        namespace TEXT NOT NULL,
        session_id TEXT NOT NULL,
        last_seq INTEGER NOT NULL,
        version INTEGER NOT NULL,
        frozen_prompt TEXT,
        loaded_skills TEXT NOT NULL DEFAULT '[]',
        sid INTEGER,
        PRIMARY KEY (namespace, session_id)
    ) WITHOUT ROWID;
    DELETE FROM messages_fts;
    DELETE FROM messages;
    DELETE FROM compactions;
    DELETE FROM session_keys;
    DELETE FROM dead_letters WHERE projection = 'sessions';
    DELETE FROM tracking WHERE projection = 'sessions';
    """,
    # Each built-in block's aggregate version, and each search block's last event and version,
    # kept with their content: a writer restores a block from them instead of replaying its
    # subject (every write of a block carries its whole content). Blocks projected before have
    # no version, so the context projection is emptied here and projected again from the log.
    9: """
    ALTER TABLE context_blocks ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE search_blocks ADD COLUMN last_seq INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE search_blocks ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
    DELETE FROM context_blocks;
    DELETE FROM cached_prompts;
    DELETE FROM loaded_skills;
    DELETE FROM search_entries_fts;
    DELETE FROM search_entries;
    DELETE FROM search_blocks;
    DELETE FROM dead_letters WHERE projection = 'context';
    DELETE FROM tracking WHERE projection = 'context';
    """,
    # A session's messages take one contiguous row-id range (``sid << 32 | n``, see
    # ``message_rows``), and so do their FTS5 rows, which lose the ``scope`` column: a session's
    # search restricts the query to its row-id range, which FTS5 seeks to, instead of ANDing a
    # per-session token (whose posting list is as long as the session: bench/RESULTS.md,
    # 'Figures moved from code comments'). The FTS5 table is contentless: it indexes each message's
    # text without keeping a second copy of it (the text derives from ``messages.content``; see
    # ``session_writes.indexed_text``). Row ids change, so the sessions projection is emptied here
    # and projected again from the log.
    10: """
    DROP TABLE messages_fts;
    CREATE VIRTUAL TABLE messages_fts USING fts5(
        text, content = '', tokenize = 'porter unicode61'
    );
    DELETE FROM messages;
    DELETE FROM compactions;
    DELETE FROM session_keys;
    DELETE FROM session_state;
    DELETE FROM dead_letters WHERE projection = 'sessions';
    DELETE FROM tracking WHERE projection = 'sessions';
    """,
    # Each projection's version beside its position (see ports.ProjectionSpec): a projector
    # that finds another one empties that projection and projects it again from the log. Rows
    # written so far are of version 1, the first of every projection.
    11: """
    ALTER TABLE tracking ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
    """,
    # The registry projection: one row per registered session (SessionManager), listed by the
    # log position of its last event. Built from the log by the projector (no tracking row yet).
    12: """
    CREATE TABLE session_registry (
        namespace TEXT NOT NULL,
        session_id TEXT NOT NULL,
        name TEXT NOT NULL,
        parent_session_id TEXT,
        model TEXT,
        source TEXT,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        cost REAL NOT NULL DEFAULT 0,
        end_reason TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        updated_seq INTEGER NOT NULL,
        forked_from_message_id TEXT,
        record_seq INTEGER NOT NULL,
        record_version INTEGER NOT NULL,
        PRIMARY KEY (namespace, session_id)
    ) WITHOUT ROWID;
    CREATE INDEX session_registry_recent ON session_registry (namespace, updated_seq);
    """,
    # Agent Memory (the ``memory`` projection): profiles (``pid`` keys their rows, ``scope``
    # = "p<pid>" is their token in the FTS indexes), raw messages, memories with their sources
    # and history, extraction sources; and the ``vectors`` projection's embeddings, keyed by
    # names (it is projected apart from ``memory``, so it cannot share its keys).
    13: """
    CREATE TABLE memory_profiles (
        pid INTEGER PRIMARY KEY,
        namespace TEXT NOT NULL,
        profile TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        seq INTEGER NOT NULL,
        UNIQUE (namespace, profile)
    );
    CREATE TABLE memory_messages (
        rid INTEGER PRIMARY KEY,
        pid INTEGER NOT NULL,
        id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        timestamp TEXT NOT NULL,
        seq INTEGER NOT NULL,
        scope TEXT NOT NULL,
        UNIQUE (pid, id)
    );
    CREATE INDEX memory_messages_session ON memory_messages (pid, session_id);
    CREATE VIRTUAL TABLE memory_messages_fts USING fts5(
        content, scope, content = 'memory_messages', content_rowid = 'rid',
        tokenize = 'porter unicode61'
    );
    CREATE TABLE memories (
        rid INTEGER PRIMARY KEY,
        pid INTEGER NOT NULL,
        id TEXT NOT NULL,
        type TEXT NOT NULL,
        topic_key TEXT NOT NULL,
        summary TEXT NOT NULL,
        content TEXT NOT NULL,
        keywords TEXT NOT NULL,
        queries TEXT NOT NULL,
        session_id TEXT,
        event_time TEXT,
        source TEXT NOT NULL,
        extractor TEXT NOT NULL,
        superseded_by TEXT,
        supersedes TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        seq INTEGER NOT NULL,
        scope TEXT NOT NULL,
        UNIQUE (pid, id)
    );
    CREATE INDEX memories_topic ON memories (pid, topic_key);
    CREATE INDEX memories_session ON memories (pid, session_id);
    CREATE INDEX memories_time ON memories (pid, event_time) WHERE event_time IS NOT NULL;
    CREATE INDEX memories_type ON memories (pid, type, rid);
    CREATE VIRTUAL TABLE memories_fts USING fts5(
        summary, content, keywords, queries, scope,
        content = 'memories', content_rowid = 'rid', tokenize = 'porter unicode61'
    );
    CREATE TABLE memory_sources (
        pid INTEGER NOT NULL,
        message_id TEXT NOT NULL,
        memory_rid INTEGER NOT NULL,
        PRIMARY KEY (pid, message_id, memory_rid)
    ) WITHOUT ROWID;
    CREATE INDEX memory_sources_memory ON memory_sources (memory_rid);
    CREATE TABLE memory_history (
        pid INTEGER NOT NULL,
        memory_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        at TEXT NOT NULL,
        action TEXT NOT NULL,
        other_id TEXT,
        PRIMARY KEY (pid, memory_id, seq, action)
    ) WITHOUT ROWID;
    CREATE TABLE memory_extractions (
        pid INTEGER NOT NULL,
        source TEXT NOT NULL,
        session_id TEXT,
        seq INTEGER NOT NULL,
        extracted_seq INTEGER,
        memories INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (pid, source)
    ) WITHOUT ROWID;
    CREATE TABLE memory_vectors (
        namespace TEXT NOT NULL,
        profile TEXT NOT NULL,
        kind TEXT NOT NULL,
        item_id TEXT NOT NULL,
        session_id TEXT,
        model TEXT NOT NULL,
        vector BLOB NOT NULL,
        seq INTEGER NOT NULL,
        PRIMARY KEY (namespace, profile, kind, item_id)
    ) WITHOUT ROWID;
    CREATE INDEX memory_vectors_session ON memory_vectors (namespace, profile, session_id);
    """,
    # The check of a profile's cached vector matrix (count and last seq of one kind) reads this
    # narrow index instead of every row's vector.
    14: """
    CREATE INDEX memory_vectors_state ON memory_vectors (namespace, profile, kind, seq);
    """,
    # The analytics projection: daily counters per namespace, model and source, and each
    # session's model, source and first day (the sessions per day).
    15: """
    CREATE TABLE analytics_daily (
        namespace TEXT NOT NULL,
        day TEXT NOT NULL,
        model TEXT NOT NULL,
        source TEXT NOT NULL,
        metric TEXT NOT NULL,
        value INTEGER NOT NULL,
        PRIMARY KEY (namespace, day, model, source, metric)
    ) WITHOUT ROWID;
    CREATE TABLE analytics_sessions (
        namespace TEXT NOT NULL,
        session_id TEXT NOT NULL,
        first_day TEXT NOT NULL,
        model TEXT NOT NULL,
        source TEXT NOT NULL,
        registered INTEGER NOT NULL,
        PRIMARY KEY (namespace, session_id)
    ) WITHOUT ROWID;
    """,
    # Analytics counters per origin (the session or profile whose events made them) and per
    # session counted for, and each deleted session's and profile's deletion sequence: a purge
    # (purge.events_purged) removes what the log no longer holds. Counted again from the log.
    16: """
    DROP TABLE analytics_daily;
    CREATE TABLE analytics_daily (
        namespace TEXT NOT NULL,
        day TEXT NOT NULL,
        model TEXT NOT NULL,
        source TEXT NOT NULL,
        metric TEXT NOT NULL,
        session_id TEXT NOT NULL,
        profile TEXT NOT NULL,
        value INTEGER NOT NULL,
        PRIMARY KEY (namespace, day, model, source, metric, session_id, profile)
    ) WITHOUT ROWID;
    CREATE INDEX analytics_daily_session ON analytics_daily (namespace, session_id);
    CREATE INDEX analytics_daily_profile ON analytics_daily (namespace, profile)
        WHERE profile <> '';
    CREATE TABLE analytics_units (
        namespace TEXT NOT NULL,
        kind TEXT NOT NULL,
        id TEXT NOT NULL,
        last_seq INTEGER NOT NULL,
        PRIMARY KEY (namespace, kind, id)
    ) WITHOUT ROWID;
    CREATE INDEX analytics_units_seq ON analytics_units (last_seq);
    DELETE FROM analytics_sessions;
    DELETE FROM dead_letters WHERE projection = 'analytics';
    DELETE FROM tracking WHERE projection = 'analytics';
    """,
    # The identity of the event at each tracked sequence: a copy checks it against the log, so
    # that a log that lost or replaced its tail is noticed (workers/log/log_position.py).
    17: """
    ALTER TABLE tracking ADD COLUMN event TEXT;
    """,
}

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


def migrate(connection: sqlite3.Connection, target: int = SCHEMA_VERSION) -> None:
    """Bring the schema to ``target`` (default :data:`SCHEMA_VERSION`; idempotent).

    Safe for processes opening one file at once: the version is read again inside the write
    transaction (``BEGIN IMMEDIATE`` serializes them), so a late opener finds the work done.
    """
    if _user_version(connection) >= target:
        return
    connection.execute("BEGIN IMMEDIATE")
    try:
        current = _user_version(connection)
        for version in range(current + 1, target + 1):
            for statement in _MIGRATIONS[version].split(";"):
                if statement.strip():
                    connection.execute(statement)
        if current < target:
            connection.execute(f"PRAGMA user_version = {target}")
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise


def _user_version(connection: sqlite3.Connection) -> int:
    return int(connection.execute("PRAGMA user_version").fetchone()[0])


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
