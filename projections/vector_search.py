"""Exact cosine top-k over L2-normalised float32 vectors, and their BLOB encoding (pure numpy)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]

_LITTLE_F32 = np.dtype("<f4")


def pack(vector: npt.ArrayLike) -> bytes:
    """Encode one vector as float32 little-endian bytes (for a BLOB column)."""
    return np.ascontiguousarray(vector, dtype=_LITTLE_F32).ravel().tobytes()


def unpack(blob: bytes, dimension: int) -> Matrix:
    """Decode one vector written by :func:`pack`.

    Raises:
        ValueError: the blob does not hold ``dimension`` float32 values.
    """
    if len(blob) != 4 * dimension:
        raise ValueError(
            f"vector blob is {len(blob)} bytes; dimension {dimension} needs {4 * dimension}"
        )
    return np.frombuffer(blob, dtype=_LITTLE_F32).astype(np.float32)


def stack(blobs: Iterable[bytes], dimension: int) -> Matrix:
    """Build the ``n × dimension`` matrix of many packed vectors in one copy.

    Raises:
        ValueError: a blob does not hold ``dimension`` float32 values.
    """
    joined = b"".join(blobs)
    if len(joined) % (4 * dimension):
        raise ValueError(
            f"vector blobs hold {len(joined)} bytes, not a multiple of dimension {dimension} × 4"
        )
    flat = np.frombuffer(joined, dtype=_LITTLE_F32).astype(np.float32)
    return flat.reshape(-1, dimension)


class VectorIndex:
    """An immutable in-memory index of vectors by id; exact cosine similarity (dot product of
    normalised rows). Equal scores rank in the order the ids were given."""

    __slots__ = ("_ids", "_matrix", "_positions")

    def __init__(self, ids: Sequence[str], matrix: npt.ArrayLike) -> None:
        array = np.asarray(matrix, dtype=np.float32)
        if array.ndim != 2 and len(ids) == 0:
            array = array.reshape(0, 0)
        if array.ndim != 2 or array.shape[0] != len(ids):
            raise ValueError(
                f"matrix has shape {array.shape}; expected ({len(ids)}, dimension) for the ids"
            )
        self._ids = tuple(ids)
        self._matrix = np.ascontiguousarray(array)
        self._positions: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def dimension(self) -> int:
        return int(self._matrix.shape[1])

    @property
    def ids(self) -> tuple[str, ...]:
        return self._ids

    def search(
        self,
        query: npt.ArrayLike,
        k: int,
        *,
        min_score: float | None = None,
        exclude: Collection[str] = (),
    ) -> list[tuple[str, float]]:
        """The ``k`` ids most similar to ``query``, best first, as ``(id, score)``.

        Args:
            query: a normalised vector of the index's dimension.
            k: how many results at most.
            min_score: drop results scoring below it.
            exclude: ids never returned.
        """
        n = len(self._ids)
        if k <= 0 or n == 0:
            return []
        vector = np.asarray(query, dtype=np.float32).ravel()
        if vector.shape[0] != self.dimension:
            raise ValueError(
                f"query has dimension {vector.shape[0]}; the index has {self.dimension}"
            )
        scores = self._matrix @ vector
        if exclude:
            if self._positions is None:
                self._positions = {id_: i for i, id_ in enumerate(self._ids)}
            dropped = [self._positions[i] for i in exclude if i in self._positions]
            if dropped:
                scores[dropped] = -np.inf
        if min_score is not None:
            scores[scores < min_score] = -np.inf
        want = min(k, n)
        if want < n:
            # argpartition finds the k-th best score in O(n); every position scoring at least that
            # is a candidate, so a tie at the boundary is settled by id position, not by chance.
            kth = scores[np.argpartition(scores, n - want)[n - want]]
            candidates = np.flatnonzero(scores >= kth)
        else:
            candidates = np.arange(n)
        # lexsort: last key primary — score descending, then position ascending.
        order = candidates[np.lexsort((candidates, -scores[candidates]))][:want]
        return [(self._ids[i], float(scores[i])) for i in order if np.isfinite(scores[i])]
