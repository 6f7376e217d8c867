"""Applies vector writes to SQLite: one float32 BLOB per memory or raw message, with the name
of the model that made it (:mod:`memstream.projections.sql.vector_writer`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from memstream.projections.sql import vector_writer as shared_vectors
from memstream.projections.sql.dialect import SQLITE
from memstream.projections.vector_projector import DropVectors, EmbedTexts


def store_vectors(
    connection: sqlite3.Connection, write: EmbedTexts, model: str, vectors: Sequence[Any]
) -> None:
    """Store the vectors of ``write``'s items (in their order), replacing older ones."""
    shared_vectors.store_vectors(connection, SQLITE, write, model, vectors)


def drop_vectors(connection: sqlite3.Connection, write: DropVectors) -> None:
    """Remove the vectors ``write`` names."""
    shared_vectors.drop_vectors(connection, SQLITE, write)
