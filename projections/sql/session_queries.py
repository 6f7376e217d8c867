"""Session reads on either engine: leaves, branches, budgets, counts; each engine adds the
history of a path (hand-tuned per engine: it is read after every append of an agent loop) and
full-text search.

Paths are walked by recursive CTEs along the row links (``parent_mid``), bounded by the
session's message count: no path is longer, and a walk ends even on a damaged read model whose
links form a loop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from memstream.domain.messages import Message, decode_message, decode_messages
from memstream.projections.overlays import Compaction, apply_overlays
from memstream.projections.recent_history import RecentHistory
from memstream.projections.session_projector import indexed_text
from memstream.projections.sql.dialect import Dialect, Executes

# The walk leaf→root (at most max depth + 1 rows), with each row's ``depth`` (0 at the leaf).
# Parameters: sid, leaf id, max depth (the session's message count less one).
PATH = """
WITH RECURSIVE path (mid, parent_mid, depth) AS (
    SELECT mid, parent_mid, 0 FROM messages WHERE sid = ? AND id = ?
    UNION ALL
    SELECT m.mid, m.parent_mid, path.depth + 1
    FROM path JOIN messages AS m ON m.mid = path.parent_mid
    WHERE path.depth < ?
)
"""

# The recent window, walked up from the leaf (§3.10): a row joins while the window has fewer
# than ``floor`` rows or the row still fits the byte budget; the first row that does not ends
# the walk, so the read visits the window and one row more, however long the path above it is.
# Parameters: leaf row, limit, floor, budget.
_RECENT = """
WITH RECURSIVE recent (mid, parent_mid, n, used) AS (
    SELECT mid, parent_mid, 1, bytes FROM messages WHERE mid = ?
    UNION ALL
    SELECT m.mid, m.parent_mid, recent.n + 1, recent.used + m.bytes
    FROM recent JOIN messages AS m ON m.mid = recent.parent_mid
    WHERE recent.n < ? AND (recent.n < ? OR recent.used + m.bytes <= ?)
)
SELECT recent.n, recent.parent_mid, m.content FROM recent JOIN messages AS m ON m.mid = recent.mid
"""


def hits(rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    """Search hits ``{id, role, content, created_at, session_id}`` of rows of those columns
    (``content``: the text the index holds)."""
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


class SqlSessionQueries:
    """Read side of sessions. An engine adds ``history`` and ``search``."""

    def __init__(self, connection: Executes, dialect: Dialect) -> None:
        self.connection = connection
        self.dialect = dialect

    def _execute(self, statement: str, params: Sequence[Any] = ()) -> Any:
        return self.connection.execute(self.dialect.sql(statement), params)

    def _sid(self, namespace: str, session_id: str) -> int | None:
        row = self._execute(
            "SELECT sid FROM session_keys WHERE namespace = ? AND session_id = ?",
            (namespace, session_id),
        ).fetchone()
        return None if row is None else int(row[0])

    def _session(self, namespace: str, session_id: str) -> tuple[int, int] | None:
        """The session's key and message count (the bound of every walk), or ``None``."""
        row = self._execute(
            "SELECT sid, messages FROM session_keys WHERE namespace = ? AND session_id = ?",
            (namespace, session_id),
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def _latest_leaf_id(self, sid: int) -> str | None:
        row = self._execute(
            "SELECT id FROM messages WHERE sid = ? AND child_count = 0 "
            "ORDER BY position DESC LIMIT 1",
            (sid,),
        ).fetchone()
        return None if row is None else str(row[0])

    def _active_path(self, namespace: str, session_id: str) -> tuple[int, str, int] | None:
        """Parameters of :data:`PATH` for the session's latest leaf (``None``: no messages)."""
        session = self._session(namespace, session_id)
        leaf = None if session is None else self._latest_leaf_id(session[0])
        if session is None or leaf is None:
            return None
        return session[0], leaf, session[1] - 1

    def compactions(self, namespace: str, session_id: str) -> list[Compaction]:
        """Overlays of a session in log order."""
        sid = self._sid(namespace, session_id)
        return [] if sid is None else self._compactions(sid)

    def _compactions(self, sid: int) -> list[Compaction]:
        rows = self._execute(
            "SELECT id, summary, from_message_id, to_message_id, created_at FROM compactions "
            "WHERE sid = ? ORDER BY position, cid",
            (sid,),
        ).fetchall()
        return [Compaction(r[0], r[1], r[2], r[3], r[4]) for r in rows]

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
        leaf = self._execute(
            "SELECT mid, path_bytes FROM messages WHERE sid = ? AND child_count = 0 "
            "ORDER BY position DESC LIMIT 1",
            (sid,),
        ).fetchone()
        if leaf is None:
            return RecentHistory([], False, 0)
        floor = max(1, min(math.floor(min_recent_messages), messages))
        rows = self._execute(_RECENT, (leaf[0], messages, floor, max_content_bytes)).fetchall()
        rows.sort(reverse=True)  # root first, on the unique window indexes
        # The window stops short of the root when its oldest row still links to a parent.
        truncated = rows[0][1] is not None
        path = [m for m in decode_messages([r[2] for r in rows]) if m is not None]
        return RecentHistory(apply_overlays(path, self._compactions(sid)), truncated, int(leaf[1]))

    def path_messages_containing(
        self, namespace: str, session_id: str, role: str, needle: str
    ) -> list[Message]:
        """Raw messages (no overlays) of ``role`` on the active path whose stored JSON contains
        ``needle``, root→leaf: the rows a skill restore must read, without decoding the rest of
        a long history (spec §7.3, #1710)."""
        path_of = self._active_path(namespace, session_id)
        if path_of is None:
            return []
        rows = self._execute(
            PATH + "SELECT m.content FROM path JOIN messages AS m ON m.mid = path.mid "
            f"WHERE m.role = ? AND {self.dialect.find}(m.content, ?) > 0 "
            "ORDER BY path.depth DESC",
            (*path_of, role, needle),
        ).fetchall()
        return [m for m in decode_messages([r[0] for r in rows]) if m is not None]

    def row_stats(self, namespace: str, session_id: str) -> list[dict[str, Any]]:
        """``{id, role, bytes}`` of the active path, root→leaf, without content."""
        path_of = self._active_path(namespace, session_id)
        if path_of is None:
            return []
        rows = self._execute(
            PATH + "SELECT m.id, m.role, m.bytes FROM path JOIN messages AS m "
            "ON m.mid = path.mid ORDER BY path.depth DESC",
            path_of,
        ).fetchall()
        return [{"id": r[0], "role": r[1], "bytes": int(r[2])} for r in rows]

    def message(self, namespace: str, session_id: str, message_id: str) -> Message | None:
        """One message by id, or ``None``."""
        row = self._execute(
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
        row = self._execute(
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
        leaf = leaf_id or self._latest_leaf_id(sid)
        if leaf is None:
            return 0
        row = self._execute(
            "SELECT depth + 1 FROM messages WHERE sid = ? AND id = ?", (sid, leaf)
        ).fetchone()
        return 0 if row is None else int(row[0])

    def branches(self, namespace: str, session_id: str, message_id: str) -> list[Message]:
        """Children of a message in log order."""
        sid = self._sid(namespace, session_id)
        if sid is None:
            return []
        rows = self._execute(
            "SELECT content FROM messages WHERE sid = ? AND parent_id = ? ORDER BY position",
            (sid, message_id),
        ).fetchall()
        return [m for m in (decode_message(r[0]) for r in rows) if m is not None]

    def sessions(self, namespace: str) -> list[dict[str, Any]]:
        """Every session of ``namespace`` that has had messages, by id:
        ``{session_id, messages, first_at, last_at}`` (times ``None`` once it was cleared)."""
        rows = self._execute(
            "SELECT k.session_id, count(m.mid), min(m.created_at), max(m.created_at) "
            "FROM session_keys AS k LEFT JOIN messages AS m ON m.sid = k.sid "
            "WHERE k.namespace = ? GROUP BY k.sid, k.session_id "
            f"ORDER BY k.session_id{self.dialect.byte_order}",
            (namespace,),
        ).fetchall()
        return [
            {"session_id": r[0], "messages": int(r[1]), "first_at": r[2], "last_at": r[3]}
            for r in rows
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
        messages, first_at, last_at, leaves, compactions = self._execute(
            "SELECT count(*), min(created_at), max(created_at), "
            "count(*) FILTER (WHERE child_count = 0), "
            "(SELECT count(*) FROM compactions WHERE sid = ?) "
            "FROM messages WHERE sid = ?",
            (sid, sid),
        ).fetchone()
        return {
            "session_id": session_id,
            "messages": int(messages),
            "leaves": int(leaves),
            "latest_leaf": None if sid is None else self._latest_leaf_id(sid),
            "path_length": self.path_length(namespace, session_id),
            "compactions": int(compactions),
            "first_at": first_at,
            "last_at": last_at,
        }

    def message_count(self, namespace: str, session_id: str) -> int:
        """Stored messages of a session (all branches)."""
        sid = self._sid(namespace, session_id)
        if sid is None:
            return 0
        row = self._execute("SELECT count(*) FROM messages WHERE sid = ?", (sid,)).fetchone()
        return 0 if row is None else int(row[0])
