"""The indexer: the ``vectors`` projection, run by a projector of its own (its own consumer), with
an embedding model loaded only when the first text to embed arrives.

A process that serves sessions only never loads torch: :class:`LazyEncoder` knows the model's
name (recorded with every vector) without loading it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memstream.workers.embedding_models import BUNDLED_MODEL, model_key

if TYPE_CHECKING:
    from memstream.workers.embeddings import Embedder


class LazyEncoder:
    """The embedding model ``model`` (``None``: the bundled one), loaded at first use."""

    def __init__(self, model: str | None = None) -> None:
        self._model = model
        self._key = model_key(model)  # checks a path now: a bad setting fails at start
        self._embedder: Embedder | None = None
        self._lock = threading.Lock()

    @property
    def model_name(self) -> str:
        return BUNDLED_MODEL if self._key == BUNDLED_MODEL else self._key

    @property
    def loaded(self) -> bool:
        return self._embedder is not None

    @property
    def busy(self) -> bool:
        """Whether the loaded model encodes (or is waited for) now."""
        embedder = self._embedder
        return embedder is not None and embedder.busy

    def embedder(self) -> Embedder:
        """The loaded model (loading it now if need be: seconds, once per process)."""
        with self._lock:
            if self._embedder is None:
                from memstream.workers.embeddings import load_embedder  # numpy, torch: lazily

                self._embedder = load_embedder(self._model)
            return self._embedder

    def encode(self, texts: Sequence[str]) -> Any:
        return self.embedder().encode(texts)

    def encode_query(self, text: str) -> Any:
        return self.embedder().encode_query(text)
