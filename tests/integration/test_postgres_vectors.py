"""Vectors on PostgreSQL: searched by the database itself with pgvector where the server has it
(an HNSW index per dimension), in memory from the stored float32 rows otherwise; both paths
answer as the in-memory index does (issue 14, item 3).

The pgvector tests skip, saying so, on a server without the extension (Debian bookworm ships
none: build it from source against ``postgresql-server-dev-15``, as docs/configuration.md says)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from support.deployment import deployment_settings

from memstream.client import open_memstream
from memstream.projections.ports import ProjectorStats
from memstream.projections.postgres.connection import connect
from memstream.projections.postgres.memory_queries import PgMemoryQueries
from memstream.projections.postgres.memory_writer import store_vectors
from memstream.projections.postgres.schema import migrate
from memstream.projections.postgres.store import PostgresReadModelStore
from memstream.projections.postgres.vectors import (
    PgVectorSearch,
    enable_pgvector,
    ensure_index,
    has_embeddings,
)
from memstream.projections.recall.inputs import VectorCache
from memstream.projections.vector_projector import EmbedTexts
from memstream.projections.vector_search import VectorIndex, stack
from memstream.workers.runtime.nats_server import NatsServerProcess

pytestmark = pytest.mark.postgres

NS = "default"
MODEL = "fake-16"
DIM = 16


def _unit(rng: np.random.Generator, n: int) -> Any:
    rows = rng.standard_normal((n, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _pgvector_available(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
        ).fetchone()
    return row is not None


@pytest.fixture
def pgvector_url(postgres_url: str) -> str:
    if not _pgvector_available(postgres_url):
        pytest.skip(
            "pgvector is not installed on this PostgreSQL: recall searches vectors in memory "
            "there (tested below); the database's own search is not tested here"
        )
    return postgres_url


@pytest.fixture
def filled(pgvector_url: str) -> Iterator[tuple[psycopg.Connection[Any], PgMemoryQueries]]:
    """300 vectors of each kind for alice and 50 for bob, stored for pgvector too; a reader."""
    writer = connect(pgvector_url, autocommit=True)
    migrate(writer, pgvector_url)
    assert enable_pgvector(writer, pgvector_url)
    rng = np.random.default_rng(7)
    with writer.transaction():
        ensure_index(writer, DIM)
        for profile, count in (("alice", 300), ("bob", 50)):
            for kind in ("memory", "message"):
                items = [(f"{kind[:3]}{i:04d}", f"s{i % 3}", "text") for i in range(count)]
                vectors = list(_unit(rng, count))
                write = EmbedTexts(NS, profile, kind, items, 9)
                store_vectors(writer, write, MODEL, vectors, embeddings=True)
    reader = connect(pgvector_url, autocommit=True)
    try:
        yield reader, PgMemoryQueries(reader)
    finally:
        reader.close()
        writer.close()


def _in_memory(queries: PgMemoryQueries, profile: str, kind: str) -> VectorIndex:
    ids, blobs = queries.vectors(NS, profile, kind, MODEL)
    return VectorIndex(ids, stack(blobs, DIM))


def _same(found: list[tuple[str, float]], expected: list[tuple[str, float]]) -> None:
    assert [i for i, _ in found] == [i for i, _ in expected]
    assert [s for _, s in found] == pytest.approx([s for _, s in expected], abs=1e-5)


def test_the_database_search_answers_as_the_in_memory_index(
    filled: tuple[psycopg.Connection[Any], PgMemoryQueries],
) -> None:
    _, queries = filled
    # Nothing of a model or profile: no search (a recall's vector channel does not run), as
    # the in-memory path has no index to give
    assert queries.vector_search(NS, "alice", "memory", "another-model") is None
    assert queries.vector_search(NS, "carol", "memory", MODEL) is None
    assert VectorCache(MODEL).index(queries, NS, "carol", "memory") is None
    assert isinstance(VectorCache(MODEL).index(queries, NS, "alice", "memory"), PgVectorSearch)
    rng = np.random.default_rng(11)
    for profile in ("alice", "bob"):
        for kind in ("memory", "message"):
            server = queries.vector_search(NS, profile, kind, MODEL)
            assert server is not None
            memory = _in_memory(queries, profile, kind)
            for query in _unit(rng, 8):
                for k in (1, 10, 60):
                    _same(server.search(query, k), memory.search(query, k))
                _same(
                    server.search(query, 20, min_score=0.2), memory.search(query, 20, min_score=0.2)
                )
                best = [i for i, _ in memory.search(query, 3)]
                _same(server.search(query, 5, exclude=best), memory.search(query, 5, exclude=best))
    # Another profile's vectors are not there
    bob = queries.vector_search(NS, "bob", "memory", MODEL)
    assert bob is not None
    assert all(i.startswith("mem") for i, _ in bob.search(_unit(rng, 1)[0], 100))
    assert len(bob.search(_unit(rng, 1)[0], 100)) == 50


def test_the_graph_index_serves_the_search_when_the_planner_takes_it(
    filled: tuple[psycopg.Connection[Any], PgMemoryQueries],
) -> None:
    reader, queries = filled
    # Ordered by the index rather than sorted, and searching wide enough to be exact here
    reader.execute("SET enable_sort = off")
    reader.execute("SET hnsw.ef_search = 400")
    plan = "\n".join(
        r[0]
        for r in reader.execute(
            "EXPLAIN SELECT item_id FROM memory_vectors WHERE namespace = 'default' "
            "AND profile = 'alice' AND kind = 'memory' AND model = 'fake-16' "
            f"AND public.vector_dims(embedding) = {DIM} "
            f"ORDER BY embedding::public.vector({DIM}) <=> %s::public.vector({DIM}) LIMIT 10",
            ("[" + ",".join(["0.25"] * DIM) + "]",),
        )
    )
    assert f"memory_vectors_hnsw_{DIM}" in plan, plan
    server = queries.vector_search(NS, "alice", "memory", MODEL)
    assert server is not None
    memory = _in_memory(queries, "alice", "memory")
    for query in _unit(np.random.default_rng(3), 5):
        _same(server.search(query, 10), memory.search(query, 10))


class _Fake:
    """An embedding model of 16 dimensions (never asked to embed: nothing is projected)."""

    model_name = MODEL

    def encode(self, texts: Any) -> Any:
        raise AssertionError("not expected to embed")


def test_without_pgvector_vectors_are_searched_in_memory(postgres_url: str) -> None:
    # Given an indexer's store told not to use pgvector (as on a server without it)
    store = PostgresReadModelStore(postgres_url, ["vectors"], encoder=_Fake(), pgvector=False)
    reader = connect(postgres_url, autocommit=True)
    try:
        # Then vectors are stored as rows only, and a reader loads them to search in memory
        assert not has_embeddings(store.connection)
        with store.connection.transaction():
            write = EmbedTexts(NS, "alice", "memory", [("m1", None, "t")], 3)
            store_vectors(store.connection, write, MODEL, list(_unit(np.random.default_rng(1), 1)))
        queries = PgMemoryQueries(reader)
        assert queries.vector_search(NS, "alice", "memory", MODEL) is None
        assert queries.vectors(NS, "alice", "memory", MODEL)[0] == ["m1"]
    finally:
        reader.close()
        store.close()


def test_vectors_stored_before_pgvector_are_indexed_again(pgvector_url: str) -> None:
    # Given vectors stored without pgvector, at the projection's position 3
    store = PostgresReadModelStore(pgvector_url, ["vectors"], encoder=_Fake(), pgvector=False)
    try:
        with store.connection.transaction():
            write = EmbedTexts(NS, "alice", "memory", [("m1", None, "t")], 3)
            store_vectors(store.connection, write, MODEL, list(_unit(np.random.default_rng(1), 1)))
            store.connection.execute("UPDATE tracking SET seq = 3 WHERE projection = 'vectors'")
        assert store.positions() == {"vectors": 3}
    finally:
        store.close()
    # When an indexer's store that uses pgvector opens it (at its start)
    store = PostgresReadModelStore(pgvector_url, ["vectors"], encoder=_Fake(), long_lived=True)
    try:
        # Then the projection is emptied, to be indexed again from the log for pgvector
        assert has_embeddings(store.connection)
        assert store.positions() == {"vectors": 0}
        assert store.apply([], ProjectorStats()) == 0
    finally:
        store.close()


async def test_a_client_recalls_through_the_database_search(
    pgvector_url: str, nats_server: NatsServerProcess, tmp_path: Path
) -> None:
    # Given a client with its workers on a database whose server has pgvector
    settings = deployment_settings(nats_server.url, tmp_path / "data", database_url=pgvector_url)
    ms = await open_memstream(settings, workers=True)
    try:
        profile = await ms.agent_memory("default").get_profile("vera")
        await profile.remember("My sister lives in Porto")
        await profile.remember("I am allergic to peanuts")
        await ms.wait_for("vectors")
        # When it recalls by meaning (no word in common with the memory)
        result = await profile.recall("Can I eat nuts?")
        # Then the database searched the vectors, and found the memory
        index = ms.core.recall.vector_cache.index(
            ms.core.reads.memory_queries, "default", "vera", "memory"
        )
        assert isinstance(index, PgVectorSearch)
        assert "peanuts" in result["candidates"][0]["summary"]
    finally:
        await ms.close()
