"""Realistic chat messages for the benchmarks: 200–500 bytes of varied, searchable text."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

TOPICS: dict[str, tuple[str, ...]] = {
    "cooking": (
        "recipe",
        "oven",
        "garlic",
        "simmer",
        "sourdough",
        "basil",
        "tomato",
        "roast",
        "knead",
        "yeast",
        "risotto",
        "saffron",
        "skillet",
        "marinade",
        "broth",
        "dough",
        "pastry",
        "lentils",
    ),
    "travel": (
        "flight",
        "itinerary",
        "passport",
        "hostel",
        "train",
        "Lisbon",
        "Kyoto",
        "visa",
        "luggage",
        "museum",
        "ferry",
        "layover",
        "booking",
        "hiking",
        "glacier",
        "beach",
        "Berlin",
        "Oaxaca",
    ),
    "software": (
        "deploy",
        "kubernetes",
        "python",
        "asyncio",
        "database",
        "index",
        "latency",
        "container",
        "migration",
        "schema",
        "cache",
        "thread",
        "compiler",
        "regression",
        "benchmark",
        "sqlite",
        "postgres",
        "websocket",
    ),
    "finance": (
        "budget",
        "mortgage",
        "invoice",
        "dividend",
        "portfolio",
        "pension",
        "interest",
        "tax",
        "savings",
        "expense",
        "receipt",
        "inflation",
        "bond",
        "equity",
        "refund",
        "payroll",
        "ledger",
        "forecast",
    ),
    "health": (
        "sleep",
        "running",
        "protein",
        "stretching",
        "cardio",
        "hydration",
        "posture",
        "vitamin",
        "marathon",
        "yoga",
        "injury",
        "recovery",
        "calories",
        "breathing",
        "physio",
        "knee",
        "cycling",
        "meditation",
    ),
    "garden": (
        "compost",
        "seedling",
        "tomatoes",
        "pruning",
        "mulch",
        "irrigation",
        "orchid",
        "soil",
        "fertilizer",
        "greenhouse",
        "aphids",
        "lavender",
        "hedge",
        "bulbs",
        "lawn",
        "harvest",
        "trellis",
        "succulent",
    ),
}

COMMON = (
    "the",
    "a",
    "we",
    "it",
    "this",
    "that",
    "should",
    "could",
    "would",
    "maybe",
    "also",
    "because",
    "when",
    "then",
    "about",
    "with",
    "for",
    "into",
    "after",
    "before",
    "really",
    "think",
    "next",
    "week",
    "plan",
    "need",
    "try",
    "again",
    "today",
    "tomorrow",
    "better",
    "quick",
    "question",
    "thanks",
    "idea",
    "problem",
    "works",
    "check",
    "remember",
    "usually",
    "still",
    "first",
)

OPENERS = (
    "Could you help me with",
    "I was wondering about",
    "Here is what I found about",
    "Quick update on",
    "Let me summarise",
    "Thanks, and what about",
    "One more thing regarding",
    "Good point on",
    "I tried your suggestion for",
    "Can we revisit",
)


def _sentence(rng: random.Random, topic: tuple[str, ...]) -> str:
    words = [rng.choice(OPENERS)]
    for _ in range(rng.randint(6, 14)):
        words.append(rng.choice(topic) if rng.random() < 0.4 else rng.choice(COMMON))
    if rng.random() < 0.05:
        words.append(f"ref{rng.randint(0, 99_999):05d}")  # rare tokens for selective searches
    return " ".join(words) + "."


class MessageFactory:
    """Deterministic message dicts in the reference shape (``id``, ``role``, ``parts``).

    Texts are drawn from a pool of pre-built sentences per topic, so 100,000 messages cost well
    under a second to generate while still giving FTS a realistic mix of common and rare terms.
    """

    def __init__(self, seed: int = 7, pool_size: int = 3000) -> None:
        self._rng = random.Random(seed)
        self._pools = {
            name: [_sentence(self._rng, words) for _ in range(pool_size // len(TOPICS))]
            for name, words in TOPICS.items()
        }
        self._topics = list(self._pools)

    def text(self) -> str:
        """200–500 bytes of text on one topic."""
        pool = self._pools[self._rng.choice(self._topics)]
        target = self._rng.randint(200, 500)
        parts: list[str] = []
        size = 0
        while size < target:
            sentence = self._rng.choice(pool)
            parts.append(sentence)
            size += len(sentence) + 1
        text = " ".join(parts)
        return text if len(text) <= 500 else text[:500].rsplit(" ", 1)[0] + "."

    def message(self, message_id: str, index: int) -> dict[str, Any]:
        """One message; roles alternate user/assistant by ``index``."""
        return {
            "id": message_id,
            "role": "user" if index % 2 == 0 else "assistant",
            "parts": [{"type": "text", "text": self.text()}],
        }

    def messages(self, prefix: str, count: int, start: int = 0) -> list[dict[str, Any]]:
        """``count`` messages with ids ``<prefix>-<n>``."""
        return [self.message(f"{prefix}-{i}", i) for i in range(start, start + count)]


def chunks(items: list[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    """Consecutive slices of at most ``size`` items."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def payload(message: dict[str, Any]) -> bytes:
    """The message as the compact JSON bytes a raw baseline publishes."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
