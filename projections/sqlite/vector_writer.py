"""Applies vector writes to SQLite: one float32 BLOB per memory or raw message, with the name
of the model that made it."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from memstream.projections.vector_projector import DropVectors, EmbedTexts


def store_vectors(
    connection: sqlite3.Connection, write: EmbedTexts, model: str, vectors: Sequence[Any]
) -> None:
    """Store the vectors of ``write``'s items (in their order), replacing older ones."""
    from memstream.projections.vector_search import pack  # numpy: only where vectors are made

    connection.executemany(
        "INSERT INTO memory_vectors (namespace, profile, kind, item_id, session_id, model, "
        "vector, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET "
        "session_id = excluded.session_id, model = excluded.model, vector = excluded.vector, "
        "seq = excluded.seq",
        [
            (
                write.namespace,
                write.profile,
                write.kind,
                item_id,
                session_id,
                model,
                pack(v),
                write.seq,
            )
            for (item_id, session_id, _), v in zip(write.items, vectors, strict=True)
        ],
    )


def drop_vectors(connection: sqlite3.Connection, write: DropVectors) -> None:
    """Remove the vectors ``write`` names."""
    key = (write.namespace, write.profile)
    if write.ids:
        connection.executemany(
            "DELETE FROM memory_vectors WHERE namespace = ? AND profile = ? AND kind = ? "
            "AND item_id = ?",
            [(*key, write.kind, item_id) for item_id in write.ids],
        )
    elif write.session_id is not None:
        connection.execute(
            "DELETE FROM memory_vectors WHERE namespace = ? AND profile = ? AND session_id = ?",
            (*key, write.session_id),
        )
    elif write.kind is None:
        connection.execute("DELETE FROM memory_vectors WHERE namespace = ? AND profile = ?", key)
