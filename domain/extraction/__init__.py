"""Memory extraction: the value types, and the offline (rule-based, deterministic) extractor.

Names are loaded on first use (PEP 562): importing the value types (``.model``) does not compile
the extractor's rules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memstream.domain.extraction.classify import classify as classify
    from memstream.domain.extraction.classify import type_scores as type_scores
    from memstream.domain.extraction.dates import render_date as render_date
    from memstream.domain.extraction.dates import resolve_event_time as resolve_event_time
    from memstream.domain.extraction.model import (
        MEMORY_TYPES as MEMORY_TYPES,
    )
    from memstream.domain.extraction.model import (
        SUPERSEDED_TYPES as SUPERSEDED_TYPES,
    )
    from memstream.domain.extraction.model import (
        Embed as Embed,
    )
    from memstream.domain.extraction.model import (
        ExtractedMemory as ExtractedMemory,
    )
    from memstream.domain.extraction.model import (
        ExtractorInfo as ExtractorInfo,
    )
    from memstream.domain.extraction.model import (
        MemoryType as MemoryType,
    )
    from memstream.domain.extraction.model import (
        SourceMessage as SourceMessage,
    )
    from memstream.domain.extraction.model import (
        TimeWindow as TimeWindow,
    )
    from memstream.domain.extraction.offline import OfflineExtractor as OfflineExtractor
    from memstream.domain.extraction.query_windows import query_window as query_window
    from memstream.domain.extraction.question_topics import query_topic_keys as query_topic_keys
    from memstream.domain.extraction.sentences import split_sentences as split_sentences
    from memstream.domain.extraction.topics import topic_key as topic_key
    from memstream.domain.extraction.vocabulary import keywords as keywords


_WHERE = {
    "classify": "classify",
    "type_scores": "classify",
    "render_date": "dates",
    "resolve_event_time": "dates",
    "MEMORY_TYPES": "model",
    "SUPERSEDED_TYPES": "model",
    "Embed": "model",
    "ExtractedMemory": "model",
    "ExtractorInfo": "model",
    "MemoryType": "model",
    "SourceMessage": "model",
    "TimeWindow": "model",
    "OfflineExtractor": "offline",
    "query_window": "query_windows",
    "query_topic_keys": "question_topics",
    "split_sentences": "sentences",
    "topic_key": "topics",
    "keywords": "vocabulary",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = sorted(_WHERE)
