"""Applies context read-model writes to SQLite (blocks, prompts, search entries + FTS5, skills)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from memstream.projections.context_projector import ContextWrite, IndexEntry
from memstream.projections.sql import context
from memstream.projections.sql.dialect import SQLITE


def search_block_key(connection: sqlite3.Connection, namespace: str, key: str) -> int:
    """The integer key of a search block (its FTS scope token), created on first use."""
    row = connection.execute(
        "SELECT bid FROM search_blocks WHERE namespace = ? AND key = ?", (namespace, key)
    ).fetchone()
    if row:
        return int(row[0])
    cursor = connection.execute(
        "INSERT INTO search_blocks (namespace, key) VALUES (?, ?)", (namespace, key)
    )
    return int(cursor.lastrowid or 0)


def apply_context_writes(connection: sqlite3.Connection, writes: Iterable[ContextWrite]) -> None:
    """Apply writes inside the caller's transaction."""
    context.apply_context_writes(connection, SQLITE, writes, _index_entry)


def _index_entry(connection: sqlite3.Connection, write: IndexEntry) -> None:
    bid = search_block_key(connection, write.namespace, write.block_key)
    # The block's last event and version: what a writer restores the block from.
    connection.execute(
        "UPDATE search_blocks SET last_seq = ?, version = ? WHERE bid = ?",
        (write.seq, write.version, bid),
    )
    row = connection.execute(
        "SELECT eid FROM search_entries WHERE bid = ? AND key = ?", (bid, write.entry_key)
    ).fetchone()
    if row is None:
        cursor = connection.execute(
            "INSERT INTO search_entries (bid, key, content, seq, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (bid, write.entry_key, write.content, write.seq, write.updated_at, write.updated_at),
        )
        eid = int(cursor.lastrowid or 0)
    else:
        eid = int(row[0])
        connection.execute(
            "UPDATE search_entries SET content = ?, seq = ?, updated_at = ? WHERE eid = ?",
            (write.content, write.seq, write.updated_at, eid),
        )
        connection.execute("DELETE FROM search_entries_fts WHERE rowid = ?", (eid,))
    connection.execute(
        "INSERT INTO search_entries_fts (rowid, text, scope) VALUES (?, ?, ?)",
        (eid, write.content, bid),
    )
