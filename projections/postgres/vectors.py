"""Vectors searched by PostgreSQL itself, with pgvector, where the extension is installed.

Every vector is stored as float32 ``bytea`` (what a reader loads to search in memory, the path
without pgvector). Where the server has pgvector, the indexer's store creates the extension (in
``public``, which survives a copy moved aside) and a column ``embedding vector`` beside it,
written with each vector; each dimension gets an HNSW index on the column cast to its size
(cosine distance), partial to the rows of that dimension. A reader then asks the database for a
profile's nearest vectors (:class:`PgVectorSearch`) instead of loading them all: memory use no
longer grows with the profile. The planner picks the profile's rows by their index and ranks
them exactly while they are few, or walks the HNSW graph (approximate, iterative scans on)
when that is cheaper.

A database where the extension cannot be created (not installed, or no privilege: it is then
said once in the log) keeps the in-memory path; nothing else changes.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

import psycopg

from memstream.projections.postgres.connection import SCHEMA, describe
from memstream.projections.postgres.reads import Executes

logger = logging.getLogger(__name__)

Connection = psycopg.Connection[tuple[Any, ...]]
EXTENSION = "vector"
# The graph index's build parameters (pgvector's defaults) and its operator class.
_HNSW = "hnsw ((embedding::public.vector({d})) public.vector_cosine_ops)"


def enable_pgvector(connection: Connection, url: str) -> bool:
    """Create the extension if the server has it and it is missing, and the ``embedding``
    column; whether vectors are now stored for pgvector too. Each step in a transaction of its
    own (a refusal leaves the database as it was)."""
    installed = connection.execute(
        "SELECT 1 FROM pg_extension WHERE extname = %s", (EXTENSION,)
    ).fetchone()
    if installed is None:
        available = connection.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = %s", (EXTENSION,)
        ).fetchone()
        if available is None:
            return False
        try:
            with connection.transaction():
                connection.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
        except psycopg.Error as error:
            logger.warning(
                "read model %s: pgvector is available but cannot be created (%s): recall "
                "searches vectors in memory",
                describe(url),
                str(error).strip().splitlines()[0],
            )
            return False
    with connection.transaction():
        connection.execute(
            f"ALTER TABLE {SCHEMA}.memory_vectors ADD COLUMN IF NOT EXISTS embedding public.vector"
        )
    return True


def has_embeddings(connection: Executes) -> bool:
    """Whether the database stores vectors for pgvector (the column exists)."""
    row = connection.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = %s "
        "AND table_name = 'memory_vectors' AND column_name = 'embedding'",
        (SCHEMA,),
    ).fetchone()
    return row is not None


def ensure_index(connection: Connection, dimension: int) -> None:
    """The HNSW index of the vectors of ``dimension`` (inside the caller's transaction)."""
    d = int(dimension)
    connection.execute(
        f"CREATE INDEX IF NOT EXISTS memory_vectors_hnsw_{d} ON {SCHEMA}.memory_vectors "
        f"USING {_HNSW.format(d=d)} WHERE public.vector_dims(embedding) = {d}"
    )


def literal(vector: Any) -> str:
    """``vector`` in pgvector's text form, ``[x,y,...]`` (shortest exact float32 digits)."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


class PgVectorSearch:
    """A profile's vectors of one kind and model, searched by the database (see the module's
    docstring); the :class:`~memstream.projections.ports.VectorSearch` a recall asks."""

    __slots__ = ("key", "reads")

    def __init__(
        self, reads: Executes, namespace: str, profile: str, kind: str, model: str
    ) -> None:
        self.reads = reads
        self.key = (namespace, profile, kind, model)

    def search(
        self,
        query: Any,
        k: int,
        *,
        min_score: float | None = None,
        exclude: Collection[str] = (),
    ) -> list[tuple[str, float]]:
        """The ``k`` ids most similar to ``query`` (cosine), best first, as ``(id, score)``;
        below ``min_score`` or in ``exclude``: left out."""
        flat = query.ravel() if hasattr(query, "ravel") else query
        values = [float(x) for x in flat]
        if k <= 0 or not values:
            return []
        d = len(values)  # an int: the only value spliced into the statement
        distance = f"embedding::public.vector({d}) <=> %(q)s::public.vector({d})"
        namespace, profile, kind, model = self.key
        rows = self.reads.execute(
            f"SELECT item_id, 1 - ({distance}) FROM memory_vectors "
            "WHERE namespace = %(ns)s AND profile = %(profile)s AND kind = %(kind)s "
            f"AND model = %(model)s AND public.vector_dims(embedding) = {d} "
            "AND item_id <> ALL(%(exclude)s) "
            f"ORDER BY {distance} LIMIT %(k)s",
            {
                "q": literal(values),
                "ns": namespace,
                "profile": profile,
                "kind": kind,
                "model": model,
                "exclude": list(exclude),
                "k": int(k),
            },
        ).fetchall()
        # Best first, equal scores by id (an iterative scan may return them slightly out of
        # order); float32 scores, as the in-memory index computes them.
        found = sorted(((str(i), float(s)) for i, s in rows), key=lambda r: (-r[1], r[0]))
        return [r for r in found if min_score is None or r[1] >= min_score]
