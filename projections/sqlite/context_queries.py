"""Context reads from the SQLite read model: the shared ones
(:mod:`memstream.projections.sql.context_queries`), and search entries by FTS5's BM25."""

from __future__ import annotations

from memstream.projections.search_query import to_fts5
from memstream.projections.sql.context_queries import SqlContextQueries
from memstream.projections.sql.dialect import SQLITE
from memstream.projections.sqlite.read_connection import Reads


class SqliteContextQueries(SqlContextQueries):
    """Read side of the context projection on SQLite; every method is one short read."""

    def __init__(self, connection: Reads) -> None:
        super().__init__(connection, SQLITE)

    def _bid(self, namespace: str, block_key: str) -> int | None:
        row = self.connection.execute(
            "SELECT bid FROM search_blocks WHERE namespace = ? AND key = ?",
            (namespace, block_key),
        ).fetchone()
        return None if row is None else int(row[0])

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
