"""The vectors projection's writes on either engine: one float32 BLOB per memory or raw message,
with the name of the model that made it (PostgreSQL may keep a pgvector copy beside it)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import closing
from typing import Any

from memstream.projections.sql.dialect import Dialect
from memstream.projections.vector_projector import DropVectors, EmbedTexts

_COLUMNS = "namespace, profile, kind, item_id, session_id, model, vector, seq"
_UPDATES = (
    "session_id = excluded.session_id, model = excluded.model, vector = excluded.vector, "
    "seq = excluded.seq"
)


def store_vectors(
    connection: Any,
    dialect: Dialect,
    write: EmbedTexts,
    model: str,
    vectors: Sequence[Any],
    embedding: tuple[str, Any] | None = None,
) -> None:
    """Store the vectors of ``write``'s items (in their order), replacing older ones; with
    ``embedding`` (a column's parameter marker and what makes its value of a vector), in that
    column too."""
    from memstream.projections.vector_search import pack  # numpy: only where vectors are made

    columns, values, updates = _COLUMNS, ", ".join("?" * 8), _UPDATES
    if embedding is not None:
        columns += ", embedding"
        values += f", {embedding[0]}"
        updates += ", embedding = excluded.embedding"
    rows = [
        (
            write.namespace,
            write.profile,
            write.kind,
            item_id,
            session_id,
            model,
            pack(v),
            write.seq,
            *(() if embedding is None else (embedding[1](v),)),
        )
        for (item_id, session_id, _), v in zip(write.items, vectors, strict=True)
    ]
    with closing(connection.cursor()) as cursor:
        cursor.executemany(
            dialect.sql(
                f"INSERT INTO memory_vectors ({columns}) VALUES ({values}) "
                f"ON CONFLICT (namespace, profile, kind, item_id) DO UPDATE SET {updates}"
            ),
            rows,
        )


def drop_vectors(connection: Any, dialect: Dialect, write: DropVectors) -> None:
    """Remove the vectors ``write`` names."""
    key = (write.namespace, write.profile)
    if write.ids:
        among, values = dialect.any_of("item_id", write.ids)
        connection.execute(
            dialect.sql(
                "DELETE FROM memory_vectors WHERE namespace = ? AND profile = ? AND kind = ? "
                f"AND {among}"
            ),
            (*key, write.kind, *values),
        )
    elif write.session_id is not None:
        connection.execute(
            dialect.sql(
                "DELETE FROM memory_vectors WHERE namespace = ? AND profile = ? AND session_id = ?"
            ),
            (*key, write.session_id),
        )
    elif write.kind is None:
        connection.execute(
            dialect.sql("DELETE FROM memory_vectors WHERE namespace = ? AND profile = ?"), key
        )
