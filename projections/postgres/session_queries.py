"""Session reads from the PostgreSQL read model: history, leaves, branches, budgets, search.

The same answers as :class:`~memstream.projections.sqlite.session_queries.SqliteSessionQueries`
(the contract tests compare both on the same events). Paths are walked by recursive CTEs along
the row links, bounded by the session's message count; search compiles the one query syntax
(:mod:`memstream.projections.search_query`) into a ``tsquery`` from parameters only and ranks
by ``ts_rank_cd``.
"""

from __future__ import annotations

import math
from typing import Any

from psycopg import sql

from memstream.domain.messages import Message, decode_message, decode_messages
from memstream.projections.overlays import Compaction, apply_overlays
from memstream.projections.postgres.reads import Executes
from memstream.projections.postgres.schema import TEXT_SEARCH
from memstream.projections.postgres.text import indexable
from memstream.projections.recent_history import RecentHistory
from memstream.projections.search_query import to_tsquery_parts
from memstream.projections.session_projector import indexed_text

Connection = Executes


def _path_walk(column: str) -> str:
    """The walk leaf→root along ``parent_mid`` (at most ``max_depth + 1`` rows), carrying each
    row's ``column``, with its ``depth`` (0 at the leaf). ``max_depth`` is the session's message
    count less one: no path is longer, and a walk ends even on a damaged read model whose links
    form a loop."""
    return f"""
WITH RECURSIVE path (mid, {column}, parent_mid, depth) AS (
    SELECT mid, {column}, parent_mid, 0 FROM messages WHERE sid = %(sid)s AND id = %(leaf)s
    UNION ALL
    SELECT m.mid, m.{column}, m.parent_mid, path.depth + 1
    FROM path JOIN messages AS m ON m.mid = path.parent_mid
    WHERE path.depth < %(max_depth)s
)
"""


_PATH = _path_walk("sid")
_PATH_CONTENTS = _path_walk("content") + "SELECT depth, content FROM path"

# A session's path in one statement: its key, its latest leaf (unless a leaf is given), the walk
# leaf→root (as _path_walk's), and whether overlays are to be applied.
_HISTORY = """
WITH RECURSIVE k AS (
    SELECT sid, messages, EXISTS (SELECT 1 FROM compactions AS c WHERE c.sid = s.sid) AS overlaid
    FROM session_keys AS s WHERE namespace = %(ns)s AND session_id = %(id)s
),
path (mid, content, parent_mid, depth) AS (
    SELECT m.mid, m.content, m.parent_mid, 0 FROM k JOIN messages AS m ON m.sid = k.sid
        AND m.id = COALESCE(%(leaf)s, (SELECT l.id FROM messages AS l
            WHERE l.sid = k.sid AND l.child_count = 0 ORDER BY l.position DESC LIMIT 1))
    UNION ALL
    SELECT m.mid, m.content, m.parent_mid, path.depth + 1
    FROM path JOIN messages AS m ON m.mid = path.parent_mid
    WHERE path.depth < (SELECT messages FROM k) - 1
)
SELECT path.depth, path.content, k.sid, k.overlaid FROM path, k
"""

# The recent window, walked up from the leaf (§3.10): a row joins while the window has fewer
# than ``floor`` rows or the row still fits the byte budget; the first row that does not ends
# the walk, so the read visits the window and one row more.
_RECENT = """
WITH RECURSIVE recent (mid, parent_mid, n, used) AS (
    SELECT mid, parent_mid, 1, bytes FROM messages WHERE mid = %(leaf)s
    UNION ALL
    SELECT m.mid, m.parent_mid, recent.n + 1, recent.used + m.bytes
    FROM recent JOIN messages AS m ON m.mid = recent.parent_mid
    WHERE recent.n < %(limit)s AND (recent.n < %(floor)s OR recent.used + m.bytes <= %(budget)s)
)
SELECT recent.n, recent.parent_mid, m.content FROM recent JOIN messages AS m ON m.mid = recent.mid
"""


def tsquery(query: str) -> tuple[sql.Composed, list[str]] | None:
    """The ``tsquery`` expression of a search in the one syntax, and its parameters (each
    phrase goes to ``phraseto_tsquery`` as a parameter: user text is never spliced into SQL);
    ``None``: nothing searchable, no results."""
    parts = to_tsquery_parts(query)
    if parts is None:
        return None
    # A phrase with a word PostgreSQL cannot index matches nothing: drop it from its clause
    # (``phraseto_tsquery`` would drop just the word, widening the search).
    parts = [([p for p in options if indexable(p)], negated) for options, negated in parts]
    if any(not alternatives for alternatives, negated in parts if not negated):
        return None
    parts = [(alternatives, negated) for alternatives, negated in parts if alternatives]
    phrase = sql.SQL("phraseto_tsquery({}::regconfig, %s)").format(sql.Literal(TEXT_SEARCH))

    def clause(alternatives: list[str]) -> sql.Composable:
        return sql.SQL("(") + sql.SQL(" || ").join([phrase] * len(alternatives)) + sql.SQL(")")

    positive = [alternatives for alternatives, negated in parts if not negated]
    negative = [alternatives for alternatives, negated in parts if negated]
    expression: sql.Composable = sql.SQL(" && ").join([clause(a) for a in positive])
    for alternatives in negative:
        expression = sql.SQL("({}) && !!{}").format(expression, clause(alternatives))
    # Parameters in the order their placeholders appear: the positive phrases, then the rest.
    params = [p for alternatives in positive for p in alternatives]
    params += [p for alternatives in negative for p in alternatives]
    return sql.Composed([expression]), params


class PgSessionQueries:
    """Read side of sessions on PostgreSQL; each method reads in its own statement(s)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def _one(self, query: str, params: Any) -> tuple[Any, ...] | None:
        return self.connection.execute(query, params).fetchone()

    def _sid(self, namespace: str, session_id: str) -> int | None:
        row = self._one(
            "SELECT sid FROM session_keys WHERE namespace = %s AND session_id = %s",
            (namespace, session_id),
        )
        return None if row is None else int(row[0])

    def _session(self, namespace: str, session_id: str) -> tuple[int, int] | None:
        row = self._one(
            "SELECT sid, messages FROM session_keys WHERE namespace = %s AND session_id = %s",
            (namespace, session_id),
        )
        return None if row is None else (int(row[0]), int(row[1]))

    def _latest_leaf_id(self, sid: int) -> str | None:
        row = self._one(
            "SELECT id FROM messages WHERE sid = %s AND child_count = 0 "
            "ORDER BY position DESC LIMIT 1",
            (sid,),
        )
        return None if row is None else str(row[0])

    def _active_path(self, namespace: str, session_id: str) -> dict[str, Any] | None:
        session = self._session(namespace, session_id)
        leaf = None if session is None else self._latest_leaf_id(session[0])
        if session is None or leaf is None:
            return None
        return {"sid": session[0], "leaf": leaf, "max_depth": session[1] - 1}

    def _compactions(self, sid: int) -> list[Compaction]:
        rows = self.connection.execute(
            "SELECT id, summary, from_message_id, to_message_id, created_at FROM compactions "
            "WHERE sid = %s ORDER BY position, cid",
            (sid,),
        ).fetchall()
        return [Compaction(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    def compactions(self, namespace: str, session_id: str) -> list[Compaction]:
        """Overlays of a session in log order."""
        sid = self._sid(namespace, session_id)
        return [] if sid is None else self._compactions(sid)

    def history(self, namespace: str, session_id: str, leaf_id: str | None = None) -> list[Message]:
        """Root→leaf path (latest leaf by default) with overlays applied; ``[]`` if unknown."""
        rows = self.connection.execute(
            _HISTORY, {"ns": namespace, "id": session_id, "leaf": leaf_id or None}
        ).fetchall()
        if not rows:
            return []
        rows.sort(reverse=True)  # root first, on the unique depths
        path = [m for m in decode_messages([r[1] for r in rows]) if m is not None]
        sid, overlaid = rows[0][2], rows[0][3]
        return apply_overlays(path, self._compactions(sid)) if overlaid else path

    def recent_history(
        self,
        namespace: str,
        session_id: str,
        max_content_bytes: int,
        min_recent_messages: int = 1,
    ) -> RecentHistory:
        """The longest recent suffix of the active path within a byte budget (§3.10)."""
        session = self._session(namespace, session_id)
        if session is None:
            return RecentHistory([], False, 0)
        sid, messages = session
        leaf = self._one(
            "SELECT mid, path_bytes FROM messages WHERE sid = %s AND child_count = 0 "
            "ORDER BY position DESC LIMIT 1",
            (sid,),
        )
        if leaf is None:
            return RecentHistory([], False, 0)
        floor = max(1, min(math.floor(min_recent_messages), messages))
        rows = self.connection.execute(
            _RECENT,
            {"leaf": leaf[0], "limit": messages, "floor": floor, "budget": max_content_bytes},
        ).fetchall()
        rows.sort(reverse=True)
        truncated = rows[0][1] is not None
        path = [m for m in decode_messages([r[2] for r in rows]) if m is not None]
        return RecentHistory(apply_overlays(path, self._compactions(sid)), truncated, int(leaf[1]))

    def path_messages_containing(
        self, namespace: str, session_id: str, role: str, needle: str
    ) -> list[Message]:
        """Raw messages (no overlays) of ``role`` on the active path whose stored JSON contains
        ``needle``, root→leaf."""
        path_of = self._active_path(namespace, session_id)
        if path_of is None:
            return []
        rows = self.connection.execute(
            _PATH + "SELECT m.content FROM path JOIN messages AS m ON m.mid = path.mid "
            "WHERE m.role = %(role)s AND strpos(m.content, %(needle)s) > 0 "
            "ORDER BY path.depth DESC",
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
        return [{"id": r[0], "role": r[1], "bytes": int(r[2])} for r in rows]

    def message(self, namespace: str, session_id: str, message_id: str) -> Message | None:
        """One message by id, or ``None``."""
        row = self._one(
            "SELECT m.content FROM messages AS m JOIN session_keys AS k ON k.sid = m.sid "
            "WHERE k.namespace = %s AND k.session_id = %s AND m.id = %s",
            (namespace, session_id, message_id),
        )
        return None if row is None else decode_message(row[0])

    def latest_leaf(self, namespace: str, session_id: str) -> Message | None:
        """The childless message with the highest log position, or ``None``."""
        sid = self._sid(namespace, session_id)
        if sid is None:
            return None
        row = self._one(
            "SELECT content FROM messages WHERE sid = %s AND child_count = 0 "
            "ORDER BY position DESC LIMIT 1",
            (sid,),
        )
        return None if row is None else decode_message(row[0])

    def path_length(self, namespace: str, session_id: str, leaf_id: str | None = None) -> int:
        """Raw messages on the path root→leaf (overlays ignored): the leaf's ``depth`` + 1."""
        sid = self._sid(namespace, session_id)
        if sid is None:
            return 0
        leaf = leaf_id or self._latest_leaf_id(sid)
        if leaf is None:
            return 0
        row = self._one("SELECT depth + 1 FROM messages WHERE sid = %s AND id = %s", (sid, leaf))
        return 0 if row is None else int(row[0])

    def branches(self, namespace: str, session_id: str, message_id: str) -> list[Message]:
        """Children of a message in log order."""
        sid = self._sid(namespace, session_id)
        if sid is None:
            return []
        rows = self.connection.execute(
            "SELECT content FROM messages WHERE sid = %s AND parent_id = %s ORDER BY position",
            (sid, message_id),
        ).fetchall()
        return [m for m in (decode_message(r[0]) for r in rows) if m is not None]

    def sessions(self, namespace: str) -> list[dict[str, Any]]:
        """Every session of ``namespace`` that has had messages, by id."""
        rows = self.connection.execute(
            "SELECT k.session_id, count(m.mid), min(m.created_at), max(m.created_at) "
            "FROM session_keys AS k LEFT JOIN messages AS m ON m.sid = k.sid "
            'WHERE k.namespace = %s GROUP BY k.sid, k.session_id ORDER BY k.session_id COLLATE "C"',
            (namespace,),
        ).fetchall()
        return [
            {"session_id": r[0], "messages": int(r[1]), "first_at": r[2], "last_at": r[3]}
            for r in rows
        ]

    def summary(self, namespace: str, session_id: str) -> dict[str, Any] | None:
        """Counts and positions of one session's tree, or ``None`` if it never had messages."""
        sid = self._sid(namespace, session_id)
        return None if sid is None else self._summary(sid, namespace, session_id)

    def empty_summary(self, namespace: str, session_id: str) -> dict[str, Any]:
        return self._summary(None, namespace, session_id)

    def _summary(self, sid: int | None, namespace: str, session_id: str) -> dict[str, Any]:
        row = self._one(
            "SELECT count(*), min(created_at), max(created_at), "
            "count(*) FILTER (WHERE child_count = 0), "
            "(SELECT count(*) FROM compactions WHERE sid = %(sid)s) "
            "FROM messages WHERE sid = %(sid)s",
            {"sid": sid},
        )
        assert row is not None
        messages, first_at, last_at, leaves, compactions = row
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
        row = self._one("SELECT count(*) FROM messages WHERE sid = %s", (sid,))
        return 0 if row is None else int(row[0])

    def search(
        self, namespace: str, session_id: str | None, query: str, limit: int
    ) -> list[dict[str, Any]]:
        """Hits ``{id, role, content, created_at, session_id}``, best first (``ts_rank_cd``)."""
        compiled = tsquery(query)
        if compiled is None:
            return []
        expression, phrases = compiled
        if session_id is None:
            scope = sql.SQL("k.namespace = %s")
            scope_params: list[Any] = [namespace]
        else:
            scope = sql.SQL("k.namespace = %s AND k.session_id = %s")
            scope_params = [namespace, session_id]
        statement = sql.SQL(
            "SELECT m.id, m.role, m.content, m.created_at, k.session_id "
            "FROM (SELECT {expression} AS q) AS query, messages AS m "
            "JOIN session_keys AS k ON k.sid = m.sid "
            "WHERE m.search @@ query.q AND {scope} "
            "ORDER BY ts_rank_cd(m.search, query.q) DESC, m.mid LIMIT %s"
        ).format(expression=expression, scope=scope)
        rows = self.connection.execute(statement, [*phrases, *scope_params, limit]).fetchall()
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
