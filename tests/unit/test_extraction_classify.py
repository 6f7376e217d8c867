"""Memory type classification: cue rules, and the embedding-prototype path with a fake embed."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import pytest

from memstream.domain.extraction.classify import classify, rule_scores, type_scores
from memstream.domain.extraction.model import MEMORY_TYPES
from memstream.domain.extraction.vocabulary import tokens

DIMENSIONS = 256


def hashing_embed(texts: Sequence[str]) -> list[list[float]]:
    """A deterministic fake embedding: L2-normalised bag of hashed words."""
    rows = []
    for text in texts:
        row = [0.0] * DIMENSIONS
        for word in tokens(text):
            row[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIMENSIONS] += 1.0
        norm = math.sqrt(sum(x * x for x in row)) or 1.0
        rows.append([x / norm for x in row])
    return rows


@pytest.mark.parametrize(
    "text",
    [
        "Always answer in French.",
        "Please keep your responses short.",
        "Never use emoji.",
        "From now on, write dates as ISO.",
        "Call me Sam.",
        "I prefer that you use metric units.",
        "Don't mention the weather.",
    ],
)
def test_instructions(text: str) -> None:
    assert classify(text) == "instruction"


@pytest.mark.parametrize(
    "text",
    [
        "I need to renew my passport.",
        "Remind me to call the dentist.",
        "Don't forget to buy milk.",
        "I have to finish the report by Friday.",
        "Todo: clean the garage.",
    ],
)
def test_tasks(text: str) -> None:
    assert classify(text) == "task"


@pytest.mark.parametrize(
    "text",
    [
        "I went to a support group yesterday.",
        "We visited my grandparents last weekend.",
        "I attended a conference in May 2023.",
        "I ran a charity race last Saturday.",
        "We are going camping next month.",
    ],
)
def test_events(text: str) -> None:
    assert classify(text) == "event"


@pytest.mark.parametrize(
    "text",
    [
        "I live in Berlin.",
        "My favourite colour is blue.",
        "I work as a nurse.",
        "I love painting.",
        "I'm a vegetarian.",
        "I moved to Berlin last year.",
        "Caroline is a counselor.",
    ],
)
def test_facts(text: str) -> None:
    assert classify(text) == "fact"


def test_scores_are_a_distribution_over_the_four_types() -> None:
    scores = rule_scores("I went to a concert yesterday")
    assert set(scores) == set(MEMORY_TYPES)
    assert math.isclose(sum(scores.values()), 1.0)
    assert max(scores, key=lambda t: scores[t]) == "event"


def test_imperatives_between_named_speakers_are_damped() -> None:
    # Given an imperative chat line
    text = "Keep it simple and enjoy the ride."
    # Then from the user it reads as an instruction, between named people it does not
    assert classify(text) == "instruction"
    assert classify(text, named_speaker=True) != "instruction"


def test_prototypes_decide_a_borderline_text() -> None:
    # Given a text without cue words (rules fall back to the fact prior, unsure)
    text = "The concert with friends"
    assert classify(text) == "fact"
    # When an embedding function is given, the text is close to an event prototype
    scores = type_scores(text, hashing_embed)
    # Then the blended scores make it an event
    assert classify(text, hashing_embed) == "event"
    assert math.isclose(sum(scores.values()), 1.0)


def test_confident_rules_are_not_overridden_by_prototypes() -> None:
    # Given a clear instruction, and an embed that maps everything to one vector
    def constant_embed(texts: Sequence[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]

    # Then the rules' answer stands
    assert classify("Always answer in French.", constant_embed) == "instruction"


def test_prototypes_are_embedded_once_per_embed_function() -> None:
    # Given an embed that counts its calls
    calls: list[int] = []

    def counting_embed(texts: Sequence[str]) -> list[list[float]]:
        calls.append(len(texts))
        return hashing_embed(texts)

    # When two borderline texts are classified
    classify("The concert with friends", counting_embed)
    classify("The garden party", counting_embed)
    # Then the prototypes were embedded in one batch, the texts one each
    assert calls[0] > 1
    assert calls[1:] == [1, 1]
