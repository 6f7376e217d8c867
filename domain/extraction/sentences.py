"""Sentence segmentation: abbreviations, decimals, ellipses, emoji, URLs and newlines."""

from __future__ import annotations

import re
from typing import Final

_ABBREVIATIONS_WORDS: Final = (
    "mr mrs ms dr prof sr jr st mt vs etc e.g i.e a.m p.m u.s u.k approx dept inc ltd corp "
    "jan feb mar apr jun jul aug sep sept oct nov dec tue tues thu thurs fri ave blvd rd ph.d "
    "b.a m.a b.sc m.sc"
)
_ABBREVIATIONS: Final = frozenset(_ABBREVIATIONS_WORDS.split())
# A sentence ends at . ! ? (possibly repeated, possibly closed by quotes/brackets) or at an
# emoji followed by space and a capital; the candidates are checked in `_is_boundary`.
_CANDIDATE: Final = re.compile(r"[.!?…]+[\"'”’)\]]*(?=\s+|$)")
# A URL, without the punctuation that may end the sentence after it.
_URL: Final = re.compile(r"(?:https?://|www\.)\S+?(?=[.,!?;:)\]\"']*(?:\s|$))", re.IGNORECASE)
_EMOJI_BREAK: Final = re.compile(
    r"[\U0001F300-\U0001FAFF\u2600-\u27BF]+(?=\s+[A-Z\"“])", re.UNICODE
)
_LIST_MARKER: Final = re.compile(r"^\s*(?:[-*•]|\d{1,3}[.)])\s+")


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, stripped, in order; blank lines and newlines also end sentences.

    Example: ``split_sentences("Dr. Smith paid $3.50... Then left! See https://x.io/a.b ok")``
    → ``["Dr. Smith paid $3.50... Then left!", "See https://x.io/a.b ok"]``. An ellipsis ends a
    sentence only before a capitalised word; so does an emoji.
    """
    sentences: list[str] = []
    for line in text.splitlines():
        line = _LIST_MARKER.sub("", line).strip()
        if line:
            sentences.extend(_split_line(line))
    return sentences


def _split_line(line: str) -> list[str]:
    protected = [(m.start(), m.end()) for m in _URL.finditer(line)]
    cuts: list[int] = []
    for match in _CANDIDATE.finditer(line):
        if any(start <= match.start() < end for start, end in protected):
            continue
        if _is_boundary(line, match.start(), match.end()):
            cuts.append(match.end())
    for match in _EMOJI_BREAK.finditer(line):
        if not any(start <= match.start() < end for start, end in protected):
            cuts.append(match.end())
    pieces: list[str] = []
    start = 0
    for cut in sorted(set(cuts)):
        piece = line[start:cut].strip()
        if piece:
            pieces.append(piece)
        start = cut
    rest = line[start:].strip()
    if rest:
        pieces.append(rest)
    return pieces


def _is_boundary(line: str, start: int, end: int) -> bool:
    marks = line[start:end].rstrip("\"'”’)]")
    following = line[end:].lstrip()
    if not following:
        return True
    if "!" in marks or "?" in marks:
        return True
    if "…" in marks or marks.startswith(".."):
        # An ellipsis trails off mid-sentence unless a new sentence visibly starts.
        return following[0].isupper() or following[0] in '"“'
    word_before = re.search(r"(\S+)$", line[:start])
    if word_before is None:
        return True
    previous = word_before.group(1).lower().lstrip("(\"'“")
    if previous in _ABBREVIATIONS or (len(previous) == 1 and previous.isalpha()):
        return False  # "Dr. Smith", "J. K. Rowling"
    if re.fullmatch(r"(?:[a-z]\.)+[a-z]", previous):
        return False  # "e.g", "u.s"
    return not following[0].islower()
