"""Session reads from the SQLite read model: history, leaves, branches, budgets, search."""

from __future__ import annotations

import math
from typing import Any

from memstream.domain.messages import Message, decode_message, decode_messages
from memstream.projections.overlays import Compaction, apply_overlays
from memstream.projections.recent_history import RecentHistory
from memstream.projections.search_query import to_fts5
from memstream.projections.session_projector import indexed_text
from memstream.projections.sqlite.message_rows import MID_BITS, mid_range
from memstream.projections.sqlite.read_connection import Reads


def _path_walk(column: str) -> str:
    """The walk leaf→root along ``parent_mid`` (at most ``:max_depth + 1`` rows), carrying each
    row's ``column`` as ``path.<column>``, with its ``depth`` (0 at the leaf). ``:max_depth`` is
    the session's message count less one: no path is longer, and a walk ends even on a damaged
    read model whose links form a loop."""
    return f"""
WITH RECURSIVE path ({column}, parent_mid, depth) AS (
    SELECT {column}, parent_mid, 0 FROM messages WHERE sid = :sid AND id = :leaf
    UNION ALL
    SELECT m.{column}, m.parent_mid, path.depth + 1
    FROM path JOIN messages AS m ON m.mid = path.parent_mid
    WHERE path.depth < :max_depth
)
"""


_PATH = _path_walk("mid")
# The walk visits every row anyway: carrying the content along saves a second lookup per row
# (bench/RESULTS.md, 'Figures moved from code comments').
_PATH_CONTENTS = _path_walk("content") + "SELECT depth, content FROM path"

# The recent window, walked up from the leaf (§3.10): a row joins while the window has fewer
# than :floor rows or the row still fits the byte budget; the first row that does not ends the
# walk, so the read visits the window and one row more, however long the path above it is.
_RECENT = """
WITH RECURSIVE recent (mid, parent_mid, n, used) AS (
    SELECT mid, parent_mid, 1, bytes FROM messages WHERE mid = :leaf
    UNION ALL
    SELECT m.mid, m.parent_mid, recent.n + 1, recent.used + m.bytes
    FROM recent JOIN messages AS m ON m.mid = recent.parent_mid
    WHERE recent.n < :limit AND (recent.n < :floor OR recent.used + m.bytes <= :budget)
)
SELECT recent.n, recent.parent_mid, m.content FROM recent JOIN messages AS m ON m.mid = recent.mid
"""


class SqliteSessionQueries:
    """Read side of sessions; every method is one short read transaction."""

    def __init__(self, connection: Reads) -> None:
        self.connection = connection

    def _sid(self, namespace: str, session_id: str) -> int | None:
        row = self.connection.execute(
            "SELECT sid FROM session_keys WHERE namespace = ? AND session_id = ?",
            (namespace, session_id),
        ).fetchone()
        return None if row is None else int(row[0])

    def _session(self, namespace: str, session_id: str) -> tuple[int, int] | None:
        """The session's key and message count (the bound of every walk), or ``None``."""
        row = self.connection.execute(
            "SELECT sid, messages FROM session_keys WHERE namespace = ? AND session_id = ?",
            (namespace, session_id),
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def _latest_leaf_id(self, sid: int) -> str | None:
        row = self.connection.execute(
            "SELECT id FROM messages WHERE sid = ? AND child_count = 0 "
            "ORDER BY position DESC LIMIT 1",
            (sid,),
        ).fetchone()
        return None if row is None else str(row[0])

    def _active_path(self, namespace: str, session_id: str) -> dict[str, Any] | None:
        """Parameters of :data:`_PATH` for the session's latest leaf (``None``: no messages)."""
        session = self._session(namespace, session_id)
        leaf = None if session is None else self._latest_leaf_id(session[0])
        if session is None or leaf is None:
            return None
        return {"sid": session[0], "leaf": leaf, "max_depth": session[1] - 1}

    def _resolve_leaf(self, sid: int, leaf_id: str | None) -> str | None:
        return leaf_id if leaf_id else self._latest_leaf_id(sid)

    def _path_contents(self, sid: int, leaf: str, messages: int) -> list[str]:
        rows = self.connection.execute(
            _PATH_CONTENTS, {"sid": sid, "leaf": leaf, "max_depth": messages - 1}
        ).fetchall()
        # Root first. Sorted here on the unique depths: an ORDER BY would copy every content
        # string through SQLite's sorter (bench/RESULTS.md, 'Figures moved from code comments').
        rows.sort(reverse=True)
        return [row[1] for row in rows]

    def compactions(self, namespace: str, session_id: str) -> list[Compaction]:
        """Overlays of a session in log order."""
        sid = self._sid(namespace, session_id)
        if sid is None:
            return []
        return self._compactions(sid)

    def _compactions(self, sid: int) -> list[Compaction]:
        rows = self.connection.execute(
            "SELECT id, summary, from_message_id, to_message_id, created_at FROM compactions "
            "WHERE sid = ? ORDER BY position",
            (sid,),
        ).fetchall()
        return [Compaction(*row) for row in rows]

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

    def recent_history(
        self,
        namespace: str,
        session_id: str,
        max_content_bytes: int,
        min_recent_messages: int = 1,
    ) -> RecentHistory:
        """The longest recent suffix of the active path within a byte budget (§3.10).

        Reads the window and one row more: the path's total bytes are the leaf's ``path_bytes``.
        """
        session = self._session(namespace, session_id)
        if session is None:
            return RecentHistory([], False, 0)
        sid, messages = session
        leaf = self.connection.execute(
            "SELECT mid, path_bytes FROM messages WHERE sid = ? AND child_count = 0 "
            "ORDER BY position DESC LIMIT 1",
            (sid,),
        ).fetchone()
        if leaf is None:
            return RecentHistory([], False, 0)
        floor = max(1, min(math.floor(min_recent_messages), messages))
        rows = self.connection.execute(
            _RECENT,
            {"leaf": leaf[0], "limit": messages, "floor": floor, "budget": max_content_bytes},
        ).fetchall()
        rows.sort(reverse=True)  # root first, on the unique window indexes
        # The window stops short of the root when its oldest row still links to a parent.
        truncated = rows[0][1] is not None
        path = [m for m in decode_messages([r[2] for r in rows]) if m is not None]
        overlays = self._compactions(sid)
        return RecentHistory(apply_overlays(path, overlays), truncated, int(leaf[1]))

    def path_messages_containing(
        self, namespace: str, session_id: str, role: str, needle: str
    ) -> list[Message]:
        """Raw messages (no overlays) of ``role`` on the active path whose stored JSON contains
        ``needle``, root→leaf: the rows a skill restore must read, without decoding the rest of
        a long history (spec §7.3, #1710)."""
        path_of = self._active_path(namespace, session_id)
        if path_of is None:
            return []
        rows = self.connection.execute(
            _PATH + "SELECT m.content FROM path JOIN messages AS m ON m.mid = path.mid "
            "WHERE m.role = :role AND instr(m.content, :needle) > 0 ORDER BY path.depth DESC",
            {**path_of, "role": role, "needle": needle},
        ).fetchall()
        return [m for m in decode_messages([r[0] for r in rows]) if m is not None]

    def row_stats(self, namespace: str, session_id: str) -> list[dict[str, Any]]:
        """``{id, role, bytes}`` of the active path, root→leaf, without content."""
        path_of = self._active_path(namespace, session_id)
        if path_of is None:
            return []
        rows = self.connection.execute(
            _PATH + "SELECT m.id, m.role, m.bytes FROM path JOIN messages AS m "
            "ON m.mid = path.mid ORDER BY path.depth DESC",
            path_of,
        ).fetchall()
        return [{"id": r[0], "role": r[1], "bytes": r[2]} for r in rows]

    def message(self, namespace: str, session_id: str, message_id: str) -> Message | None:
        """One message by id, or ``None``."""
        row = self.connection.execute(
            "SELECT m.content FROM messages AS m JOIN session_keys AS k ON k.sid = m.sid "
            "WHERE k.namespace = ? AND k.session_id = ? AND m.id = ?",
            (namespace, session_id, message_id),
        ).fetchone()
        return None if row is None else decode_message(row[0])

    def latest_leaf(self, namespace: str, session_id: str) -> Message | None:
        """The childless message with the highest log position, or ``None``."""
        sid = self._sid(namespace, session_id)
        if sid is None:
            return None
        row = self.connection.execute(
            "SELECT content FROM messages WHERE sid = ? AND child_count = 0 "
            "ORDER BY position DESC LIMIT 1",
            (sid,),
        ).fetchone()
        return None if row is None else decode_message(row[0])

    def path_length(self, namespace: str, session_id: str, leaf_id: str | None = None) -> int:
        """Raw messages on the path root→leaf (overlays ignored); 0 if unknown or empty. The
        leaf's ``depth`` holds it: no walk."""
        sid = self._sid(namespace, session_id)
        if sid is None:
            return 0
        leaf = self._resolve_leaf(sid, leaf_id)
        if leaf is None:
            return 0
        row = self.connection.execute(
            "SELECT depth + 1 FROM messages WHERE sid = ? AND id = ?", (sid, leaf)
        ).fetchone()
        return 0 if row is None else int(row[0])

    def branches(self, namespace: str, session_id: str, message_id: str) -> list[Message]:
        """Children of a message in log order."""
        sid = self._sid(namespace, session_id)
        if sid is None:
            return []
        rows = self.connection.execute(
            "SELECT content FROM messages WHERE sid = ? AND parent_id = ? ORDER BY position",
            (sid, message_id),
        ).fetchall()
        return [m for m in (decode_message(r[0]) for r in rows) if m is not None]

    def sessions(self, namespace: str) -> list[dict[str, Any]]:
        """Every session of ``namespace`` that has had messages, by id:
        ``{session_id, messages, first_at, last_at}`` (times ``None`` once it was cleared)."""
        rows = self.connection.execute(
            "SELECT k.session_id, count(m.mid), min(m.created_at), max(m.created_at) "
            "FROM session_keys AS k LEFT JOIN messages AS m ON m.sid = k.sid "
            "WHERE k.namespace = ? GROUP BY k.sid ORDER BY k.session_id",
            (namespace,),
        ).fetchall()
        return [
            {"session_id": r[0], "messages": r[1], "first_at": r[2], "last_at": r[3]} for r in rows
        ]

    def summary(self, namespace: str, session_id: str) -> dict[str, Any] | None:
        """Counts and positions of one session's tree, or ``None`` if it never had messages:
        ``{session_id, messages, leaves, latest_leaf, path_length, compactions, first_at,
        last_at}`` (``leaves`` counts the branch tips; the path is the latest leaf's)."""
        sid = self._sid(namespace, session_id)
        return None if sid is None else self._summary(sid, namespace, session_id)

    def empty_summary(self, namespace: str, session_id: str) -> dict[str, Any]:
        """:meth:`summary`'s shape for a session with no messages (zeros and ``None``)."""
        return self._summary(None, namespace, session_id)

    def _summary(self, sid: int | None, namespace: str, session_id: str) -> dict[str, Any]:
        # With no sid the queries match no row (sid = NULL is never true): the empty summary.
        messages, first_at, last_at = self.connection.execute(
            "SELECT count(*), min(created_at), max(created_at) FROM messages WHERE sid = ?",
            (sid,),
        ).fetchone()
        leaves = self.connection.execute(
            "SELECT count(*) FROM messages WHERE sid = ? AND child_count = 0", (sid,)
        ).fetchone()[0]
        compactions = self.connection.execute(
            "SELECT count(*) FROM compactions WHERE sid = ?", (sid,)
        ).fetchone()[0]
        return {
            "session_id": session_id,
            "messages": messages,
            "leaves": leaves,
            "latest_leaf": None if sid is None else self._latest_leaf_id(sid),
            "path_length": self.path_length(namespace, session_id),
            "compactions": compactions,
            "first_at": first_at,
            "last_at": last_at,
        }

    def message_count(self, namespace: str, session_id: str) -> int:
        """Stored messages of a session (all branches)."""
        sid = self._sid(namespace, session_id)
        if sid is None:
            return 0
        row = self.connection.execute("SELECT count(*) FROM messages WHERE sid = ?", (sid,))
        return int(row.fetchone()[0])

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
        return [
            {
                "id": r[0],
                "role": r[1],
                "content": indexed_text(r[2]),
                "created_at": r[3],
                "session_id": r[4],
            }
            for r in rows
        ]
