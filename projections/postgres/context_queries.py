"""Context reads from the PostgreSQL read model: the shared ones
(:mod:`memstream.projections.sql.context_queries`), and search entries by ``ts_rank_cd``."""

from __future__ import annotations

from psycopg import sql

from memstream.projections.postgres.reads import Executes
from memstream.projections.postgres.session_queries import tsquery
from memstream.projections.sql.context_queries import SqlContextQueries
from memstream.projections.sql.dialect import POSTGRES

Connection = Executes


class PgContextQueries(SqlContextQueries):
    """Read side of the context projection on PostgreSQL."""

    def __init__(self, connection: Connection) -> None:
        super().__init__(connection, POSTGRES)

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
