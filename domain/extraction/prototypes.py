"""Embedding-prototype scores: how close a text is to a few fixed example sentences per type."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

from memstream.domain.extraction.model import MEMORY_TYPES, Embed, MemoryType

# Softmax temperature over the best cosine similarity per type.
TEMPERATURE: Final = 0.05
_CACHE_SIZE: Final = 8

PROTOTYPES: Final[dict[MemoryType, tuple[str, ...]]] = {
    "fact": (
        "I live in Berlin with my partner.",
        "My favorite color is blue.",
        "I work as a nurse at the city hospital.",
        "I am allergic to peanuts.",
        "I love hiking and playing the guitar.",
        "My sister is a teacher.",
    ),
    "event": (
        "I went to a concert with friends yesterday.",
        "We visited my grandparents last weekend.",
        "I ran a charity race last Saturday.",
        "I attended a workshop on painting last week.",
        "We are going camping next month.",
        "I had a job interview on Monday.",
    ),
    "instruction": (
        "Always answer in French.",
        "Please keep your responses short.",
        "Never use emoji in replies.",
        "Call me Sam from now on.",
        "I prefer that you use metric units.",
        "Don't mention the weather unless I ask.",
    ),
    "task": (
        "I need to renew my passport by Friday.",
        "Remind me to call the dentist tomorrow.",
        "I have to finish the report before the deadline.",
        "Don't forget to buy milk.",
        "Add booking the flights to my to-do list.",
        "I still have to pay the electricity bill.",
    ),
}

# id(embed) → (embed, prototype vectors per type); the stored callable guards against id reuse.
_cache: dict[int, tuple[Embed, dict[MemoryType, list[Sequence[float]]]]] = {}


def prototype_scores(text: str, embed: Embed) -> dict[MemoryType, float]:
    """Per-type scores (summing to 1): a softmax over the best cosine similarity of ``text`` to
    each type's prototype sentences. ``embed`` returns L2-normalised vectors; the prototypes are
    embedded once per ``embed`` callable."""
    vectors = _prototype_vectors(embed)
    query = embed([text])[0]
    best = {t: max(_dot(query, v) for v in vectors[t]) for t in MEMORY_TYPES}
    top = max(best.values())
    weights = {t: math.exp((best[t] - top) / TEMPERATURE) for t in MEMORY_TYPES}
    total = sum(weights.values())
    return {t: weights[t] / total for t in MEMORY_TYPES}


def _prototype_vectors(embed: Embed) -> dict[MemoryType, list[Sequence[float]]]:
    cached = _cache.get(id(embed))
    if cached is not None and cached[0] is embed:
        return cached[1]
    texts = [s for t in MEMORY_TYPES for s in PROTOTYPES[t]]
    rows = list(embed(texts))
    vectors: dict[MemoryType, list[Sequence[float]]] = {}
    index = 0
    for memory_type in MEMORY_TYPES:
        count = len(PROTOTYPES[memory_type])
        vectors[memory_type] = rows[index : index + count]
        index += count
    if len(_cache) >= _CACHE_SIZE:
        _cache.pop(next(iter(_cache)))
    _cache[id(embed)] = (embed, vectors)
    return vectors


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=False))
