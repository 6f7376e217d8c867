"""Memory type classification (fact | event | instruction | task): cue rules, optionally blended
with embedding-prototype similarity."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Final

from memstream.domain.extraction.dates import find_time_mentions
from memstream.domain.extraction.model import MEMORY_TYPES, Embed, MemoryType
from memstream.domain.extraction.prototypes import prototype_scores
from memstream.domain.extraction.vocabulary import is_past_tense, tokens

Scores = dict[MemoryType, float]

# Rule scores decide alone when the best type leads the runner-up by this much (normalised).
CONFIDENT_MARGIN: Final = 0.35
PROTOTYPE_WEIGHT: Final = 0.5
FACT_PRIOR: Final = 0.8
SCORE_FLOOR: Final = 0.4
# Imperatives between people in a conversation are rarely instructions to the agent.
NAMED_SPEAKER_INSTRUCTION_FACTOR: Final = 0.4
# Whether a text names a time does not depend on the anchor.
_ANY_ANCHOR: Final = datetime(2000, 1, 1, tzinfo=UTC)

_I = re.IGNORECASE
_DIRECTIVE_VERBS: Final = (
    r"use|keep|be|answer|respond|reply|write|format|avoid|stop|include|give me|show me|address|"
    r"speak|talk|sign|cite|list|explain|summari[sz]e|refer to me|send me|tell me|ask me|mention|"
    r"say|add|put|make|translate|spell|prefer"
)
_CUES: Final[dict[MemoryType, tuple[tuple[re.Pattern[str], float], ...]]] = {
    "instruction": (
        (re.compile(r"^(?:please\s+)?(?:always|never)\b", _I), 2.0),
        (re.compile(r"\bfrom now on\b|\bgoing forward\b|\bin (?:the )?future,", _I), 2.5),
        (re.compile(r"^please\b(?!.*\bremind me\b)", _I), 1.5),
        (
            re.compile(
                rf"^(?:please\s+)?(?:don't|do not|never)\s+(?:ever\s+)?(?:{_DIRECTIVE_VERBS})\b", _I
            ),
            1.5,
        ),
        (re.compile(r"\bcall me\b|\baddress me as\b|\brefer to me as\b", _I), 2.5),
        (
            re.compile(
                r"\bi (?:would |'d )?(?:prefer|want|like|need)\s+(?:it\s+)?"
                r"(?:if\s+|when\s+|that\s+)?"
                r"(?:you|your|responses|answers|replies|the (?:answers|responses|replies))\b",
                _I,
            ),
            3.0,
        ),
        (re.compile(r"\b(?:you should|you must|make sure (?:you|to))\b", _I), 1.2),
        (re.compile(r"\b(?:respond|answer|reply|write|speak|talk)(?: to me)? in\b", _I), 1.5),
        (re.compile(rf"^(?:please\s+)?(?:{_DIRECTIVE_VERBS})\b", _I), 1.2),
        (re.compile(r"\byour (?:answers|responses|replies|tone|summaries)\b", _I), 1.0),
    ),
    "task": (
        (re.compile(r"\b(?:i|we) (?:really |still |also )?(?:need|have|got|gotta) to\b", _I), 2.0),
        (re.compile(r"\bi've got to\b|\bi'm supposed to\b|\bi (?:must|gotta)\b", _I), 1.5),
        (re.compile(r"\bremind me\b", _I), 3.0),
        (re.compile(r"\b(?:todo|to-do|to do list)\b", _I), 2.5),
        (re.compile(r"\b(?:don't|do not) (?:let me )?forget to\b|\bremember to\b", _I), 2.5),
        (re.compile(r"\bdeadline\b|\bdue (?:on|by|date|tomorrow|next)\b", _I), 2.0),
        (
            re.compile(
                r"\bby (?:tomorrow|tonight|the end of|end of|next|eod|monday|tuesday|"
                r"wednesday|thursday|friday|saturday|sunday)\b",
                _I,
            ),
            1.0,
        ),
        (
            re.compile(
                r"^(?:buy|call|email|book|schedule|pay|finish|submit|pick up|renew|fix)\b", _I
            ),
            1.0,
        ),
    ),
    "event": (
        (
            re.compile(
                r"\b(?:went|visited|attended|joined|celebrated|traveled|travelled|met|took|"
                r"ran|finished|started|won|came back|got back|hosted|organized|organised|"
                r"volunteered|performed|graduated|married|adopted|bought|signed up)\b",
                _I,
            ),
            1.0,
        ),
        (re.compile(r"\b(?:will|'ll|going to|gonna|planning to|plan to|about to)\b", _I), 0.5),
        (
            re.compile(
                r"\b(?:party|wedding|concert|trip|vacation|holiday|festival|meeting|"
                r"conference|race|game|show|event|ceremony|graduation|appointment|"
                r"interview|camping|hike|workshop|seminar|parade|competition|recital|flight|"
                r"reunion|tournament|match|concert|gig|exam|surgery)s?\b",
                _I,
            ),
            0.5,
        ),
    ),
    "fact": (
        (re.compile(r"\b(?:i am|i'm|i've been|i have been)\s+(?:a|an)\b", _I), 1.5),
        (re.compile(r"\bi (?:still |currently )?(?:live|work|study|stay)\b|\bi'm from\b", _I), 1.5),
        (re.compile(r"\bi (?:just |recently )?(?:moved|relocated) to\b", _I), 2.5),
        (re.compile(r"\bmy (?:\w+ ){0,2}(?:is|are)\b|\bmy name is\b", _I), 1.5),
        (
            re.compile(
                r"\bi (?:really |also |absolutely )?(?:like|love|enjoy|prefer|hate|dislike|"
                r"adore)\b",
                _I,
            ),
            1.2,
        ),
        (re.compile(r"\bi (?:have|'ve got|own) (?:a|an|two|three|\d+)\b", _I), 1.0),
        (
            re.compile(
                r"\b(?:years old|allergic|married|single|divorced|vegetarian|vegan|"
                r"favorite|favourite)\b",
                _I,
            ),
            1.0,
        ),
        (re.compile(r"\b(?:is|are) (?:a|an|my|the)\b", _I), 0.4),
    ),
}
# A past-tense verb right after its subject ("I went", "we finally visited", "Caroline ran");
# a bare "-ed" word is as often an adjective ("talented", "excited").
_ACTION: Final = re.compile(
    r"\b(?:(?i:i|we|he|she|they|you)|[A-Z][a-z]+)\s+(?:(?:just|finally|also|really|recently|"
    r"actually|even|never|once|already)\s+)?([a-z]+)\b"
)


def _action_verbs(text: str) -> list[str]:
    return [m.group(1) for m in _ACTION.finditer(text)]


_WEAK_PAST: Final = frozenset({"was", "were", "had", "been", "felt", "thought", "said", "seemed"})


def rule_scores(text: str, named_speaker: bool = False) -> Scores:
    """Per-type scores (summing to 1) from cue words and patterns of one sentence or message.

    Args:
        text: the sentence, without any "Name: " speaker prefix.
        named_speaker: the text comes from a named participant of a conversation between people,
            where imperatives are rarely directed at the agent.
    """
    stripped = text.strip().lstrip("\"'“(").strip()
    # Every type starts from a floor, so a text with no cues at all is not "confident".
    raw: Scores = dict.fromkeys(MEMORY_TYPES, SCORE_FLOOR)
    raw["fact"] += FACT_PRIOR
    for memory_type, cues in _CUES.items():
        for pattern, weight in cues:
            if pattern.search(stripped):
                raw[memory_type] += weight
    words = tokens(stripped)
    if any(is_past_tense(w) and w not in _WEAK_PAST for w in _action_verbs(stripped)):
        raw["event"] += 1.6
    elif any(is_past_tense(w) for w in words):
        raw["event"] += 0.4
    if find_time_mentions(stripped, _ANY_ANCHOR):
        raw["event"] += 1.5
    if named_speaker:
        raw["instruction"] *= NAMED_SPEAKER_INSTRUCTION_FACTOR
    total = sum(raw.values())
    return {t: raw[t] / total for t in MEMORY_TYPES}


def classify(text: str, embed: Embed | None = None, named_speaker: bool = False) -> MemoryType:
    """The memory type of ``text``: the rules' choice, blended with prototype similarity when an
    ``embed`` function is given and the rules are not confident."""
    return best_type(type_scores(text, embed, named_speaker))


def type_scores(text: str, embed: Embed | None = None, named_speaker: bool = False) -> Scores:
    """Per-type scores of ``text`` (summing to 1): rule scores, and when ``embed`` is given and
    the rules' lead is below :data:`CONFIDENT_MARGIN`, their mix with prototype scores."""
    rules = rule_scores(text, named_speaker)
    if embed is None or margin(rules) >= CONFIDENT_MARGIN:
        return rules
    prototypes = prototype_scores(text, embed)
    return {
        t: (1 - PROTOTYPE_WEIGHT) * rules[t] + PROTOTYPE_WEIGHT * prototypes[t]
        for t in MEMORY_TYPES
    }


def best_type(scores: Scores) -> MemoryType:
    """The highest-scoring type; ties go to the earlier of fact, event, instruction, task."""
    return max(MEMORY_TYPES, key=lambda t: (scores[t], -MEMORY_TYPES.index(t)))


def margin(scores: Scores) -> float:
    """How far the best type's score leads the runner-up's."""
    ordered = sorted(scores.values(), reverse=True)
    return ordered[0] - ordered[1]
