"""Standalone summaries: who is speaking, first person rewritten to the third, relative dates
made absolute."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Final

from memstream.domain.extraction.dates import find_time_mentions, render_mention
from memstream.domain.extraction.vocabulary import STOPWORDS, is_past_tense

MAX_SUMMARY_CHARS: Final = 300

_SPEAKER: Final = re.compile(r"^\s*([A-Z][\w'’.-]*(?: [A-Z][\w'’.-]*){0,2}):[ \t]+(?=\S)")
_NOT_SPEAKERS_WORDS: Final = (
    "note ps p.s update re todo fyi q a question answer edit warning tip important reminder "
    "example summary step task subject http https"
)
_NOT_SPEAKERS: Final = frozenset(_NOT_SPEAKERS_WORDS.split())
_ADVERBS: Final = (
    r"really|also|just|still|always|never|usually|often|sometimes|finally|actually|definitely|"
    r"totally|absolutely|even|recently|only|truly|mostly|already|currently|now|personally|"
    r"generally|rarely|seriously|honestly|kinda|sort of|kind of"
)
_VOCATIVE: Final = re.compile(r"^([A-Z][a-z]+),\s+(?=\S)")
_FIRST_PERSON: Final = re.compile(
    rf"\b(?P<contracted>I['’](?:m|ve|d|ll))\b|\bI am\b|\bI\b(?P<adverbs>(?:\s+(?:{_ADVERBS}))*)"
    r"(?:\s+(?P<verb>[a-z]+(?:n['’]t)?)\b)?|\b(?P<my>[Mm]y|[Mm]ine)\b|\b(?P<me>[Mm]e)\b|"
    r"\b(?P<myself>[Mm]yself)\b"
)
_CONJUGATE: Final = {
    "am": "is",
    "have": "has",
    "do": "does",
    "go": "goes",
    "don't": "doesn't",
    "don’t": "doesn’t",
    "haven't": "hasn't",
    "haven’t": "hasn’t",
    "ain't": "isn't",
}
_KEEP_WORDS: Final = (
    "was can could will would should might must may shall can't cannot couldn't won't "
    "wouldn't shouldn't didn't wasn't mustn't and or but to too so then as if when because "
    "who that a an the"
)
_KEEP: Final = frozenset(_KEEP_WORDS.split())
_INTERJECTION: Final = re.compile(
    r"^(?:(?:oh|ah|aw|aww|wow|yeah|yes|yep|well|so|haha|hah|lol|hey|hi|ok|okay|omg|totally|"
    r"absolutely|definitely|honestly|anyway|anyways|um|uh|hmm|ooh|gosh|btw|by the way|phew|"
    r"woah|whoa|woohoo|yay|hey there|yo)\b[\s,!.…-]*)+",
    re.IGNORECASE,
)


def split_speaker(content: str) -> tuple[str | None, str]:
    """A leading "Name: " names the speaker: ``"Caroline: I went"`` → ``("Caroline", "I went")``.
    Returns ``(None, content)`` when there is no such prefix."""
    match = _SPEAKER.match(content)
    if match is None or match[1].lower().rstrip(".") in _NOT_SPEAKERS:
        return None, content
    return match[1], content[match.end() :]


def resolve_dates(text: str, anchor: datetime) -> str:
    """``text`` with relative time expressions replaced by absolute dates ("yesterday" → "on 7
    May 2023" for an anchor on 8 May 2023)."""
    out = text
    for mention in reversed(find_time_mentions(text, anchor)):
        start, end = mention.span
        out = out[:start] + render_mention(mention) + out[end:]
    return out


def third_person(text: str, name: str) -> str:
    """``text`` with the first person rewritten for ``name``: "I love my dog" → "Sam loves Sam's
    dog"; "I'm" → "Sam is"; present-tense verbs after "I" take the third person."""

    def replace(match: re.Match[str]) -> str:
        if match["contracted"]:
            return (
                name
                + {"m": " is", "v": " has", "d": " would", "l": " will"}[
                    match["contracted"][2].lower()
                ]
            )
        if match.group(0) == "I am":
            return f"{name} is"
        if match["my"]:
            return f"{name}'s"
        if match["me"]:
            return name
        if match["myself"]:
            return "themself"
        verb = match["verb"]
        adverbs = match["adverbs"] or ""
        if verb is None:
            return name + adverbs
        return f"{name}{adverbs} {_third_person_verb(verb)}"

    return _FIRST_PERSON.sub(replace, text)


def summarise(sentences: list[str], name: str, anchor: datetime, prefix: str = "") -> str:
    """One standalone summary (≤ 300 characters) of ``sentences`` spoken by ``name``.

    Dates are resolved, the first person becomes ``name``, leading interjections go; if the
    result does not name the speaker it is attributed ("Caroline said that ...").
    """
    parts = []
    for sentence in sentences:
        cleaned = _INTERJECTION.sub("", sentence).strip() or sentence.strip()
        cleaned = _strip_vocative(cleaned, name)
        if not cleaned:
            continue
        rewritten = third_person(resolve_dates(cleaned, anchor), name)
        parts.append(rewritten[0].upper() + rewritten[1:])
    text = " ".join(parts)
    if not text:
        return prefix.strip()
    if prefix:
        text = f"{prefix}{_lower_first(text)}"
    elif not re.search(rf"\b{re.escape(name)}\b", text):
        text = f"{name} said that {_lower_first(text)}"
    return clip(text, MAX_SUMMARY_CHARS)


def _strip_vocative(sentence: str, speaker: str) -> str:
    """Drops a leading form of address ("Gina, I had to ..." → "I had to ...")."""
    match = _VOCATIVE.match(sentence)
    if match is None or match[1] == speaker or match[1].lower() in STOPWORDS:
        return sentence
    if match[1].endswith("ly"):
        return sentence  # "Unfortunately, ..."
    rest = sentence[match.end() :]
    return rest[0].upper() + rest[1:] if rest else sentence


def clip(text: str, limit: int) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters (ending with "…")."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:- ")
    return cut + "…"


def _lower_first(text: str) -> str:
    first = text.split(" ", 1)[0]
    if first.lower() in STOPWORDS and first != "I" and not first.isupper():
        return text[0].lower() + text[1:]
    return text


def _third_person_verb(verb: str) -> str:
    lower = verb.lower()
    if lower in _CONJUGATE:
        return _CONJUGATE[lower]
    if lower in _KEEP or is_past_tense(lower) or not lower.isalpha() or lower.endswith("ing"):
        return verb
    if lower.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if lower.endswith("y") and len(lower) > 2 and lower[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"
