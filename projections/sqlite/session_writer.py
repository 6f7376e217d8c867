"""Applies session read-model writes to SQLite (messages tree, FTS5, compaction overlays)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any

from memstream.projections.session_projector import (
    ForgetPurged,
    InsertMessage,
    SessionWrite,
    UpdateMessage,
    indexed_text,
)
from memstream.projections.sql.dialect import SQLITE
from memstream.projections.sql.session_tree import (
    Recorded,
    SessionKeys,
    SqlSessionTree,
    Stored,
    size_of,
)
from memstream.projections.sqlite.message_rows import SessionRowsExhausted, mid_range

# A chain of at least this many new messages (an append_messages) is inserted in one
# executemany, its row ids and path aggregates worked out here (see _insert_chain).
CHAIN_ROWS = 8


class SessionRows(SessionKeys):
    """What the writes learnt of the read model, and the writes they still owe it.

    Session keys, and each session's last inserted row (the parent of its next message in a
    chain, found without a lookup): valid inside one transaction, and across transactions of
    one connection while no other connection writes to the file. Whoever applies writes calls
    :meth:`forget` after a rollback and when another connection may have written (the
    projector watches ``PRAGMA data_version``).

    Some writes wait here until :meth:`flush` (before the transaction commits, and before any
    write other than an insert): the FTS5 rows of inserted messages, the children counts of
    their parents, the sessions' message counts and each session's position (only a session's
    last one in a batch is written). FTS5 keeps the terms of a transaction in memory and writes
    them out as one index segment at commit, but also at every statement that opens a statement
    journal, such as an upsert: inserted one by one between the other writes of a batch, the
    rows of a 200-event batch became 200 segments, a segment written per insert
    (bench/RESULTS.md, 'Figures moved from code comments').
    """

    dialect = SQLITE

    __slots__ = ("children", "texts")

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[tuple[int, str]] = []  # (rowid, text) to index
        self.children: list[tuple[int]] = []  # parents (mid) that gained a child

    def flush(self, connection: sqlite3.Connection) -> None:
        """Write what the writes so far still owe the read model."""
        if self.texts:
            # In row-id order: FTS5 writes out what it holds as a segment whenever a row id
            # comes below the one before, and sessions' row ids are ranges of their own.
            self.texts.sort()
            connection.executemany(
                "INSERT INTO messages_fts (rowid, text) VALUES (?, ?)", self.texts
            )
            self.texts.clear()
        if self.children:
            connection.executemany(
                "UPDATE messages SET child_count = child_count + 1 WHERE mid = ?", self.children
            )
            self.children.clear()
        if self.counts:
            connection.executemany(
                "UPDATE session_keys SET messages = messages + ? WHERE sid = ?",
                [(added, sid) for sid, added in self.counts.items() if added],
            )
            self.counts.clear()
        if self.positions:
            # The session's key rides along, so that restoring a session reads one row.
            connection.executemany(
                "INSERT INTO session_state (namespace, session_id, last_seq, version, sid) "
                "VALUES (?1, ?2, ?3, ?4, "
                "(SELECT sid FROM session_keys WHERE namespace = ?1 AND session_id = ?2)) "
                "ON CONFLICT (namespace, session_id) DO UPDATE SET "
                "last_seq = excluded.last_seq, version = excluded.version, sid = excluded.sid",
                [(*key, seq, version) for key, (seq, version) in self.positions.items()],
            )
            self.positions.clear()


def apply_session_writes(
    connection: sqlite3.Connection,
    writes: Iterable[SessionWrite],
    rows: SessionRows | None = None,
) -> None:
    """Apply writes inside the caller's transaction.

    ``rows``: what earlier writes on this connection learnt, see :class:`SessionRows`; the
    caller then writes what they still owe (:meth:`SessionRows.flush`) before it commits.
    Without ``rows`` everything is written before this returns.
    """
    if rows is None:
        rows = SessionRows()
        _apply_session_writes(connection, writes, rows)
        rows.flush(connection)
    else:
        _apply_session_writes(connection, writes, rows)


def _apply_session_writes(
    connection: sqlite3.Connection, writes: Iterable[SessionWrite], rows: SessionRows
) -> None:
    counts = rows.counts
    pending = list(writes)
    index = -1
    row_by_row = 0  # inserts up to this index take the row-by-row path (their chain could not)
    while index + 1 < len(pending):
        index += 1
        write = pending[index]
        if isinstance(write, InsertMessage) and index >= row_by_row:
            run = _chain_from(pending, index)
            if len(run) >= CHAIN_ROWS:
                if _insert_chain(connection, run, rows):
                    index += len(run) - 1
                    continue
                row_by_row = index + len(run)
        if isinstance(write, Recorded):
            SqliteSessionTree.record(connection, write, rows)
            continue
        sid = rows.sid(connection, write.namespace, write.session_id)
        if isinstance(write, InsertMessage):
            stored = _insert(connection, sid, write, rows.tips.get(sid), rows.children)
            if stored is not None:
                rows.stored(stored)
                if write.text:
                    rows.texts.append((stored.mid, write.text))
                counts[sid] = counts.get(sid, 0) + 1
            continue
        # Any other write may change the aggregates of the rows it touches, and may delete
        # search rows or read children counts: what is owed is written first.
        rows.tips.pop(sid, None)
        rows.flush(connection)
        SqliteSessionTree.change(connection, sid, write, counts)


def _clear(connection: sqlite3.Connection, sid: int) -> None:
    """Remove a session's messages (with their search rows) and compactions."""
    _unindex(
        connection,
        connection.execute(
            "SELECT mid, content FROM messages WHERE mid BETWEEN ? AND ?", mid_range(sid)
        ),
    )
    connection.execute("DELETE FROM messages WHERE sid = ?", (sid,))
    connection.execute("DELETE FROM compactions WHERE sid = ?", (sid,))


def _forget_purged(connection: sqlite3.Connection, write: ForgetPurged) -> None:
    """Remove every row of the sessions whose last event is at one of the purged sequences."""
    found = connection.execute(
        "SELECT session_id, sid FROM session_state WHERE namespace = ? "
        "AND last_seq IN (SELECT value FROM json_each(?))",
        (write.namespace, json.dumps(list(write.sequences))),
    ).fetchall()
    for session_id, sid in found:
        if sid is not None:
            _clear(connection, sid)
            connection.execute("DELETE FROM session_keys WHERE sid = ?", (sid,))
        connection.execute(
            "DELETE FROM session_state WHERE namespace = ? AND session_id = ?",
            (write.namespace, session_id),
        )


def _insert(
    connection: sqlite3.Connection,
    sid: int,
    write: InsertMessage,
    last: Stored | None,
    parents: list[tuple[int]],
) -> Stored | None:
    """Insert a message; the inserted row, or ``None`` if its id was already stored (the domain
    never appends an existing id: keep the first content if it did). Its parent's children
    count is owed (added to ``parents``)."""
    # The row takes its path aggregates from its parent's row (a root: depth 0, its own bytes).
    parent_mid, depth, path_bytes = SqliteSessionTree.parent_of(
        connection, sid, write.parent_id, last
    )
    depth += 1
    size = size_of(write.content)
    path_bytes += size
    # The row takes the next id of its session's range. A message re-appended after a delete
    # counts the orphans that point at it.
    low, high = mid_range(sid)
    inserted = connection.execute(
        "INSERT INTO messages (mid, sid, id, parent_id, parent_mid, role, content, bytes, "
        "position, created_at, child_count, depth, path_bytes) VALUES ("
        "(SELECT coalesce(max(mid), ?12) + 1 FROM messages WHERE mid BETWEEN ?12 AND ?13), "
        "?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
        "(SELECT count(*) FROM messages WHERE sid = ?1 AND parent_id = ?2), ?10, ?11) "
        "ON CONFLICT (sid, id) DO NOTHING RETURNING mid, child_count",
        (*_row(sid, write, parent_mid, size), depth, path_bytes, low, high),
    ).fetchall()
    if not inserted:
        return None
    mid, children = inserted[0]
    if mid > high:
        raise SessionRowsExhausted(f"session key {sid}: no row ids left in its range")
    if parent_mid is not None:
        parents.append((parent_mid,))
    stored = Stored(sid, write.message_id, mid, depth, path_bytes)
    if children:  # orphans left by a delete of this id (rare: only after a delete)
        SqliteSessionTree.adopt_orphans(connection, stored)
    return stored


def _row(sid: int, write: InsertMessage, parent_mid: int | None, size: int) -> tuple[Any, ...]:
    """The columns sid .. created_at of a message row."""
    return (
        sid,
        write.message_id,
        write.parent_id,
        parent_mid,
        write.role,
        write.content,
        size,
        write.position,
        write.created_at,
    )


def _chain_from(writes: list[SessionWrite], start: int) -> list[InsertMessage]:
    """The inserts from ``start`` on that form one chain: same session, each message the
    child of the one before."""
    first = writes[start]
    assert isinstance(first, InsertMessage)
    run = [first]
    for write in writes[start + 1 :]:
        previous = run[-1]
        if (
            not isinstance(write, InsertMessage)
            or write.session_id != previous.session_id
            or write.namespace != previous.namespace
            or write.parent_id != previous.message_id
        ):
            break
        run.append(write)
    return run


def _insert_chain(
    connection: sqlite3.Connection, run: list[InsertMessage], rows: SessionRows
) -> bool:
    """Insert a chain of new messages in one ``executemany``: what :func:`_insert` does row by
    row (a lookup, an insert, a children count and an orphan check each), worked out here for
    the whole chain. ``False`` (nothing written) when a message id is stored already or stored
    rows point at one (orphans of a delete): those take the row-by-row path."""
    first = run[0]
    sid = rows.sid(connection, first.namespace, first.session_id)
    ids = [write.message_id for write in run]
    if len(set(ids)) != len(ids):
        return False
    marks = ",".join("?" * len(ids))
    # Two lookups, each on its index ((sid, id) and (sid, parent_id)): in one statement the
    # OR of the two lists made SQLite scan every row of the session, a cost that grew with the
    # session (bench/RESULTS.md, 'Figures moved from code comments').
    for column in ("id", "parent_id"):
        clash = connection.execute(
            f"SELECT 1 FROM messages WHERE sid = ? AND {column} IN ({marks}) LIMIT 1",
            (sid, *ids),
        ).fetchone()
        if clash is not None:
            return False
    parent_mid, depth, path_bytes = SqliteSessionTree.parent_of(
        connection, sid, first.parent_id, rows.tips.get(sid)
    )
    low, high = mid_range(sid)
    (mid,) = connection.execute(
        "SELECT coalesce(max(mid), ?1) FROM messages WHERE mid BETWEEN ?1 AND ?2", (low, high)
    ).fetchone()
    if mid + len(run) > high:
        raise SessionRowsExhausted(f"session key {sid}: no row ids left in its range")
    if parent_mid is not None:
        rows.children.append((parent_mid,))
    values = []
    last = len(run) - 1
    for index, write in enumerate(run):
        mid += 1
        depth += 1
        size = size_of(write.content)
        path_bytes += size
        values.append(
            (
                mid,
                *_row(sid, write, parent_mid, size),
                0 if index == last else 1,  # the next message of the chain is its child
                depth,
                path_bytes,
            )
        )
        if write.text:
            rows.texts.append((mid, write.text))
        parent_mid = mid
    connection.executemany(
        "INSERT INTO messages (mid, sid, id, parent_id, parent_mid, role, content, bytes, "
        "position, created_at, child_count, depth, path_bytes) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        values,
    )
    rows.stored(Stored(sid, run[-1].message_id, mid, depth, path_bytes))
    rows.counts[sid] = rows.counts.get(sid, 0) + len(run)
    return True


def _unindex(connection: sqlite3.Connection, rows: Iterable[tuple[int, str]]) -> None:
    """Remove message rows ``(mid, content)`` from the full-text index. It is contentless (it
    keeps no copy of the text), so each row's terms are named by its text again."""
    connection.executemany(
        "INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', ?, ?)",
        [(mid, text) for mid, content in rows if (text := indexed_text(content))],
    )


class SqliteSessionTree(SqlSessionTree):
    """The session writes written once, on SQLite: its FTS5 index is contentless, so a row's
    terms are named by its text again to delete them."""

    dialect = SQLITE

    @classmethod
    def _unindex(cls, connection: sqlite3.Connection, mid: int, content: str) -> None:
        _unindex(connection, [(mid, content)])

    @classmethod
    def _clear(cls, connection: sqlite3.Connection, sid: int) -> None:
        _clear(connection, sid)

    @classmethod
    def _forget_purged(cls, connection: sqlite3.Connection, write: ForgetPurged) -> None:
        _forget_purged(connection, write)

    @classmethod
    def _update(cls, connection: sqlite3.Connection, sid: int, write: UpdateMessage) -> None:
        row = connection.execute(
            "SELECT mid, bytes, content FROM messages WHERE sid = ? AND id = ?",
            (sid, write.message_id),
        ).fetchone()
        if row is None:
            return
        mid, old_size, old_content = row
        _unindex(connection, [(mid, old_content)])
        size = size_of(write.content)
        connection.execute(
            "UPDATE messages SET content = ?, bytes = ? WHERE mid = ?", (write.content, size, mid)
        )
        # Every path through this row changes by the difference in size.
        cls.shift_subtree(connection, sid, mid, 0, size - old_size)
        if write.text:
            connection.execute(
                "INSERT INTO messages_fts (rowid, text) VALUES (?, ?)", (mid, write.text)
            )
