"""Recall: the channels of spec memory.md Part B.4 over one profile's read models, fused by
weighted reciprocal-rank fusion, and the extractive answer.

Channels (each a ranked list of memory ids): memory full text (BM25), memory vectors, raw
message full text and raw message vectors (each message mapped to the memories made from it),
topic keys of the query, and the memories whose event time falls in the window the query names.
``thinking_level`` sets each channel's depth and how many candidates come back, and turns on the
raw-message channels. A superseded memory is demoted; equal scores go to the newer memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from memstream.domain.extraction.model import TimeWindow
from memstream.domain.memory_input import iso
from memstream.projections.ports import MemoryQueries, VectorSearch

RRF_K: Final = 60
# Per level: the depth of each channel, and how many candidates a recall returns.
DEPTH: Final = {"low": 30, "medium": 60, "high": 150}
CANDIDATES: Final = {"low": 10, "medium": 30, "high": 100}
WEIGHTS: Final = {
    "memory_text": 1.0,
    "memory_vector": 1.0,
    "message_text": 0.7,
    "message_vector": 0.7,
    "topic": 0.8,
    "time": 0.8,
}
# The raw-message channels run at these levels (the memory channels always).
MESSAGE_CHANNELS_AT: Final = frozenset({"low", "medium", "high"})
# Cosine similarities below these are no match (all-MiniLM-L6-v2: unrelated texts score ~0-0.2).
MEMORY_VECTOR_MIN: Final = 0.30
MESSAGE_VECTOR_MIN: Final = 0.35
SUPERSEDED_FACTOR: Final = 0.5
ANSWER_CHARS: Final = {"short": 300, "medium": 800, "long": 2000}
ANSWER_CANDIDATES: Final = {"short": 2, "medium": 5, "long": 10}


@dataclass(frozen=True, slots=True)
class RecallInputs:
    """What a recall works with besides the read model: the query's terms, its vector and the
    profile's vector indexes (absent when no model is at hand), its topic keys, its window."""

    terms: Sequence[str]
    query_vector: Any = None
    memory_index: VectorSearch | None = None
    message_index: VectorSearch | None = None
    topic_keys: Sequence[str] = ()
    window: TimeWindow | None = None
    channels: dict[str, list[str]] = field(default_factory=dict)  # filled: for diagnostics


def recall(
    queries: MemoryQueries,
    namespace: str,
    profile: str,
    inputs: RecallInputs,
    *,
    thinking_level: str = "low",
    response_length: str = "medium",
) -> dict[str, Any]:
    """``{"answer", "count", "candidates"}`` for one query (see the module doc)."""
    depth = DEPTH[thinking_level]
    channels = inputs.channels
    channels["memory_text"] = queries.search_memories(namespace, profile, inputs.terms, depth)
    if inputs.query_vector is not None and inputs.memory_index is not None:
        channels["memory_vector"] = [
            memory_id
            for memory_id, _ in inputs.memory_index.search(
                inputs.query_vector, depth, min_score=MEMORY_VECTOR_MIN
            )
        ]
    if thinking_level in MESSAGE_CHANNELS_AT:
        message_lists: dict[str, list[str]] = {
            "message_text": queries.search_messages(namespace, profile, inputs.terms, depth)
        }
        if inputs.query_vector is not None and inputs.message_index is not None:
            message_lists["message_vector"] = [
                message_id
                for message_id, _ in inputs.message_index.search(
                    inputs.query_vector, depth, min_score=MESSAGE_VECTOR_MIN
                )
            ]
        wanted = sorted({m for ids in message_lists.values() for m in ids})
        made_from = queries.memories_of_messages(namespace, profile, wanted)
        for name, message_ids in message_lists.items():
            channels[name] = _dedupe(m for mid in message_ids for m in made_from.get(mid, ()))
    if inputs.topic_keys:
        channels["topic"] = queries.memories_by_topic(
            namespace, profile, list(inputs.topic_keys), depth
        )
    if inputs.window is not None:
        channels["time"] = queries.memories_between(
            namespace, profile, iso(inputs.window.start), iso(inputs.window.end), depth
        )
    fused = _fuse(channels)
    if not fused:
        return {"answer": "", "count": 0, "candidates": []}
    found = queries.memories(namespace, profile, list(fused))
    scored = []
    for memory_id, score in fused.items():
        memory = found.get(memory_id)
        if memory is None:
            continue  # deleted between the channel's read and this one
        if memory["superseded_by"] is not None:
            score *= SUPERSEDED_FACTOR
        scored.append((score, memory))
    # Best first; equal scores: the newer memory first (two stable sorts).
    scored.sort(key=lambda pair: (str(pair[1]["created_at"] or ""), pair[1]["id"]), reverse=True)
    scored.sort(key=lambda pair: -pair[0])
    best = scored[: CANDIDATES[thinking_level]]
    candidates = [_candidate(memory, score) for score, memory in best]
    return {
        "answer": extractive_answer([m for _, m in best], response_length),
        "count": len(candidates),
        "candidates": candidates,
    }


def _dedupe(ids: Any) -> list[str]:
    return list(dict.fromkeys(ids))


def _fuse(channels: dict[str, list[str]]) -> dict[str, float]:
    """Weighted reciprocal-rank fusion, normalised so that first place in every channel that
    ran scores 1 (scores are in [0, 1])."""
    ran = [name for name in channels if name in WEIGHTS]
    best = sum(WEIGHTS[name] / (RRF_K + 1) for name in ran)
    if best <= 0:
        return {}
    fused: dict[str, float] = {}
    for name in ran:
        weight = WEIGHTS[name]
        for rank, memory_id in enumerate(channels[name], start=1):
            fused[memory_id] = fused.get(memory_id, 0.0) + weight / (RRF_K + rank)
    return {memory_id: min(1.0, score / best) for memory_id, score in fused.items()}


def _candidate(memory: dict[str, Any], score: float) -> dict[str, Any]:
    return {
        "id": memory["id"],
        "type": memory["type"],
        "summary": memory["summary"],
        "session_id": memory["session_id"],
        "score": round(score, 6),
        "topic_key": memory["topic_key"],
        "event_time": memory["event_time"],
        "created_at": memory["created_at"],
        "superseded": memory["superseded_by"] is not None,
    }


def extractive_answer(memories: Sequence[dict[str, Any]], response_length: str) -> str:
    """The best memories' summaries (current ones first), cut at a word to the
    ``response_length`` budget; ``""`` for none."""
    budget = ANSWER_CHARS[response_length]
    chosen = [m for m in memories if m["superseded_by"] is None] or list(memories)
    parts: list[str] = []
    size = 0
    for memory in chosen[: ANSWER_CANDIDATES[response_length]]:
        summary = str(memory["summary"]).strip()
        if not summary:
            continue
        if not summary.endswith((".", "!", "?")):
            summary += "."
        extra = len(summary) + (1 if parts else 0)
        if size + extra > budget:
            room = budget - size - (1 if parts else 0)
            if not parts and room > 0:
                parts.append(_cut(summary, room))
            break
        parts.append(summary)
        size += extra
    return " ".join(parts)


def _cut(text: str, room: int) -> str:
    if len(text) <= room:
        return text
    cut = text[: max(0, room - 1)].rsplit(" ", 1)[0].rstrip(",;:")
    return cut + "…"
