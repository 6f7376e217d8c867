"""Context reads from the SQLite read model: blocks, cached prompts, loaded skills, entries."""

from __future__ import annotations

from typing import Any

from memstream.projections.search_query import to_fts5
from memstream.projections.sqlite.read_connection import Reads


class SqliteContextQueries:
    """Read side of the context projection; every method is one short read."""

    def __init__(self, connection: Reads) -> None:
        self.connection = connection

    def block_content(self, namespace: str, label: str, session_id: str) -> str | None:
        """A built-in block's content (``session_id`` ``""``: no session), or ``None`` if it
        was never written."""
        row = self.connection.execute(
            "SELECT content FROM context_blocks WHERE namespace = ? AND session_id = ? "
            "AND label = ?",
            (namespace, session_id, label),
        ).fetchone()
        return None if row is None else str(row[0])

    def blocks(self, namespace: str, session_id: str | None = None) -> list[dict[str, Any]]:
        """Built-in blocks ``{key, label, session_id, content, seq, updated_at}`` by session and
        label; with ``session_id``, only that session's (``""``: the blocks without one)."""
        sql = (
            "SELECT key, label, session_id, content, seq, updated_at FROM context_blocks "
            "WHERE namespace = ?"
        )
        params: list[Any] = [namespace]
        if session_id is not None:
            sql += " AND session_id = ?"
            params.append(session_id)
        cursor = self.connection.execute(sql + " ORDER BY session_id, label", params)
        names = [c[0] for c in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def cached_prompt(self, namespace: str, session_id: str) -> str | None:
        """A session's frozen system prompt, or ``None`` if none was frozen."""
        row = self.connection.execute(
            "SELECT prompt FROM cached_prompts WHERE namespace = ? AND session_id = ?",
            (namespace, session_id),
        ).fetchone()
        return None if row is None else str(row[0])

    def loaded_skills(self, namespace: str, session_id: str) -> list[str]:
        """``"label:key"`` of the skills loaded in a session, in load order."""
        rows = self.connection.execute(
            "SELECT label, key FROM loaded_skills WHERE namespace = ? AND session_id = ? "
            "ORDER BY seq",
            (namespace, session_id),
        ).fetchall()
        return [f"{label}:{key}" for label, key in rows]

    def _bid(self, namespace: str, block_key: str) -> int | None:
        row = self.connection.execute(
            "SELECT bid FROM search_blocks WHERE namespace = ? AND key = ?",
            (namespace, block_key),
        ).fetchone()
        return None if row is None else int(row[0])

    def entry_count(self, namespace: str, block_key: str) -> int:
        """How many entries a search block holds."""
        bid = self._bid(namespace, block_key)
        if bid is None:
            return 0
        row = self.connection.execute(
            "SELECT count(*) FROM search_entries WHERE bid = ?", (bid,)
        ).fetchone()
        return int(row[0])

    def search_entries(
        self, namespace: str, block_key: str, query: str, limit: int
    ) -> list[tuple[str, str]]:
        """``(key, content)`` of a search block's best BM25 matches (web-search syntax)."""
        expression = to_fts5(query)
        bid = self._bid(namespace, block_key)
        if expression is None or bid is None:
            return []
        rows = self.connection.execute(
            "SELECT e.key, e.content FROM ("
            "SELECT rowid AS eid, bm25(search_entries_fts, 1.0, 0.0) AS score "
            "FROM search_entries_fts WHERE search_entries_fts MATCH ? ORDER BY score LIMIT ?"
            ") AS hit JOIN search_entries AS e ON e.eid = hit.eid ORDER BY hit.score",
            (f'scope : "{bid}" AND text : ({expression})', limit),
        ).fetchall()
        return [(str(key), str(content)) for key, content in rows]
