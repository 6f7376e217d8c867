"""Applies context read-model writes to SQLite (blocks, prompts, search entries + FTS5, skills)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from memstream.projections.context_projector import (
    ClearSkills,
    ContextWrite,
    DropBlock,
    DropPrompt,
    IndexEntry,
    LoadSkill,
    UnloadSkill,
    WriteBlock,
    WritePrompt,
)


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
    for write in writes:
        if isinstance(write, WriteBlock):
            connection.execute(
                "INSERT INTO context_blocks (namespace, session_id, label, key, content, seq, "
                "updated_at, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (namespace, session_id, label) DO UPDATE SET key = excluded.key, "
                "content = excluded.content, seq = excluded.seq, updated_at = excluded.updated_at, "
                "version = excluded.version",
                (
                    write.namespace,
                    write.session_id or "",
                    write.label,
                    write.key,
                    write.content,
                    write.seq,
                    write.updated_at,
                    write.version,
                ),
            )
        elif isinstance(write, WritePrompt):
            connection.execute(
                "INSERT INTO cached_prompts (namespace, session_id, prompt, seq, frozen_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (namespace, session_id) DO UPDATE SET "
                "prompt = excluded.prompt, seq = excluded.seq, frozen_at = excluded.frozen_at",
                (write.namespace, write.session_id, write.prompt, write.seq, write.frozen_at),
            )
        elif isinstance(write, IndexEntry):
            _index_entry(connection, write)
        elif isinstance(write, LoadSkill):
            connection.execute(
                "INSERT OR IGNORE INTO loaded_skills (namespace, session_id, label, key, seq) "
                "VALUES (?, ?, ?, ?, ?)",
                (write.namespace, write.session_id, write.label, write.key, write.seq),
            )
        elif isinstance(write, UnloadSkill):
            connection.execute(
                "DELETE FROM loaded_skills WHERE namespace = ? AND session_id = ? AND label = ? "
                "AND key = ?",
                (write.namespace, write.session_id, write.label, write.key),
            )
        elif isinstance(write, ClearSkills):
            connection.execute(
                "DELETE FROM loaded_skills WHERE namespace = ? AND session_id = ?",
                (write.namespace, write.session_id),
            )
        elif isinstance(write, DropBlock):
            connection.execute(
                "DELETE FROM context_blocks WHERE namespace = ? AND session_id = ? AND label = ?",
                (write.namespace, write.session_id or "", write.label),
            )
        elif isinstance(write, DropPrompt):
            connection.execute(
                "DELETE FROM cached_prompts WHERE namespace = ? AND session_id = ?",
                (write.namespace, write.session_id),
            )


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
