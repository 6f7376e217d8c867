"""What a recall computes besides its read-model queries: the query's vector (the embedding
model, loaded once per process, in a thread), its topic keys and time window (the domain's
rules), and the profile's vector indexes, cached while their vectors do not change."""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from memstream.domain.extraction.model import TimeWindow
from memstream.projections.ports import MemoryQueries, VectorSearch

if TYPE_CHECKING:
    from memstream.projections.vector_search import VectorIndex

# Profiles whose vector matrices a process keeps (10,000 vectors of 384 floats: 15 MB).
CACHED_INDEXES = 16


class QueryEncoder(Protocol):
    """The embedding model as a query needs it
    (:class:`~memstream.workers.indexer.LazyEncoder`: loaded at its first use)."""

    @property
    def loaded(self) -> bool: ...

    @property
    def busy(self) -> bool: ...

    def encode_query(self, text: str) -> Any: ...


class QueryAnalysis:
    """A query's vector, topic keys and window."""

    def __init__(self, encoder: QueryEncoder | None) -> None:
        self.encoder = encoder

    async def embed_query(self, text: str) -> Any:
        """The query's vector (``None``: no model configured)."""
        encoder = self.encoder
        if encoder is None:
            return None
        if encoder.loaded and not encoder.busy:
            # On the event loop's thread: run in a thread beside the recall's read-model
            # queries instead, it made a recall slower on 2 cores (the GIL and the cores are
            # shared; bench/RESULTS.md, 'recall (low)' of the earlier instrumented runs).
            return encoder.encode_query(text)
        # Loading, or encoding for an indexer or extractor: not on the event loop.
        return await asyncio.to_thread(encoder.encode_query, text)

    def topic_keys(self, text: str) -> list[str]:
        from memstream.domain.extraction import query_topic_keys  # its rules: when first used

        return list(query_topic_keys(text))

    def window(self, text: str, reference: datetime) -> TimeWindow | None:
        from memstream.domain.extraction import query_window

        return query_window(text, reference)


class VectorCache:
    """Each profile's vectors as a :class:`VectorIndex` (or the database's own search of them,
    where it has one), rebuilt when their count or newest sequence changes. A recall checks
    the ``vectors`` projection's position first (one row): while it has not moved, no vector
    has changed; when it has, the profile's count and newest sequence (an indexed query) tell
    whether its own vectors did."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        # (namespace, profile, kind) -> (position checked at, (count, newest seq), index)
        self._indexes: OrderedDict[
            tuple[str, str, str], tuple[int, tuple[int, int], VectorSearch | None]
        ] = OrderedDict()
        self._lock = threading.Lock()

    def index(
        self, queries: MemoryQueries, namespace: str, profile: str, kind: str
    ) -> VectorSearch | None:
        """The profile's vectors of ``kind`` to search: the database's own search where it
        has one (pgvector), else the vectors loaded into memory; ``None`` while none are
        stored (either way: a recall's vector channel then does not run)."""
        key = (namespace, profile, kind)
        position = queries.vectors_position()
        with self._lock:
            cached = self._indexes.get(key)
            if cached is not None and cached[0] == position:
                self._indexes.move_to_end(key)
                return cached[2]
        state = queries.vector_state(namespace, profile, kind)
        index: VectorSearch | None
        if cached is not None and cached[1] == state:
            index = cached[2]
        elif not state[0]:
            index = None
        else:
            server = queries.vector_search(namespace, profile, kind, self.model_name)
            index = server or self._load(queries, namespace, profile, kind)
        with self._lock:
            self._indexes[key] = (position, state, index)
            self._indexes.move_to_end(key)
            while len(self._indexes) > CACHED_INDEXES:
                self._indexes.popitem(last=False)
        return index

    def _load(
        self, queries: MemoryQueries, namespace: str, profile: str, kind: str
    ) -> VectorIndex | None:
        # Vectors of another model are not comparable with this one's queries: left out until
        # the indexer has made them again.
        ids, blobs = queries.vectors(namespace, profile, kind, self.model_name)
        if not blobs:
            return None
        from memstream.projections.vector_search import VectorIndex, stack  # numpy: lazily

        dimension = len(blobs[0]) // 4
        return VectorIndex(ids, stack(blobs, dimension))
