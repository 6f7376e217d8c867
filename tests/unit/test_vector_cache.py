"""The recall's cache of a profile's vector matrix: kept while nothing changed, rebuilt when its
profile's vectors did, and never stale. A real SQLite read model written by the vectors writer."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from memstream.projections.recall.inputs import VectorCache
from memstream.projections.sqlite.database import open_database, set_tracked_seq
from memstream.projections.sqlite.memory_queries import SqliteMemoryQueries
from memstream.projections.sqlite.vector_writer import drop_vectors, store_vectors
from memstream.projections.vector_projector import MEMORY, DropVectors, EmbedTexts

MODEL = "test-model"


class CountingQueries(SqliteMemoryQueries):
    """The SQLite queries, counting the matrix reads and the profile checks."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        super().__init__(connection)
        self.loads = 0
        self.checks = 0

    def vectors(self, *args: Any) -> tuple[list[str], list[bytes]]:
        self.loads += 1
        return super().vectors(*args)

    def vector_state(self, *args: Any) -> tuple[int, int]:
        self.checks += 1
        return super().vector_state(*args)


def unit(*values: float) -> list[float]:
    vector = np.array(values, dtype=np.float32)
    return list(vector / np.linalg.norm(vector))


def write(connection: sqlite3.Connection, seq: int, profile: str, *items: str) -> None:
    connection.execute("BEGIN")
    store_vectors(
        connection,
        EmbedTexts("ns", profile, MEMORY, [(i, None, i) for i in items], seq),
        MODEL,
        [unit(1.0, float(n), 0.0) for n, _ in enumerate(items)],
    )
    set_tracked_seq(connection, "vectors", seq)
    connection.execute("COMMIT")


def test_the_matrix_is_kept_while_nothing_changes_and_rebuilt_when_its_profile_changes(
    tmp_path: Path,
) -> None:
    connection = open_database(tmp_path / "memstream.db")
    queries = CountingQueries(connection)
    cache = VectorCache(MODEL)
    write(connection, 1, "ada", "a1", "a2")

    first = cache.index(queries, "ns", "ada", MEMORY)
    assert first is not None
    assert sorted(first.ids) == ["a1", "a2"]
    assert (queries.loads, queries.checks) == (1, 1)

    # Nothing committed since: the projection's position alone says so (no profile check)
    assert cache.index(queries, "ns", "ada", MEMORY) is first
    assert (queries.loads, queries.checks) == (1, 1)

    # Another profile's vectors move the position: ada's are checked, not read again
    write(connection, 2, "bob", "b1")
    assert cache.index(queries, "ns", "ada", MEMORY) is first
    assert (queries.loads, queries.checks) == (1, 2)

    # A new vector of ada's: read again, with it
    write(connection, 3, "ada", "a3")
    second = cache.index(queries, "ns", "ada", MEMORY)
    assert second is not None
    assert sorted(second.ids) == ["a1", "a2", "a3"]
    assert queries.loads == 2

    # A deletion (fewer vectors): read again, without it
    connection.execute("BEGIN")
    drop_vectors(connection, DropVectors("ns", "ada", MEMORY, ids=("a1",)))
    set_tracked_seq(connection, "vectors", 4)
    connection.execute("COMMIT")
    third = cache.index(queries, "ns", "ada", MEMORY)
    assert third is not None
    assert sorted(third.ids) == ["a2", "a3"]

    # All gone: no index, and none is served from the cache afterwards
    connection.execute("BEGIN")
    drop_vectors(connection, DropVectors("ns", "ada"))
    set_tracked_seq(connection, "vectors", 5)
    connection.execute("COMMIT")
    assert cache.index(queries, "ns", "ada", MEMORY) is None
    assert cache.index(queries, "ns", "ada", MEMORY) is None
    connection.close()


def test_vectors_of_another_model_are_left_out(tmp_path: Path) -> None:
    connection = open_database(tmp_path / "memstream.db")
    queries = CountingQueries(connection)
    write(connection, 1, "ada", "a1")
    assert VectorCache("another-model").index(queries, "ns", "ada", MEMORY) is None
    found = VectorCache(MODEL).index(queries, "ns", "ada", MEMORY)
    assert found is not None
    assert list(found.ids) == ["a1"]
    connection.close()
