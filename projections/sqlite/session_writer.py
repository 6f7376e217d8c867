"""Applies session read-model writes to SQLite (messages tree, FTS5, compaction overlays)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable

from memstream.projections.session_writes import (
    ClearSession,
    DeleteMessages,
    InsertCompaction,
    InsertMessage,
    RecordPosition,
    RecordPrompt,
    RecordSkill,
    SessionWrite,
    UpdateMessage,
)


def session_key(connection: sqlite3.Connection, namespace: str, session_id: str) -> int:
    """The integer key of a session, created on first use."""
    row = connection.execute(
        "SELECT sid FROM session_keys WHERE namespace = ? AND session_id = ?",
        (namespace, session_id),
    ).fetchone()
    if row:
        return int(row[0])
    cursor = connection.execute(
        "INSERT INTO session_keys (namespace, session_id) VALUES (?, ?)", (namespace, session_id)
    )
    return int(cursor.lastrowid or 0)


def apply_session_writes(connection: sqlite3.Connection, writes: Iterable[SessionWrite]) -> None:
    """Apply writes inside the caller's transaction."""
    for write in writes:
        if isinstance(write, RecordPosition | RecordPrompt | RecordSkill):
            _record_state(connection, write)
            continue
        sid = session_key(connection, write.namespace, write.session_id)
        if isinstance(write, InsertMessage):
            _insert(connection, sid, write)
        elif isinstance(write, UpdateMessage):
            _update(connection, sid, write)
        elif isinstance(write, DeleteMessages):
            for message_id in write.message_ids:
                _delete(connection, sid, message_id)
        elif isinstance(write, ClearSession):
            connection.execute(
                "DELETE FROM messages_fts WHERE rowid IN (SELECT mid FROM messages WHERE sid = ?)",
                (sid,),
            )
            connection.execute("DELETE FROM messages WHERE sid = ?", (sid,))
            connection.execute("DELETE FROM compactions WHERE sid = ?", (sid,))
            # A clear also unloads the session's skills (its frozen prompt stays).
            connection.execute(
                "UPDATE session_state SET loaded_skills = '[]' "
                "WHERE namespace = ? AND session_id = ?",
                (write.namespace, write.session_id),
            )
        elif isinstance(write, InsertCompaction):
            connection.execute(
                "INSERT INTO compactions (sid, id, summary, from_message_id, to_message_id, "
                "position, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    sid,
                    write.compaction_id,
                    write.summary,
                    write.from_message_id,
                    write.to_message_id,
                    write.position,
                    write.created_at,
                ),
            )


def _insert(connection: sqlite3.Connection, sid: int, write: InsertMessage) -> None:
    # One statement: the domain never appends an existing id (keep the first content if it
    # did), and a message re-appended after a delete adopts the orphans that point at it.
    cursor = connection.execute(
        "INSERT INTO messages (sid, id, parent_id, parent_mid, role, content, bytes, position, "
        "created_at, child_count) VALUES (?1, ?2, ?3, "
        "(SELECT mid FROM messages WHERE sid = ?1 AND id = ?3), ?4, ?5, ?6, ?7, ?8, "
        "(SELECT count(*) FROM messages WHERE sid = ?1 AND parent_id = ?2)) "
        "ON CONFLICT (sid, id) DO NOTHING",
        (
            sid,
            write.message_id,
            write.parent_id,
            write.role,
            write.content,
            len(write.content.encode("utf-8", "surrogatepass")),
            write.position,
            write.created_at,
        ),
    )
    if cursor.rowcount != 1:
        return
    mid = cursor.lastrowid
    if write.parent_id is not None:
        connection.execute(
            "UPDATE messages SET child_count = child_count + 1 WHERE sid = ? AND id = ?",
            (sid, write.parent_id),
        )
    # Orphans left by a delete of this id point at it again (rare: only after a delete).
    connection.execute(
        "UPDATE messages SET parent_mid = ? WHERE sid = ? AND parent_id = ? AND parent_mid IS NULL",
        (mid, sid, write.message_id),
    )
    if write.text:
        connection.execute(
            "INSERT INTO messages_fts (rowid, text, scope) VALUES (?, ?, ?)",
            (mid, write.text, sid),
        )


def _update(connection: sqlite3.Connection, sid: int, write: UpdateMessage) -> None:
    row = connection.execute(
        "SELECT mid FROM messages WHERE sid = ? AND id = ?", (sid, write.message_id)
    ).fetchone()
    if row is None:
        return
    mid = row[0]
    connection.execute(
        "UPDATE messages SET content = ?, bytes = ? WHERE mid = ?",
        (write.content, len(write.content.encode("utf-8", "surrogatepass")), mid),
    )
    connection.execute("DELETE FROM messages_fts WHERE rowid = ?", (mid,))
    if write.text:
        connection.execute(
            "INSERT INTO messages_fts (rowid, text, scope) VALUES (?, ?, ?)",
            (mid, write.text, sid),
        )


def _delete(connection: sqlite3.Connection, sid: int, message_id: str) -> None:
    row = connection.execute(
        "SELECT mid, parent_id FROM messages WHERE sid = ? AND id = ?", (sid, message_id)
    ).fetchone()
    if row is None:
        return
    mid, parent_id = row
    connection.execute("DELETE FROM messages_fts WHERE rowid = ?", (mid,))
    connection.execute("DELETE FROM messages WHERE mid = ?", (mid,))
    # Children keep their parent id but lose the link: a later row may reuse this rowid.
    connection.execute(
        "UPDATE messages SET parent_mid = NULL WHERE sid = ? AND parent_id = ?", (sid, message_id)
    )
    if parent_id is not None:
        connection.execute(
            "UPDATE messages SET child_count = child_count - 1 WHERE sid = ? AND id = ?",
            (sid, parent_id),
        )


def _record_state(
    connection: sqlite3.Connection, write: RecordPosition | RecordPrompt | RecordSkill
) -> None:
    """The session's decision-state row. Its position comes last in an event's writes and
    carries the session's key (``sid``, once it has had messages), so that restoring a session
    reads one row."""
    key = (write.namespace, write.session_id)
    if isinstance(write, RecordPosition):
        connection.execute(
            "INSERT INTO session_state (namespace, session_id, last_seq, version, sid) "
            "VALUES (?1, ?2, ?3, ?4, "
            "(SELECT sid FROM session_keys WHERE namespace = ?1 AND session_id = ?2)) "
            "ON CONFLICT (namespace, session_id) DO UPDATE SET "
            "last_seq = excluded.last_seq, version = excluded.version, sid = excluded.sid",
            (*key, write.seq, write.version),
        )
        return
    # The event's position follows in the same transaction; until then the row may be new.
    connection.execute(
        "INSERT OR IGNORE INTO session_state (namespace, session_id, last_seq, version) "
        "VALUES (?, ?, 0, 0)",
        key,
    )
    if isinstance(write, RecordPrompt):
        connection.execute(
            "UPDATE session_state SET frozen_prompt = ? WHERE namespace = ? AND session_id = ?",
            (write.prompt, *key),
        )
        return
    row = connection.execute(
        "SELECT loaded_skills FROM session_state WHERE namespace = ? AND session_id = ?", key
    ).fetchone()
    skills: list[str] = json.loads(row[0])
    # As the aggregate's dict: a skill keeps its place when loaded again.
    if write.loaded and write.skill not in skills:
        skills.append(write.skill)
    elif not write.loaded and write.skill in skills:
        skills.remove(write.skill)
    connection.execute(
        "UPDATE session_state SET loaded_skills = ? WHERE namespace = ? AND session_id = ?",
        (json.dumps(skills), *key),
    )
