"""Reads of the memory and vectors read models on PostgreSQL: the shared
:class:`~memstream.projections.sql.memory_queries.SqlMemoryQueries`, the database's own vector
search (pgvector), and full-text search with the same answers as SQLite's: the channels match
any of their terms (each a ``phraseto_tsquery`` parameter) and rank by ``ts_rank_cd`` with the
weights SQLite's BM25 gives the memory's parts."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Literal, LiteralString

from psycopg import sql

from memstream.projections.postgres.reads import Executes
from memstream.projections.postgres.schema import TEXT_SEARCH
from memstream.projections.postgres.text import indexable
from memstream.projections.postgres.vectors import PgVectorSearch, has_embeddings
from memstream.projections.sql.dialect import POSTGRES
from memstream.projections.sql.memory_queries import SqlMemoryQueries

Connection = Executes
# ts_rank_cd's weights of D, C, B, A (each at most 1): content and queries (C), keywords (B)
# and summary (A) as 1 : 1.5 : 2, as SQLite's bm25 weighs the columns.
_WEIGHTS = "{0.25, 0.5, 0.75, 1.0}"


def _any_term(terms: Sequence[str]) -> tuple[sql.Composable, list[str]] | None:
    """A ``tsquery`` matching any of ``terms`` (each a parameter), or ``None``: no terms."""
    kept = [term for term in terms if term and indexable(term)]
    if not kept:
        return None
    phrase = sql.SQL("phraseto_tsquery({}::regconfig, %s)").format(sql.Literal(TEXT_SEARCH))
    return sql.SQL(" || ").join([phrase] * len(kept)), kept


# Ranked by ts_rank_cd (the memories' parts weighted as SQLite's BM25 weighs its columns).
_FULL_TEXT: dict[str, tuple[LiteralString, list[str]]] = {
    "memories": (
        "SELECT m.id FROM (SELECT {} AS q) AS query, memories AS m "
        "WHERE m.pid = %s AND m.search @@ query.q "
        "ORDER BY ts_rank_cd(%s::float4[], m.search, query.q) DESC, m.rid DESC LIMIT %s",
        [_WEIGHTS],
    ),
    "messages": (
        "SELECT r.id FROM (SELECT {} AS q) AS query, memory_messages AS r "
        "WHERE r.pid = %s AND r.search @@ query.q "
        "ORDER BY ts_rank_cd(r.search, query.q) DESC, r.rid DESC LIMIT %s",
        [],
    ),
}

# A reader whose database stores no vectors for pgvector asks again after this long (the
# indexer creates the column when it starts).
EMBEDDINGS_CHECK_SECONDS = 10.0


class PgMemoryQueries(SqlMemoryQueries):
    """Agent Memory reads, each scoped by (namespace, profile): an id of another profile is
    not found."""

    def __init__(self, connection: Connection) -> None:
        super().__init__(connection, POSTGRES)
        self._embeddings = False  # whether vectors are stored for pgvector (see vectors.py)
        self._embeddings_checked = -math.inf

    def vector_search(
        self, namespace: str, profile: str, kind: str, model: str
    ) -> PgVectorSearch | None:
        """The database's own search of the profile's vectors where pgvector stores them
        (asked again every :data:`EMBEDDINGS_CHECK_SECONDS` while it does not), else ``None``."""
        now = time.monotonic()
        if not self._embeddings and now - self._embeddings_checked >= EMBEDDINGS_CHECK_SECONDS:
            self._embeddings_checked = now
            self._embeddings = has_embeddings(self.connection)
        if not self._embeddings:
            return None
        row = self.connection.execute(  # none of this model (yet): nothing to search
            "SELECT 1 FROM memory_vectors WHERE namespace = %s AND profile = %s AND kind = %s "
            "AND model = %s LIMIT 1",
            (namespace, profile, kind, model),
        ).fetchone()
        return (
            None
            if row is None
            else PgVectorSearch(self.connection, namespace, profile, kind, model)
        )

    def _full_text(
        self, table: Literal["memories", "messages"], pid: int, terms: Sequence[str], limit: int
    ) -> list[str]:
        match = _any_term(terms)
        if match is None:
            return []
        expression, params = match
        statement, weights = _FULL_TEXT[table]
        rows = self.connection.execute(
            sql.SQL(statement).format(expression), [*params, pid, *weights, limit]
        ).fetchall()
        return [r[0] for r in rows]
