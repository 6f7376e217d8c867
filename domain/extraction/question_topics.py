"""The topic keys a question asks about ("Where does Caroline live?" → "caroline:lives_in")."""

from __future__ import annotations

import re
from typing import Final

from memstream.domain.extraction.topics import (
    AGENT,
    ATTRIBUTES,
    FAVORITE,
    INSTRUCTION_THEMES,
    USER,
    canonical,
    favorite_key,
    subject_slug,
)
from memstream.domain.extraction.vocabulary import STOPWORDS, normalise_word

_I = re.IGNORECASE


def query_topic_keys(query: str) -> list[str]:
    """The topic keys a question is about, most likely first; ``[]`` if it names none.

    "Where does Caroline live?" → ``["caroline:lives_in"]``; "What is my favourite colour?" →
    ``["user:favorite_color"]``; "What language should you answer in?" →
    ``["agent:answer_language"]``.
    """
    name = _named_subject(query)
    owner = subject_slug(name) if name else USER
    form = canonical(query, (name,) if name else ())
    keys: list[str] = []
    for pattern, predicates in _QUESTION_KEYS:
        if pattern.search(form):
            keys.extend(f"{owner}:{p}" for p in predicates)
    favorite = FAVORITE.search(form)
    if favorite is not None:
        keys.append(f"{owner}:{favorite_key(favorite)}")
    attribute = re.search(r"\bwhat be subj's ((?:\w+ ){0,2}?\w+)$", form)
    if attribute is not None:
        words = [normalise_word(w) for w in attribute[1].split() if w not in STOPWORDS]
        if words and words[-1] in ATTRIBUTES:
            keys.append(f"{owner}:{'_'.join(words)}")
    if re.search(r"\b(?:you|your|respond|answer|reply|replies|responses|answers)\b", query, _I):
        for pattern, theme in INSTRUCTION_THEMES:
            if pattern.search(query):
                keys.append(f"{AGENT}:{theme}")
                break
    return list(dict.fromkeys(keys))


_QUESTION_KEYS: Final[tuple[tuple[re.Pattern[str], tuple[str, ...]], ...]] = (
    (
        re.compile(
            r"\bwhere (?:do|does|did) subj (?:\w+ )?live\b|\bwhere be subj (?:living|based)\b"
            r"|\bwhat (?:city|country|town|place) (?:do|does|did) subj live\b|"
            r"\bsubj's (?:home|address)\b|\bwhere (?:do|does|did) subj move to\b"
        ),
        ("lives_in",),
    ),
    (
        re.compile(
            r"\bwhere be subj (?:originally )?from\b|\bwhere (?:do|does|did) subj grow up\b|"
            r"\bsubj's hometown\b|\bwhere did subj move from\b|\bwhere be subj born\b"
        ),
        ("hometown", "lives_in"),
    ),
    (
        re.compile(
            r"\bwhere (?:do|does|did) subj work\b|\bwho (?:do|does|did) subj work for\b|"
            r"\bwhat company\b|\bsubj's (?:employer|company)\b"
        ),
        ("works_at", "occupation"),
    ),
    (
        re.compile(
            r"\bwhat (?:do|does) subj do for (?:a living|work)\b|\bsubj's (?:job|occupation|"
            r"profession|career)\b|\bwhat (?:do|does) subj work as\b|\bwhat (?:do|does) "
            r"subj do$"
        ),
        ("occupation", "works_at"),
    ),
    (
        re.compile(
            r"\bsubj's name\b|\bwhat (?:should|do|does) (?:you|i|\w+) call subj\b|"
            r"\bwhat be subj called\b"
        ),
        ("name",),
    ),
    (re.compile(r"\bhow old be subj\b|\bsubj's age\b"), ("age",)),
    (re.compile(r"\bsubj's birthday\b|\bwhen be subj born\b"), ("birthday",)),
    (
        re.compile(r"\bsubj's relationship\b|\bbe subj (?:married|single|dating|engaged)\b"),
        ("relationship_status",),
    ),
    (re.compile(r"\bsubj's diet\b|\bbe subj (?:a )?(?:vegetarian|vegan)\b"), ("diet",)),
)


def _named_subject(query: str) -> str | None:
    words = re.findall(r"[A-Za-z][\w’']*", query)
    for index, word in enumerate(words):
        base = re.sub(r"['’]s$", "", word)
        if index == 0 or not base[0].isupper() or base.lower() in STOPWORDS or base == "I":
            continue
        return base
    return None
