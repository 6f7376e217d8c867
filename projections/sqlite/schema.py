"""The SQLite read model's schema: its versioned migrations, applied in order, each once."""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 17
# ``PRAGMA application_id`` of a memstream read model ("MSDB"), set by migration
# APPLICATION_ID_VERSION. A database at a lower version without it is an older memstream read
# model; any other non-empty database without it is foreign.
APPLICATION_ID = 0x4D534442
APPLICATION_ID_VERSION = 6

# Each version's statements, run in one transaction with the versions before it.
MIGRATIONS: dict[int, str] = {
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


def migrate(connection: sqlite3.Connection, target: int = SCHEMA_VERSION) -> None:
    """Bring the schema to ``target`` (default :data:`SCHEMA_VERSION`; idempotent).

    Safe for processes opening one file at once: the version is read again inside the write
    transaction (``BEGIN IMMEDIATE`` serializes them), so a late opener finds the work done.
    """
    if schema_version(connection) >= target:
        return
    connection.execute("BEGIN IMMEDIATE")
    try:
        current = schema_version(connection)
        for version in range(current + 1, target + 1):
            for statement in MIGRATIONS[version].split(";"):
                if statement.strip():
                    connection.execute(statement)
        if current < target:
            connection.execute(f"PRAGMA user_version = {target}")
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise


def schema_version(connection: sqlite3.Connection) -> int:
    """The version the file's schema is at (``PRAGMA user_version``; 0: none yet)."""
    return int(connection.execute("PRAGMA user_version").fetchone()[0])
