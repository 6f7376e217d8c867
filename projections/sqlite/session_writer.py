"""Applies session read-model writes to SQLite (messages tree, FTS5, compaction overlays)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from memstream.projections.session_writes import (
    ClearSession,
    DeleteMessages,
    InsertCompaction,
    InsertMessage,
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
            connection.execute("UPDATE session_keys SET messages = 0 WHERE sid = ?", (sid,))
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


# Moves a subtree's path aggregates by (:depth, :bytes): its root's path changed above it. The
# walk follows the row links down (children by parent id, checked against the link); UNION
# rather than UNION ALL, so that it ends even on a damaged read model whose links form a loop.
_SHIFT_SUBTREE = """
WITH RECURSIVE subtree (mid, id) AS (
    SELECT mid, id FROM messages WHERE mid = :root
    UNION
    SELECT c.mid, c.id FROM subtree JOIN messages AS c
    ON c.sid = :sid AND c.parent_id = subtree.id AND c.parent_mid = subtree.mid
)
UPDATE messages SET depth = depth + :depth, path_bytes = path_bytes + :bytes
WHERE mid IN (SELECT mid FROM subtree)
"""


def _shift_subtree(
    connection: sqlite3.Connection, sid: int, root: int, depth: int, size: int
) -> None:
    if depth or size:
        connection.execute(
            _SHIFT_SUBTREE, {"sid": sid, "root": root, "depth": depth, "bytes": size}
        )


def _insert(connection: sqlite3.Connection, sid: int, write: InsertMessage) -> None:
    # One statement: the domain never appends an existing id (keep the first content if it
    # did); the row takes its path aggregates from its parent's row (a root: depth 0, its own
    # bytes), and a message re-appended after a delete counts the orphans that point at it.
    size = len(write.content.encode("utf-8", "surrogatepass"))
    cursor = connection.execute(
        "INSERT INTO messages (sid, id, parent_id, parent_mid, role, content, bytes, position, "
        "created_at, child_count, depth, path_bytes) "
        "SELECT ?1, ?2, ?3, p.mid, ?4, ?5, ?6, ?7, ?8, "
        "(SELECT count(*) FROM messages WHERE sid = ?1 AND parent_id = ?2), "
        "coalesce(p.depth + 1, 0), coalesce(p.path_bytes, 0) + ?6 "
        "FROM (SELECT 1) LEFT JOIN messages AS p ON p.sid = ?1 AND p.id = ?3 "
        "WHERE true ON CONFLICT (sid, id) DO NOTHING",  # WHERE: parses ON CONFLICT as upsert
        (
            sid,
            write.message_id,
            write.parent_id,
            write.role,
            write.content,
            size,
            write.position,
            write.created_at,
        ),
    )
    if cursor.rowcount != 1:
        return
    mid = cursor.lastrowid
    connection.execute("UPDATE session_keys SET messages = messages + 1 WHERE sid = ?", (sid,))
    if write.parent_id is not None:
        connection.execute(
            "UPDATE messages SET child_count = child_count + 1 WHERE sid = ? AND id = ?",
            (sid, write.parent_id),
        )
    # Orphans left by a delete of this id point at it again (rare: only after a delete), and
    # their subtrees' paths now run through it.
    orphans = connection.execute(
        "SELECT mid, depth, bytes, path_bytes FROM messages "
        "WHERE sid = ? AND parent_id = ? AND parent_mid IS NULL",
        (sid, write.message_id),
    ).fetchall()
    if orphans:
        depth, path_bytes = connection.execute(
            "SELECT depth, path_bytes FROM messages WHERE mid = ?", (mid,)
        ).fetchone()
        for orphan, orphan_depth, orphan_bytes, orphan_path_bytes in orphans:
            connection.execute("UPDATE messages SET parent_mid = ? WHERE mid = ?", (mid, orphan))
            _shift_subtree(
                connection,
                sid,
                orphan,
                depth + 1 - orphan_depth,
                path_bytes + orphan_bytes - orphan_path_bytes,
            )
    if write.text:
        connection.execute(
            "INSERT INTO messages_fts (rowid, text, scope) VALUES (?, ?, ?)",
            (mid, write.text, sid),
        )


def _update(connection: sqlite3.Connection, sid: int, write: UpdateMessage) -> None:
    row = connection.execute(
        "SELECT mid, bytes FROM messages WHERE sid = ? AND id = ?", (sid, write.message_id)
    ).fetchone()
    if row is None:
        return
    mid, old_size = row
    size = len(write.content.encode("utf-8", "surrogatepass"))
    connection.execute(
        "UPDATE messages SET content = ?, bytes = ? WHERE mid = ?", (write.content, size, mid)
    )
    # Every path through this row changes by the difference in size.
    _shift_subtree(connection, sid, mid, 0, size - old_size)
    connection.execute("DELETE FROM messages_fts WHERE rowid = ?", (mid,))
    if write.text:
        connection.execute(
            "INSERT INTO messages_fts (rowid, text, scope) VALUES (?, ?, ?)",
            (mid, write.text, sid),
        )


def _delete(connection: sqlite3.Connection, sid: int, message_id: str) -> None:
    row = connection.execute(
        "SELECT mid, parent_id, depth, path_bytes FROM messages WHERE sid = ? AND id = ?",
        (sid, message_id),
    ).fetchone()
    if row is None:
        return
    mid, parent_id, depth, path_bytes = row
    # Each child becomes the root of its path: its subtree loses this row and all above it.
    children = connection.execute(
        "SELECT mid FROM messages WHERE sid = ? AND parent_id = ? AND parent_mid = ?",
        (sid, message_id, mid),
    ).fetchall()
    for (child,) in children:
        _shift_subtree(connection, sid, child, -(depth + 1), -path_bytes)
    connection.execute("DELETE FROM messages_fts WHERE rowid = ?", (mid,))
    connection.execute("DELETE FROM messages WHERE mid = ?", (mid,))
    connection.execute("UPDATE session_keys SET messages = messages - 1 WHERE sid = ?", (sid,))
    # Children keep their parent id but lose the link: a later row may reuse this rowid.
    connection.execute(
        "UPDATE messages SET parent_mid = NULL WHERE sid = ? AND parent_id = ?", (sid, message_id)
    )
    if parent_id is not None:
        connection.execute(
            "UPDATE messages SET child_count = child_count - 1 WHERE sid = ? AND id = ?",
            (sid, parent_id),
        )
