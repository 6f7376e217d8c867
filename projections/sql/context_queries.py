"""Context reads on either engine: blocks, cached prompts, loaded skills, search entries (each
engine searches the entries its own way: FTS5's BM25, PostgreSQL's ``ts_rank_cd``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memstream.projections.sql.dialect import Dialect, Executes

_BLOCK = ("key", "label", "session_id", "content", "seq", "updated_at")


class SqlContextQueries:
    """Read side of the context projection; every method is one short read. An engine adds
    ``search_entries``."""

    def __init__(self, connection: Executes, dialect: Dialect) -> None:
        self.connection = connection
        self.dialect = dialect

    def _execute(self, statement: str, params: Sequence[Any] = ()) -> Any:
        return self.connection.execute(self.dialect.sql(statement), params)

    def block_content(self, namespace: str, label: str, session_id: str) -> str | None:
        """A built-in block's content (``session_id`` ``""``: no session), or ``None`` if it
        was never written."""
        row = self._execute(
            "SELECT content FROM context_blocks WHERE namespace = ? AND session_id = ? "
            "AND label = ?",
            (namespace, session_id, label),
        ).fetchone()
        return None if row is None else str(row[0])

    def blocks(self, namespace: str, session_id: str | None = None) -> list[dict[str, Any]]:
        """Built-in blocks ``{key, label, session_id, content, seq, updated_at}`` by session and
        label; with ``session_id``, only that session's (``""``: the blocks without one)."""
        query = f"SELECT {', '.join(_BLOCK)} FROM context_blocks WHERE namespace = ?"
        params: list[Any] = [namespace]
        if session_id is not None:
            query += " AND session_id = ?"
            params.append(session_id)
        order = self.dialect.byte_order
        rows = self._execute(f"{query} ORDER BY session_id{order}, label{order}", params)
        return [dict(zip(_BLOCK, row, strict=True)) for row in rows.fetchall()]

    def cached_prompt(self, namespace: str, session_id: str) -> str | None:
        """A session's frozen system prompt, or ``None`` if none was frozen."""
        row = self._execute(
            "SELECT prompt FROM cached_prompts WHERE namespace = ? AND session_id = ?",
            (namespace, session_id),
        ).fetchone()
        return None if row is None else str(row[0])

    def loaded_skills(self, namespace: str, session_id: str) -> list[str]:
        """``"label:key"`` of the skills loaded in a session, in load order."""
        rows = self._execute(
            "SELECT label, key FROM loaded_skills WHERE namespace = ? AND session_id = ? "
            "ORDER BY seq",
            (namespace, session_id),
        ).fetchall()
        return [f"{label}:{key}" for label, key in rows]

    def entry_count(self, namespace: str, block_key: str) -> int:
        """How many entries a search block holds."""
        row = self._execute(
            "SELECT count(*) FROM search_entries AS e JOIN search_blocks AS b ON b.bid = e.bid "
            "WHERE b.namespace = ? AND b.key = ?",
            (namespace, block_key),
        ).fetchone()
        return 0 if row is None else int(row[0])
