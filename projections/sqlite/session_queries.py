"""Session reads from the SQLite read model: the shared ones
(:mod:`memstream.projections.sql.session_queries`), and history and search, FTS5's BM25."""

from __future__ import annotations

from typing import Any

from memstream.domain.messages import Message, decode_messages
from memstream.projections.overlays import apply_overlays
from memstream.projections.search_query import to_fts5
from memstream.projections.sql.dialect import SQLITE
from memstream.projections.sql.session_queries import SqlSessionQueries, hits
from memstream.projections.sqlite.message_rows import MID_BITS, mid_range
from memstream.projections.sqlite.read_connection import Reads

# The walk of :data:`~memstream.projections.sql.session_queries.PATH`, carrying each row's
# content along: the walk visits every row anyway, and this saves a second lookup per row
# (bench/RESULTS.md, 'Figures moved from code comments').
_PATH_CONTENTS = """
WITH RECURSIVE path (content, parent_mid, depth) AS (
    SELECT content, parent_mid, 0 FROM messages WHERE sid = :sid AND id = :leaf
    UNION ALL
    SELECT m.content, m.parent_mid, path.depth + 1
    FROM path JOIN messages AS m ON m.mid = path.parent_mid
    WHERE path.depth < :max_depth
)
SELECT depth, content FROM path
"""


class SqliteSessionQueries(SqlSessionQueries):
    """Read side of sessions on SQLite; every method is one short read transaction."""

    def __init__(self, connection: Reads) -> None:
        super().__init__(connection, SQLITE)

    def _path_contents(self, sid: int, leaf: str, messages: int) -> list[str]:
        rows = self.connection.execute(
            _PATH_CONTENTS, {"sid": sid, "leaf": leaf, "max_depth": messages - 1}
        ).fetchall()
        # Root first. Sorted here on the unique depths: an ORDER BY would copy every content
        # string through SQLite's sorter (bench/RESULTS.md, 'Figures moved from code comments').
        rows.sort(reverse=True)
        return [row[1] for row in rows]

    def history(self, namespace: str, session_id: str, leaf_id: str | None = None) -> list[Message]:
        """Root→leaf path (latest leaf by default) with overlays applied; ``[]`` if unknown."""
        # The session's key, bound, latest leaf and whether it has overlays, in one statement
        # (a history is read after every append of an agent loop).
        row = self.connection.execute(
            "SELECT sid, messages, "
            "(SELECT id FROM messages WHERE sid = k.sid AND child_count = 0 "
            "ORDER BY position DESC LIMIT 1), "
            "EXISTS (SELECT 1 FROM compactions WHERE sid = k.sid) "
            "FROM session_keys AS k WHERE namespace = ? AND session_id = ?",
            (namespace, session_id),
        ).fetchone()
        if row is None:
            return []
        sid, messages, latest, overlaid = row
        leaf = leaf_id or latest
        if leaf is None:
            return []
        contents = self._path_contents(sid, leaf, messages)
        path = [m for m in decode_messages(contents) if m is not None]
        return apply_overlays(path, self._compactions(sid)) if overlaid else path

    def search(
        self, namespace: str, session_id: str | None, query: str, limit: int
    ) -> list[dict[str, Any]]:
        """BM25-ranked hits ``{id, role, content, created_at}`` (plus ``session_id``)."""
        expression = to_fts5(query)
        if expression is None:
            return []
        params: dict[str, Any] = {"limit": limit, "q": expression}
        if session_id is None:
            # A row id names its session (see mid_range): the namespace's sessions are kept
            # without looking up each match's message row.
            ranked = (
                "SELECT rowid AS mid, bm25(messages_fts) AS score FROM messages_fts "
                "WHERE messages_fts MATCH :q "
                f"AND (rowid >> {MID_BITS}) IN "
                "(SELECT sid FROM session_keys WHERE namespace = :ns) "
                "ORDER BY score LIMIT :limit"
            )
            params["ns"] = namespace
        else:
            sid = self._sid(namespace, session_id)
            if sid is None:
                return []
            # A session's rows are one row-id range (see mid_range): FTS5 reads only it.
            params["low"], params["high"] = mid_range(sid)
            ranked = (
                "SELECT rowid AS mid, bm25(messages_fts) AS score FROM messages_fts "
                "WHERE messages_fts MATCH :q AND rowid BETWEEN :low AND :high "
                "ORDER BY score LIMIT :limit"
            )
        # Rank on rowids alone, then read the text and rows of the winners only: carrying the
        # text of every match through the sort costs most for common terms, which match most
        # rows (bench/RESULTS.md, 'Figures moved from code comments').
        # (The index keeps no copy of the text: a hit's text is its message's, again.)
        rows = self.connection.execute(
            "SELECT m.id, m.role, m.content, m.created_at, k.session_id "
            f"FROM ({ranked}) AS hit JOIN messages AS m ON m.mid = hit.mid "
            "JOIN session_keys AS k ON k.sid = m.sid "
            "ORDER BY hit.score",
            params,
        ).fetchall()
        return hits(rows)
