"""Context reads from the PostgreSQL read model: blocks, cached prompts, loaded skills, entries."""

from __future__ import annotations

from typing import Any

from psycopg import sql

from memstream.projections.postgres.reads import Executes
from memstream.projections.postgres.session_queries import tsquery

Connection = Executes


class PgContextQueries:
    """Read side of the context projection on PostgreSQL."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def block_content(self, namespace: str, label: str, session_id: str) -> str | None:
        """A built-in block's content (``session_id`` ``""``: no session), or ``None``."""
        row = self.connection.execute(
            "SELECT content FROM context_blocks WHERE namespace = %s AND session_id = %s "
            "AND label = %s",
            (namespace, session_id, label),
        ).fetchone()
        return None if row is None else str(row[0])

    def blocks(self, namespace: str, session_id: str | None = None) -> list[dict[str, Any]]:
        """Built-in blocks ``{key, label, session_id, content, seq, updated_at}`` by session and
        label; with ``session_id``, only that session's (``""``: the blocks without one)."""
        query = (
            "SELECT key, label, session_id, content, seq, updated_at FROM context_blocks "
            "WHERE namespace = %s"
        )
        params: list[Any] = [namespace]
        if session_id is not None:
            query += " AND session_id = %s"
            params.append(session_id)
        cursor = self.connection.execute(
            query + ' ORDER BY session_id COLLATE "C", label COLLATE "C"', params
        )
        names = [c.name for c in cursor.description or ()]
        blocks = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        for block in blocks:
            block["content"] = block["content"]
        return blocks

    def cached_prompt(self, namespace: str, session_id: str) -> str | None:
        row = self.connection.execute(
            "SELECT prompt FROM cached_prompts WHERE namespace = %s AND session_id = %s",
            (namespace, session_id),
        ).fetchone()
        return None if row is None else str(row[0])

    def loaded_skills(self, namespace: str, session_id: str) -> list[str]:
        """``"label:key"`` of the skills loaded in a session, in load order."""
        rows = self.connection.execute(
            "SELECT label, key FROM loaded_skills WHERE namespace = %s AND session_id = %s "
            "ORDER BY seq",
            (namespace, session_id),
        ).fetchall()
        return [f"{label}:{key}" for label, key in rows]

    def entry_count(self, namespace: str, block_key: str) -> int:
        row = self.connection.execute(
            "SELECT count(*) FROM search_entries AS e JOIN search_blocks AS b ON b.bid = e.bid "
            "WHERE b.namespace = %s AND b.key = %s",
            (namespace, block_key),
        ).fetchone()
        return 0 if row is None else int(row[0])

    def search_entries(
        self, namespace: str, block_key: str, query: str, limit: int
    ) -> list[tuple[str, str]]:
        """``(key, content)`` of a search block's best matches (web-search syntax)."""
        compiled = tsquery(query)
        if compiled is None:
            return []
        expression, phrases = compiled
        rows = self.connection.execute(
            sql.SQL(
                "SELECT e.key, e.content FROM (SELECT {} AS q) AS query, search_entries AS e "
                "JOIN search_blocks AS b ON b.bid = e.bid "
                "WHERE e.search @@ query.q AND b.namespace = %s AND b.key = %s "
                "ORDER BY ts_rank_cd(e.search, query.q) DESC, e.eid LIMIT %s"
            ).format(expression),
            [*phrases, namespace, block_key, limit],
        ).fetchall()
        return [(str(key), str(content)) for key, content in rows]
