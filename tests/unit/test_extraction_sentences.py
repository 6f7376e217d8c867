"""Sentence segmentation: abbreviations, decimals, ellipses, emoji, URLs, newlines."""

from __future__ import annotations

import pytest

from memstream.domain.extraction.sentences import split_sentences


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("I went home. It rained!", ["I went home.", "It rained!"]),
        ("Dr. Smith saw me. He was kind.", ["Dr. Smith saw me.", "He was kind."]),
        ("It cost $3.50 today. Cheap.", ["It cost $3.50 today.", "Cheap."]),
        ("Version 2.1.3 is out", ["Version 2.1.3 is out"]),
        ("I waited... and waited. Then left.", ["I waited... and waited.", "Then left."]),
        ("I waited... Then I left.", ["I waited...", "Then I left."]),
        ("Really?! Yes.", ["Really?!", "Yes."]),
        (
            "See https://example.com/a.b?x=1. Then go.",
            ["See https://example.com/a.b?x=1.", "Then go."],
        ),
        ("Read it at www.site.org. Thanks", ["Read it at www.site.org.", "Thanks"]),
        ("Line one\nLine two", ["Line one", "Line two"]),
        ("First\n\n\nSecond.", ["First", "Second."]),
        ("- buy milk\n- call Sam", ["buy milk", "call Sam"]),
        ("We won 🎉 Next week we play again.", ["We won 🎉", "Next week we play again."]),
        ("e.g. apples are fine. Pears too.", ["e.g. apples are fine.", "Pears too."]),
        ('He said "stop." Then he left.', ['He said "stop."', "Then he left."]),
        ("J. K. Rowling wrote it.", ["J. K. Rowling wrote it."]),
        ("", []),
        ("   \n  ", []),
    ],
)
def test_split_sentences(text: str, sentences: list[str]) -> None:
    assert split_sentences(text) == sentences


def test_lower_case_after_a_period_does_not_end_a_sentence() -> None:
    # Given a period followed by a lower-case word (an abbreviation the list does not know)
    text = "We met at approx. noon and ate."
    # Then it stays one sentence
    assert split_sentences(text) == [text]
