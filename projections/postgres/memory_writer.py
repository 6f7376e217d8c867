"""Applies memory writes to PostgreSQL: the rows as
:mod:`memstream.projections.sql.memory_writer` writes them, raw messages and memories each with
a ``tsvector`` (the text is kept once); and the vectors projection's embeddings. A
memory's search vector weighs its parts as SQLite's ranking does: summary (A) over keywords
(B) over content and search queries (C).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from memstream.projections.memory_projector import AddMessages, MemoryWrite
from memstream.projections.postgres.schema import TEXT_SEARCH
from memstream.projections.postgres.text import searchable
from memstream.projections.postgres.vectors import literal
from memstream.projections.sql import vector_writer as shared_vectors
from memstream.projections.sql.dialect import POSTGRES
from memstream.projections.sql.memory_writer import (
    MEMORY_COLUMNS,
    MESSAGE_COLUMNS,
    SqlMemoryWriter,
    Texts,
    message_row,
)
from memstream.projections.vector_projector import DropVectors, EmbedTexts

Connection = psycopg.Connection[tuple[Any, ...]]

# Parameters: the searchable summary, keywords, content and queries.
_MEMORY_SEARCH = (
    f"setweight(to_tsvector('{TEXT_SEARCH}', %s), 'A') || "
    f"setweight(to_tsvector('{TEXT_SEARCH}', %s), 'B') || "
    f"setweight(to_tsvector('{TEXT_SEARCH}', %s), 'C') || "
    f"setweight(to_tsvector('{TEXT_SEARCH}', %s), 'C')"
)


def apply_memory_writes(connection: Connection, writes: Iterable[MemoryWrite]) -> None:
    """Apply writes inside the caller's transaction (each is idempotent: a redelivered event
    changes nothing)."""
    PgMemoryWriter.apply(connection, writes)


class PgMemoryWriter(SqlMemoryWriter):
    dialect = POSTGRES

    @classmethod
    def _add_messages(cls, connection: Connection, pid: int, write: AddMessages) -> None:
        with connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO memory_messages ({MESSAGE_COLUMNS}, search) "
                f"VALUES (%s, %s, %s, %s, %s, %s, %s, to_tsvector('{TEXT_SEARCH}', %s)) "
                "ON CONFLICT DO NOTHING",
                [
                    (*message_row(pid, write, message), searchable(message["content"]))
                    for message in write.messages
                ],
            )

    @classmethod
    def _insert_memory(
        cls, connection: Connection, values: tuple[Any, ...], texts: Texts
    ) -> int | None:
        summary, content, keywords, queries = (searchable(text) for text in texts)
        row = connection.execute(
            f"INSERT INTO memories ({MEMORY_COLUMNS}, search) VALUES (%s, %s, %s, %s, %s, %s, "
            f"%s, %s, %s, %s, %s, %s, %s, %s, %s, {_MEMORY_SEARCH}) "
            "ON CONFLICT DO NOTHING RETURNING rid",
            (*values, summary, keywords, content, queries),
        ).fetchone()
        return None if row is None else int(row[0])

    @classmethod
    def _add_sources(
        cls, connection: Connection, pid: int, rid: int, message_ids: list[str]
    ) -> None:
        connection.execute(
            "INSERT INTO memory_sources (pid, message_id, memory_rid) "
            "SELECT %s, unnest(%s::text[]), %s ON CONFLICT DO NOTHING",
            (pid, message_ids, rid),
        )

    @classmethod
    def _delete_messages(
        cls, connection: Connection, pid: int, where: str, params: Sequence[Any]
    ) -> None:
        # (the search vector is in the row)
        cls._execute(
            connection, f"DELETE FROM memory_messages WHERE pid = ? AND {where}", (pid, *params)
        )


# -- the vectors projection ------------------------------------------------------------------


def store_vectors(
    connection: Connection,
    write: EmbedTexts,
    model: str,
    vectors: Sequence[Any],
    *,
    embeddings: bool = False,
) -> None:
    """Store the vectors of ``write``'s items (in their order), replacing older ones; with
    ``embeddings``, for pgvector too (see :mod:`memstream.projections.postgres.vectors`)."""
    embedding = ("?::public.vector", literal) if embeddings else None
    shared_vectors.store_vectors(connection, POSTGRES, write, model, vectors, embedding)


def drop_vectors(connection: Connection, write: DropVectors) -> None:
    """Remove the vectors ``write`` names."""
    shared_vectors.drop_vectors(connection, POSTGRES, write)
