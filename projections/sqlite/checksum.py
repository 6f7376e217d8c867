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
        "SELECT k.namespace, k.session_id, c.id, c.summary, c.from_message_id, c.to_message_id, "
        "c.position, c.created_at FROM compactions AS c JOIN session_keys AS k ON k.sid = c.sid "
        "ORDER BY k.namespace, k.session_id, c.position",
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
