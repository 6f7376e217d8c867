"""Memory extraction: the value types, and the offline (rule-based, deterministic) extractor."""

from __future__ import annotations

from memstream.domain.extraction.classify import classify, type_scores
from memstream.domain.extraction.dates import render_date, resolve_event_time
from memstream.domain.extraction.model import (
    MEMORY_TYPES,
    SUPERSEDED_TYPES,
    Embed,
    ExtractedMemory,
    ExtractorInfo,
    MemoryType,
    SourceMessage,
    TimeWindow,
)
from memstream.domain.extraction.offline import OfflineExtractor
from memstream.domain.extraction.query_windows import query_window
from memstream.domain.extraction.question_topics import query_topic_keys
from memstream.domain.extraction.sentences import split_sentences
from memstream.domain.extraction.topics import topic_key
from memstream.domain.extraction.vocabulary import keywords

__all__ = [
    "MEMORY_TYPES",
    "SUPERSEDED_TYPES",
    "Embed",
    "ExtractedMemory",
    "ExtractorInfo",
    "MemoryType",
    "OfflineExtractor",
    "SourceMessage",
    "TimeWindow",
    "classify",
    "keywords",
    "query_topic_keys",
    "query_window",
    "render_date",
    "resolve_event_time",
    "split_sentences",
    "topic_key",
    "type_scores",
]
