"""Session reads from the PostgreSQL read model: history, leaves, branches, budgets, search.

The same answers as :class:`~memstream.projections.sqlite.session_queries.SqliteSessionQueries`
(the contract tests compare both on the same events). Paths are walked by recursive CTEs along
the row links, bounded by the session's message count; search compiles the one query syntax
(:mod:`memstream.projections.search_query`) into a ``tsquery`` from parameters only and ranks
by ``ts_rank_cd``.
"""

from __future__ import annotations

from typing import Any

from psycopg import sql

from memstream.domain.messages import Message, decode_messages
from memstream.projections.overlays import apply_overlays
from memstream.projections.postgres.reads import Executes
from memstream.projections.postgres.schema import TEXT_SEARCH
from memstream.projections.postgres.text import indexable
from memstream.projections.search_query import to_tsquery_parts
from memstream.projections.sql.dialect import POSTGRES
from memstream.projections.sql.session_queries import SqlSessionQueries, hits

Connection = Executes


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


class PgSessionQueries(SqlSessionQueries):
    """Read side of sessions on PostgreSQL; each method reads in its own statement(s)."""

    def __init__(self, connection: Connection) -> None:
        super().__init__(connection, POSTGRES)

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
        return hits(rows)
