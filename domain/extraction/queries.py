"""Search queries a memory answers, built by templates from its type, topic key and words."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Final

from memstream.domain.extraction.dates import find_time_mentions
from memstream.domain.extraction.model import MemoryType
from memstream.domain.extraction.vocabulary import STOPWORDS, is_past_tense, verb_lemma

MAX_QUERIES: Final = 5
_PHRASE_WORDS: Final = 8

_PREDICATE_QUESTIONS: Final = {
    "lives_in": ("Where does {s} live?", "Where did {s} move to?"),
    "hometown": ("Where is {s} from?", "Where did {s} grow up?"),
    "works_at": ("Where does {s} work?", "What company does {s} work for?"),
    "occupation": ("What does {s} do for a living?", "What is {s}'s job?"),
    "name": ("What is {s}'s name?", "What should {s} be called?"),
    "age": ("How old is {s}?",),
    "birthday": ("When is {s}'s birthday?",),
    "relationship_status": ("What is {s}'s relationship status?",),
    "diet": ("What does {s} eat?", "Is {s} vegetarian?"),
}
_AGENT_QUESTIONS: Final = {
    "answer_language": "Which language should answers be in?",
    "response_length": "How long should responses be?",
    "response_format": "How should responses be formatted?",
    "units": "Which units should be used?",
    "tone": "What tone should responses have?",
    "emoji": "Should responses use emoji?",
    "spelling": "Which spelling should be used?",
    "timezone": "Which time zone should be used?",
}
_FIRST_PERSON_VERB: Final = re.compile(
    r"\b(?:I|we)\s+(?:(?:really|also|just|finally|recently|actually|even)\s+)*"
    r"(?P<aux>will|'ll|am going to|'m going to|'m gonna|am gonna)?\s*"
    r"(?P<verb>[a-z]+)\s+(?P<rest>[^.!?;,]*)",
    re.IGNORECASE,
)
_CUT_AT: Final = re.compile(
    r"\b(?:and|but|because|so|which|when|while|since|though)\b", re.IGNORECASE
)
_ANY_ANCHOR: Final = datetime(2000, 1, 1, tzinfo=UTC)
# Verbs that make no question on their own ("When did X feel?").
_WEAK_VERBS_WORDS: Final = (
    "felt feel thought think was had got did said know knew bet guess hope wish mean love "
    "like see saw agree"
)
_WEAK_VERBS: Final = frozenset(_WEAK_VERBS_WORDS.split())
# Words that make poor topics for "What did X say about ...?".
_GENERIC_WORDS: Final = (
    "feel felt make made look looks bring keep hear sorry super good great nice plus glad "
    "happy amazing awesome cool thing lot bit time day life stuff true hard able love hope "
    "wish mean means sure real big new old kind fun image photo worries bet guess wow "
    "incredible tough special exciting"
)
_GENERIC: Final = frozenset(_GENERIC_WORDS.split())


def search_queries(
    memory_type: MemoryType,
    topic_key: str,
    subject: str,
    text: str,
    keywords: list[str],
    when: str | None,
) -> tuple[str, ...]:
    """3–5 distinct natural questions the memory answers.

    Args:
        memory_type: the memory's type.
        topic_key: its topic key (``"user:lives_in"``).
        subject: the display name of who it is about ("Caroline", "User").
        text: the first-person text it came from (for "When did X go to ...?" questions).
        keywords: its keywords, most relevant first.
        when: its rendered date ("on 7 May 2023"), if any.
    """
    owner, _, predicate = topic_key.partition(":")
    queries: list[str] = []
    if owner == "agent":
        queries.append(_AGENT_QUESTIONS.get(predicate, "How should the assistant behave?"))
        queries.append(f"What instructions has {subject} given about {_words(predicate)}?")
    elif predicate in _PREDICATE_QUESTIONS:
        queries.extend(q.format(s=subject) for q in _PREDICATE_QUESTIONS[predicate])
    elif predicate.startswith("favorite_"):
        queries.append(f"What is {subject}'s favorite {_words(predicate[9:])}?")
    elif predicate.startswith(("likes_", "dislikes_", "prefers_")):
        verb, _, thing = predicate.partition("_")
        queries.append(f"What does {subject} {verb.rstrip('s')}?")
        queries.append(f"How does {subject} feel about {_words(thing)}?")
    elif predicate.startswith("has_"):
        queries.append(f"Does {subject} have a {_words(predicate[4:])}?")
    action = _action_phrase(text)
    if action is not None:
        tense, phrase = action
        if memory_type == "event" or (memory_type == "fact" and tense != "present"):
            did = "will" if tense == "future" else "did"
            queries.append(f"When {did} {subject} {phrase}?")
        elif memory_type == "fact":
            queries.append(f"Does {subject} {phrase}?")
        if memory_type == "task":
            queries.append(f"When does {subject} need to {phrase}?")
    if when is not None and memory_type == "event":
        queries.append(f"What did {subject} do {when}?")
    if memory_type == "task":
        queries.append(f"What does {subject} need to do?")
        if when is not None:
            queries.append(f"What is due {when}?")
    topical = _topical(keywords, subject)
    if topical:
        queries.append(f"What did {subject} say about {topical[0]}?")
    if len(topical) >= 2:
        queries.append(f"What does {subject} think about {topical[0]} and {topical[1]}?")
    if len(topical) >= 3:
        queries.append(f"{subject} {' '.join(topical)}")
    queries.append(f"What do we know about {subject}?")
    queries.append(f"What is important to {subject}?")
    queries.append(f"What did {subject} mention?")
    distinct = list(dict.fromkeys(queries))
    return tuple(distinct[:MAX_QUERIES])


def _topical(keywords: list[str], subject: str) -> list[str]:
    """Up to three keywords that make good topics: not the subject, not generic, not verbs
    in the past tense or adverbs (when enough others remain)."""
    candidates = [k for k in keywords if k.lower() != subject.lower()]
    good = [
        k
        for k in candidates
        if k not in _GENERIC and not is_past_tense(k) and not k.endswith("ly") and len(k) > 3
    ]
    return (good or candidates)[:3]


def _words(snake: str) -> str:
    return snake.replace("_", " ") or "this"


def _action_phrase(text: str) -> tuple[str, str] | None:
    match = _FIRST_PERSON_VERB.search(text)
    if match is None:
        return None
    verb = match["verb"].lower()
    aux = (match["aux"] or "").lower()
    if verb in {"was", "were", "am", "is", "are", "be"}:
        return None
    if verb in STOPWORDS and verb not in {"went", "made", "got", "had", "did", "took", "said"}:
        return None
    tense = "future" if aux else "past" if is_past_tense(verb) else "present"
    rest_text = match["rest"]
    mentions = find_time_mentions(rest_text, _ANY_ANCHOR)
    if mentions:
        rest_text = rest_text[: mentions[0].span[0]]
    rest = _CUT_AT.split(rest_text, maxsplit=1)[0].split()[:_PHRASE_WORDS]
    if not rest and verb in _WEAK_VERBS:
        return None
    rest = [_object_pronoun(w) for w in rest]
    phrase = " ".join([verb_lemma(verb), *rest])
    return tense, phrase.strip()


def _object_pronoun(word: str) -> str:
    return {"my": "their", "me": "them", "myself": "themself", "our": "their"}.get(word, word)
