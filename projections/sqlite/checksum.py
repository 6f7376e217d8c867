"""Checksums of read models over their logical content (independent of row ids)."""

from __future__ import annotations

import hashlib
import json
import sqlite3

_QUERIES: dict[str, tuple[str, ...]] = {
    "sessions": (
        "SELECT k.namespace, k.session_id, m.id, m.parent_id, m.role, m.content, m.bytes, "
        "m.position, m.created_at, m.child_count FROM messages AS m "
        "JOIN session_keys AS k ON k.sid = m.sid ORDER BY k.namespace, k.session_id, m.position",
        "SELECT k.namespace, k.session_id, m.id, f.text FROM messages_fts AS f "
        "JOIN messages AS m ON m.mid = f.rowid JOIN session_keys AS k ON k.sid = m.sid "
        "ORDER BY k.namespace, k.session_id, m.position",
        "SELECT count(*) FROM messages_fts",
        # The row links, by id (row ids themselves may differ between two builds)
        "SELECT k.namespace, k.session_id, m.id, p.id FROM messages AS m "
        "JOIN session_keys AS k ON k.sid = m.sid LEFT JOIN messages AS p ON p.mid = m.parent_mid "
        "ORDER BY k.namespace, k.session_id, m.position",
        "SELECT k.namespace, k.session_id, c.id, c.summary, c.from_message_id, c.to_message_id, "
        "c.position, c.created_at FROM compactions AS c JOIN session_keys AS k ON k.sid = c.sid "
        "ORDER BY k.namespace, k.session_id, c.position",
    ),
    "context": (
        "SELECT namespace, session_id, label, key, content, seq, updated_at FROM context_blocks "
        "ORDER BY namespace, session_id, label",
        "SELECT namespace, session_id, prompt, seq, frozen_at FROM cached_prompts "
        "ORDER BY namespace, session_id",
        "SELECT namespace, session_id, label, key, seq FROM loaded_skills "
        "ORDER BY namespace, session_id, label, key",
        "SELECT b.namespace, b.key, e.key, e.content, e.seq, e.created_at, e.updated_at, f.text "
        "FROM search_entries AS e JOIN search_blocks AS b ON b.bid = e.bid "
        "LEFT JOIN search_entries_fts AS f ON f.rowid = e.eid ORDER BY b.namespace, b.key, e.key",
        "SELECT count(*) FROM search_entries_fts",
    ),
}


def checksum(connection: sqlite3.Connection, projection: str) -> str:
    """SHA-256 over every row of ``projection``'s tables in a canonical order."""
    digest = hashlib.sha256()
    for query in _QUERIES[projection]:
        for row in connection.execute(query):
            digest.update(json.dumps(row, ensure_ascii=False).encode("utf-8", "surrogatepass"))
            digest.update(b"\n")
        digest.update(b"\x00")
    return digest.hexdigest()
