"""Exact cosine top-k: agrees with a brute-force sort, ranks ties by id order, and encodes
vectors for a BLOB column losslessly."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from memstream.projections.vector_search import VectorIndex, pack, stack, unpack


def _unit_rows(rng: np.random.Generator, n: int, d: int) -> npt.NDArray[np.float32]:
    matrix = rng.standard_normal((n, d)).astype(np.float32)
    unit: npt.NDArray[np.float32] = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    return unit


def _brute_force(
    ids: list[str], matrix: npt.NDArray[np.float32], query: npt.NDArray[np.float32], k: int
) -> list[tuple[str, float]]:
    scores = matrix @ query
    ranked = sorted(range(len(ids)), key=lambda i: (-float(scores[i]), i))
    return [(ids[i], float(scores[i])) for i in ranked[:k]]


@pytest.mark.parametrize(("n", "k"), [(1, 1), (7, 3), (50, 10), (5_000, 10), (5_000, 100)])
def test_top_k_matches_a_brute_force_sort(n: int, k: int) -> None:
    # Given an index of random unit vectors
    rng = np.random.default_rng(n * 31 + k)
    ids = [f"m{i:05d}" for i in range(n)]
    matrix = _unit_rows(rng, n, 32)
    index = VectorIndex(ids, matrix)
    for query in _unit_rows(rng, 5, 32):
        # When it is searched
        found = index.search(query, k)
        # Then it returns what a full sort returns, best first
        expected = _brute_force(ids, matrix, query, k)
        assert [i for i, _ in found] == [i for i, _ in expected]
        assert [s for _, s in found] == pytest.approx([s for _, s in expected], abs=1e-6)
    assert len(index) == n


def test_equal_scores_rank_in_id_order() -> None:
    # Given many vectors equal to each other, and one better match given last
    ids = [f"dup{i}" for i in range(20)] + ["best"]
    matrix = np.array([[1.0, 0.0]] * 20 + [[0.0, 1.0]], dtype=np.float32)
    index = VectorIndex(ids, matrix)
    query = np.array([0.6, 0.8], dtype=np.float32)
    # When the top 5 are asked for (the boundary cuts through the tie)
    found = index.search(query, 5)
    # Then the best comes first and the tie is broken by the order the ids were given
    assert [i for i, _ in found] == ["best", "dup0", "dup1", "dup2", "dup3"]
    assert index.search(query, 5) == found


def test_exclude_and_min_score_filter_results() -> None:
    ids = ["a", "b", "c", "d"]
    matrix = np.eye(4, dtype=np.float32)
    index = VectorIndex(ids, matrix)
    query = np.array([0.8, 0.6, 0.0, 0.0], dtype=np.float32)
    # When "a" is excluded, the next best leads and nothing excluded appears
    assert [i for i, _ in index.search(query, 4, exclude={"a", "unknown"})][:1] == ["b"]
    assert "a" not in {i for i, _ in index.search(query, 4, exclude=["a"])}
    # When a minimum score is given, weaker results are dropped
    assert index.search(query, 4, min_score=0.5) == [
        ("a", pytest.approx(0.8)),
        ("b", pytest.approx(0.6)),
    ]
    assert index.search(query, 4, min_score=0.9) == []


def test_k_larger_than_the_index_and_empty_indexes() -> None:
    index = VectorIndex(["x", "y"], np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32))
    query = np.array([0.0, 1.0], dtype=np.float32)
    assert [i for i, _ in index.search(query, 10)] == ["y", "x"]
    assert index.search(query, 0) == []
    empty = VectorIndex([], np.zeros((0, 2), dtype=np.float32))
    assert len(empty) == 0
    assert empty.search(query, 5) == []


def test_a_query_of_another_dimension_is_refused() -> None:
    index = VectorIndex(["x"], np.ones((1, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="dimension 2"):
        index.search(np.ones(2, dtype=np.float32), 1)
    with pytest.raises(ValueError, match="shape"):
        VectorIndex(["x", "y"], np.ones((1, 3), dtype=np.float32))


def test_pack_unpack_and_stack_round_trip() -> None:
    rng = np.random.default_rng(7)
    matrix = _unit_rows(rng, 10, 384)
    blobs = [pack(row) for row in matrix]
    # Then each blob is 4 bytes per value, little-endian float32, and decodes to the same vector
    assert all(len(b) == 384 * 4 for b in blobs)
    assert blobs[0][:4] == np.float32(matrix[0, 0]).astype("<f4").tobytes()
    assert np.array_equal(unpack(blobs[3], 384), matrix[3])
    stacked = stack(blobs, 384)
    assert stacked.dtype == np.float32
    assert stacked.shape == (10, 384)
    assert np.array_equal(stacked, matrix)
    assert stack([], 384).shape == (0, 384)
    with pytest.raises(ValueError, match="dimension 384"):
        unpack(blobs[0][:-4], 384)
