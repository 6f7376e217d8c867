"""What a recall computes besides its read-model queries: the query's vector (the embedding
model, loaded once per process, in a thread), its topic keys and time window (the domain's
rules), and the profile's vector indexes, cached while their vectors do not change."""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memstream.domain.extraction.model import TimeWindow
from memstream.projections.ports import MemoryQueries
from memstream.workers.indexer import LazyEncoder

if TYPE_CHECKING:
    from memstream.projections.vector_search import VectorIndex

# Profiles whose vector matrices a process keeps (10,000 vectors of 384 floats: 15 MB).
CACHED_INDEXES = 16


class QueryAnalysis:
    """A query's vector, topic keys and window."""

    def __init__(self, encoder: LazyEncoder | None) -> None:
        self.encoder = encoder

    async def embed_query(self, text: str) -> Any:
        """The query's vector (``None``: no model configured)."""
        encoder = self.encoder
        if encoder is None:
            return None
        if encoder.loaded:
            return encoder.encode_query(text)  # ~5 ms: cheaper than a thread hop
        return await asyncio.to_thread(encoder.encode_query, text)

    def topic_keys(self, text: str) -> list[str]:
        from memstream.domain.extraction import query_topic_keys  # its rules: when first used

        return list(query_topic_keys(text))

    def window(self, text: str, reference: datetime) -> TimeWindow | None:
        from memstream.domain.extraction import query_window

        return query_window(text, reference)


class VectorCache:
    """Each profile's vectors as a :class:`VectorIndex`, rebuilt when their count or newest
    sequence changes (one indexed query per recall checks it)."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self._indexes: OrderedDict[tuple[str, str, str], tuple[tuple[int, int], VectorIndex]]
        self._indexes = OrderedDict()
        self._lock = threading.Lock()

    def index(
        self, queries: MemoryQueries, namespace: str, profile: str, kind: str
    ) -> VectorIndex | None:
        key = (namespace, profile, kind)
        state = queries.vector_state(namespace, profile, kind)
        with self._lock:
            cached = self._indexes.get(key)
            if cached is not None and cached[0] == state:
                self._indexes.move_to_end(key)
                return cached[1]
        if state[0] == 0:
            return None
        # Vectors of another model are not comparable with this one's queries: left out until
        # the indexer has made them again.
        ids, blobs = queries.vectors(namespace, profile, kind, self.model_name)
        if not blobs:
            return None
        from memstream.projections.vector_search import VectorIndex, stack  # numpy: lazily

        dimension = len(blobs[0]) // 4
        index = VectorIndex(ids, stack(blobs, dimension))
        with self._lock:
            self._indexes[key] = (state, index)
            while len(self._indexes) > CACHED_INDEXES:
                self._indexes.popitem(last=False)
        return index
