"""Reads of the memory and vectors read models on SQLite: the shared
:class:`~memstream.projections.sql.memory_queries.SqlMemoryQueries`, and full-text search with
FTS5's BM25."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from memstream.projections.recall.memory_search import fts_match
from memstream.projections.sql.dialect import SQLITE
from memstream.projections.sql.memory_queries import SqlMemoryQueries
from memstream.projections.sqlite.read_connection import Reads

# BM25 ranked in the index alone (its rowid is the row's rid), then the best joined: a common
# term matches thousands of memories, and joining them all to rank them took longer.
_FULL_TEXT = {
    "memories": "SELECT m.id FROM (SELECT rowid, bm25(memories_fts, 2.0, 1.0, 1.5, 1.0, 0.0) "
    "AS rank FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rank, rowid DESC LIMIT ?) "
    "AS f JOIN memories AS m ON m.rid = f.rowid ORDER BY f.rank, f.rowid DESC",
    "messages": "SELECT r.id FROM (SELECT rowid, bm25(memory_messages_fts, 1.0, 0.0) AS rank "
    "FROM memory_messages_fts WHERE memory_messages_fts MATCH ? "
    "ORDER BY rank, rowid DESC LIMIT ?) AS f JOIN memory_messages AS r "
    "ON r.rid = f.rowid ORDER BY f.rank, f.rowid DESC",
}


class SqliteMemoryQueries(SqlMemoryQueries):
    """Agent Memory reads, each scoped by (namespace, profile): an id of another profile is
    not found."""

    def __init__(self, connection: Reads) -> None:
        super().__init__(connection, SQLITE)

    def _full_text(
        self, table: Literal["memories", "messages"], pid: int, terms: Sequence[str], limit: int
    ) -> list[str]:
        match = fts_match(terms, f"p{pid}")
        if match is None:
            return []
        return [r[0] for r in self.connection.execute(_FULL_TEXT[table], (match, limit))]

    def vector_search(self, namespace: str, profile: str, kind: str, model: str) -> None:
        """``None``: SQLite does not search vectors itself (the caller loads them)."""
        return
