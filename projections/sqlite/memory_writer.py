"""Applies memory writes to SQLite: profiles, raw messages and memories with their FTS5 indexes
(external content: the text is kept once), sources, history and extraction sources."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from memstream.projections.memory_projector import (
    AddMemories,
    AddMessages,
    AddSource,
    CreateProfile,
    DeleteMemory,
    DeleteProfile,
    ForgetSession,
    MemoryWrite,
    Supersede,
)

_MEMORY_FTS = ("summary", "content", "keywords", "queries", "scope")


def apply_memory_writes(connection: sqlite3.Connection, writes: Iterable[MemoryWrite]) -> None:
    """Apply writes inside the caller's transaction (each is idempotent: a redelivered event
    changes nothing)."""
    for write in writes:
        if isinstance(write, AddMessages):
            _add_messages(connection, write)
        elif isinstance(write, AddMemories):
            _add_memories(connection, write)
        elif isinstance(write, AddSource):
            pid = _pid(connection, write.namespace, write.profile)
            if pid is not None:
                connection.execute(
                    "INSERT INTO memory_extractions (pid, source, session_id, seq) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (pid, write.source, write.session_id, write.seq),
                )
        elif isinstance(write, Supersede):
            _supersede(connection, write)
        elif isinstance(write, DeleteMemory):
            pid = _pid(connection, write.namespace, write.profile)
            if pid is not None:
                _delete_memories(connection, pid, "id = ?", (write.memory_id,))
                if write.message_ids:
                    _delete_messages(
                        connection,
                        pid,
                        f"id IN ({','.join('?' * len(write.message_ids))})",
                        tuple(write.message_ids),
                    )
        elif isinstance(write, ForgetSession):
            pid = _pid(connection, write.namespace, write.profile)
            if pid is not None:
                _delete_memories(connection, pid, "session_id = ?", (write.session_id,))
                _delete_messages(connection, pid, "session_id = ?", (write.session_id,))
                connection.execute(
                    "DELETE FROM memory_extractions WHERE pid = ? AND session_id = ?",
                    (pid, write.session_id),
                )
        elif isinstance(write, DeleteProfile):
            _delete_profile(connection, write.namespace, write.profile)
        elif isinstance(write, CreateProfile):
            connection.execute(
                "INSERT INTO memory_profiles (namespace, profile, created_at, updated_at, seq) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (write.namespace, write.profile, write.at, write.at, write.seq),
            )


def _pid(connection: sqlite3.Connection, namespace: str, profile: str) -> int | None:
    row = connection.execute(
        "SELECT pid FROM memory_profiles WHERE namespace = ? AND profile = ?",
        (namespace, profile),
    ).fetchone()
    return None if row is None else int(row[0])


def _touch(connection: sqlite3.Connection, pid: int, at: str, seq: int) -> None:
    connection.execute(
        "UPDATE memory_profiles SET updated_at = ?, seq = ? WHERE pid = ?", (at, seq, pid)
    )


def _add_messages(connection: sqlite3.Connection, write: AddMessages) -> None:
    pid = _pid(connection, write.namespace, write.profile)
    if pid is None:
        return
    scope = f"p{pid}"
    for message in write.messages:
        cursor = connection.execute(
            "INSERT INTO memory_messages (pid, id, session_id, role, content, timestamp, seq, "
            "scope) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (
                pid,
                message["id"],
                write.session_id,
                message["role"],
                message["content"],
                message["timestamp"],
                write.seq,
                scope,
            ),
        )
        if cursor.rowcount:
            connection.execute(
                "INSERT INTO memory_messages_fts (rowid, content, scope) VALUES (?, ?, ?)",
                (cursor.lastrowid, message["content"], scope),
            )
    if write.messages:
        _touch(connection, pid, write.messages[-1]["timestamp"], write.seq)


def _add_memories(connection: sqlite3.Connection, write: AddMemories) -> None:
    pid = _pid(connection, write.namespace, write.profile)
    if pid is None:
        return
    scope = f"p{pid}"
    added = 0
    for memory in write.memories:
        keywords = " ".join(memory.get("keywords") or ())
        queries = "\n".join(memory.get("queries") or ())
        cursor = connection.execute(
            "INSERT INTO memories (pid, id, type, topic_key, summary, content, keywords, "
            "queries, session_id, event_time, source, extractor, created_at, updated_at, seq, "
            "scope) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            (
                pid,
                memory["id"],
                memory["type"],
                memory["topic_key"],
                memory["summary"],
                memory["content"],
                keywords,
                queries,
                memory.get("session_id"),
                memory.get("event_time"),
                write.source,
                write.extractor,
                write.at,
                write.at,
                write.seq,
                scope,
            ),
        )
        if not cursor.rowcount:
            continue
        added += 1
        rid = cursor.lastrowid
        connection.execute(
            "INSERT INTO memories_fts (rowid, summary, content, keywords, queries, scope) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (rid, memory["summary"], memory["content"], keywords, queries, scope),
        )
        connection.executemany(
            "INSERT INTO memory_sources (pid, message_id, memory_rid) VALUES (?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            [(pid, message_id, rid) for message_id in memory.get("source_message_ids") or ()],
        )
        connection.execute(
            "INSERT INTO memory_history (pid, memory_id, seq, at, action, other_id) "
            "VALUES (?, ?, ?, ?, 'created', ?) ON CONFLICT DO NOTHING",
            (pid, memory["id"], write.seq, write.at, write.source),
        )
    connection.execute(
        "UPDATE memory_extractions SET extracted_seq = ?, memories = memories + ? "
        "WHERE pid = ? AND source = ?",
        (write.seq, added, pid, write.source),
    )
    _touch(connection, pid, write.at, write.seq)


def _supersede(connection: sqlite3.Connection, write: Supersede) -> None:
    pid = _pid(connection, write.namespace, write.profile)
    if pid is None:
        return
    connection.execute(
        "UPDATE memories SET superseded_by = ?, updated_at = ? WHERE pid = ? AND id = ?",
        (write.superseded_by, write.at, pid, write.memory_id),
    )
    connection.execute(
        "UPDATE memories SET supersedes = ? WHERE pid = ? AND id = ?",
        (write.memory_id, pid, write.superseded_by),
    )
    connection.executemany(
        "INSERT INTO memory_history (pid, memory_id, seq, at, action, other_id) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        [
            (pid, write.memory_id, write.seq, write.at, "superseded", write.superseded_by),
            (pid, write.superseded_by, write.seq, write.at, "supersedes", write.memory_id),
        ],
    )


def _delete_memories(
    connection: sqlite3.Connection, pid: int, where: str, params: tuple[str, ...]
) -> None:
    """Delete memories (with their FTS entries, sources and history); what a deleted memory
    superseded becomes current again, linked to what superseded the deleted one, if any."""
    rows = connection.execute(
        f"SELECT rid, id, supersedes, superseded_by, {', '.join(_MEMORY_FTS)} FROM memories "
        f"WHERE pid = ? AND {where}",
        (pid, *params),
    ).fetchall()
    for rid, memory_id, older, newer, *fts in rows:
        connection.execute(
            "INSERT INTO memories_fts (memories_fts, rowid, summary, content, keywords, queries, "
            "scope) VALUES ('delete', ?, ?, ?, ?, ?, ?)",
            (rid, *fts),
        )
        connection.execute("DELETE FROM memories WHERE rid = ?", (rid,))
        connection.execute("DELETE FROM memory_sources WHERE memory_rid = ?", (rid,))
        connection.execute(
            "DELETE FROM memory_history WHERE pid = ? AND memory_id = ?", (pid, memory_id)
        )
        if older is not None:
            connection.execute(
                "UPDATE memories SET superseded_by = ? WHERE pid = ? AND id = ?",
                (newer, pid, older),
            )
        if newer is not None:
            connection.execute(
                "UPDATE memories SET supersedes = ? WHERE pid = ? AND id = ?",
                (older, pid, newer),
            )
    # Dangling links (the other end deleted in the same statement) are cleared.
    if rows:
        connection.execute(
            "UPDATE memories SET superseded_by = NULL WHERE pid = ? AND superseded_by IS NOT NULL "
            "AND superseded_by NOT IN (SELECT id FROM memories WHERE pid = ?)",
            (pid, pid),
        )
        connection.execute(
            "UPDATE memories SET supersedes = NULL WHERE pid = ? AND supersedes IS NOT NULL "
            "AND supersedes NOT IN (SELECT id FROM memories WHERE pid = ?)",
            (pid, pid),
        )


def _delete_messages(
    connection: sqlite3.Connection, pid: int, where: str, params: tuple[str, ...]
) -> None:
    """Delete raw messages with their FTS entries (external content: given their text)."""
    rows = connection.execute(
        f"SELECT rid, content, scope FROM memory_messages WHERE pid = ? AND {where}",
        (pid, *params),
    ).fetchall()
    connection.executemany(
        "INSERT INTO memory_messages_fts (memory_messages_fts, rowid, content, scope) "
        "VALUES ('delete', ?, ?, ?)",
        rows,
    )
    connection.executemany("DELETE FROM memory_messages WHERE rid = ?", [(r[0],) for r in rows])


def _delete_profile(connection: sqlite3.Connection, namespace: str, profile: str) -> None:
    pid = _pid(connection, namespace, profile)
    if pid is None:
        return
    _delete_memories(connection, pid, "1", ())
    _delete_messages(connection, pid, "1", ())
    for table in ("memory_sources", "memory_history", "memory_extractions"):
        connection.execute(f"DELETE FROM {table} WHERE pid = ?", (pid,))
    connection.execute("DELETE FROM memory_profiles WHERE pid = ?", (pid,))
