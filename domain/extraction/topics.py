"""Topic keys ("user:lives_in", "agent:answer_language") from normalised subject and predicate."""

from __future__ import annotations

import re
from typing import Final

from memstream.domain.extraction.model import MemoryType
from memstream.domain.extraction.vocabulary import (
    STOPWORDS,
    american_spelling,
    content_words,
    normalise_word,
    tokens,
    verb_lemma,
)

USER: Final = "user"
AGENT: Final = "agent"

_OCCUPATION_WORDS: Final = (
    "accountant actor actress architect artist assistant athlete baker barista carpenter "
    "cashier chef cleaner coach consultant counselor dancer dentist designer developer doctor "
    "driver economist editor electrician engineer entrepreneur farmer firefighter freelancer "
    "hairdresser journalist judge lawyer lecturer librarian manager mechanic musician nurse "
    "painter paramedic pharmacist photographer physician physicist pilot plumber poet police "
    "officer professor programmer psychologist researcher retiree salesperson scientist "
    "secretary singer student surgeon teacher therapist translator tutor vet veterinarian "
    "volunteer waiter waitress writer author analyst intern clerk"
)
OCCUPATIONS: Final = frozenset(_OCCUPATION_WORDS.split())
# "my X is ..." names an attribute (one value at a time) when X ends with one of these.
__ATTRIBUTE_WORDS: Final = (
    "name email address phone number age birthday job occupation color size height weight "
    "nickname username password title role job_title hometown city country language timezone "
    "religion goal major degree salary rent budget status"
)
ATTRIBUTES: Final = frozenset(__ATTRIBUTE_WORDS.split())
_LANGUAGES: Final = (
    "english|french|german|spanish|italian|portuguese|dutch|japanese|chinese|mandarin|korean|"
    "russian|arabic|hindi|polish|swedish|norwegian|danish|finnish|greek|turkish|hebrew"
)
_I = re.IGNORECASE
INSTRUCTION_THEMES: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (
        re.compile(rf"\b(?:in|into|use|speak|using) (?:{_LANGUAGES})\b|\blanguage\b", _I),
        "answer_language",
    ),
    (
        re.compile(r"\b(?:british|american|uk|us) (?:english|spelling)\b|\bspelling\b", _I),
        "spelling",
    ),
    (re.compile(r"\bemojis?\b|\bemoticons?\b", _I), "emoji"),
    (
        re.compile(r"\b(?:metric|imperial|celsius|fahrenheit|units?|kilometers|miles)\b", _I),
        "units",
    ),
    (re.compile(r"\btime ?zone\b", _I), "timezone"),
    (
        re.compile(
            r"\b(?:bullet|bullets|markdown|tables?|json|format|formatting|numbered list|"
            r"headings?|code blocks?)\b",
            _I,
        ),
        "response_format",
    ),
    (
        re.compile(
            r"\b(?:short|shorter|brief|briefer|concise|long|longer|detailed|verbose|"
            r"succinct|length|one sentence|few sentences|word limit|to the point)\b",
            _I,
        ),
        "response_length",
    ),
    (
        re.compile(
            r"\b(?:formal|informal|casual|polite|friendly|tone|professional|sarcastic|"
            r"funny|jokes?)\b",
            _I,
        ),
        "tone",
    ),
)
_NAME: Final = re.compile(
    r"\bsubj's name be\b|\bcall subj\b|\baddress subj as\b|\brefer to subj as\b|"
    r"\bsubj be called\b|\bsubj go(?:es)? by\b",
)
# Patterns over the canonical form (see `canonical`): subject → "subj", forms of "be" → "be".
_PREDICATES: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (_NAME, "name"),
    (
        re.compile(
            r"\bsubj (?:\w+ )?(?:live|lives|lived|living|moved|moving|relocated|reside|"
            r"resides) (?:in|to)\b|\bsubj be (?:\w+ )?(?:based|living|settled) in\b|"
            r"\bsubj's (?:home|house|apartment|flat|place) be in\b"
        ),
        "lives_in",
    ),
    (
        re.compile(
            r"\bsubj be from\b|\bsubj (?:grew|grow) up in\b|\bsubj's hometown\b|"
            r"\bsubj be born in\b"
        ),
        "hometown",
    ),
    (
        re.compile(
            r"\bsubj (?:\w+ )?(?:work|works|worked|working) (?:at|for)\b|"
            r"\bsubj be employed\b|\bsubj's (?:employer|company)\b|"
            r"\bsubj joined \w+(?: \w+)? as\b"
        ),
        "works_at",
    ),
    (
        re.compile(
            r"\bsubj (?:\w+ )?(?:work|works|worked|working) as\b|"
            r"\bsubj's (?:job|occupation|profession|career) be\b"
        ),
        "occupation",
    ),
    (
        re.compile(
            r"\bsubj be (?:\d{1,3}|\w+ty(?:-\w+)?)(?: years old)?\s*$|\bsubj be \d{1,3} "
            r"years old\b|\bsubj's age\b"
        ),
        "age",
    ),
    (re.compile(r"\bsubj's birthday\b|\bsubj be born on\b"), "birthday"),
    (
        re.compile(
            r"\bsubj be (?:\w+ )?(?:married|single|divorced|engaged|widowed|dating|"
            r"in a relationship|seeing someone)\b"
        ),
        "relationship_status",
    ),
    (
        re.compile(
            r"\bsubj be (?:a )?(?:vegetarian|vegan|pescatarian)\b|\bsubj (?:don't|do not) "
            r"eat meat\b"
        ),
        "diet",
    ),
)
FAVORITE: Final = re.compile(
    r"\bsubj's (?:\w+ )?favorite ((?:\w+ ){0,2}?\w+) (?:be|of all)\b|"
    r"\bbe subj's (?:\w+ )?favorite (\w+(?: \w+){0,2})\b|\bsubj's favorite (\w+(?: \w+){0,2})\b"
)
_OCCUPATION: Final = re.compile(r"\bsubj be (?:now |currently |still )?(?:a|an) (?:\w+ )?(\w+)\b")
_ATTRIBUTE: Final = re.compile(r"\bsubj's ((?:\w+ ){0,2}?\w+) be\b")
_LIKES: Final = re.compile(
    r"\bsubj (?:really |also |absolutely |just |still )?(like|likes|love|loves|enjoy|enjoys|"
    r"adore|adores|hate|hates|dislike|dislikes|prefer|prefers) (.+)"
)
_HAS: Final = re.compile(
    r"\bsubj (?:have|has|own|owns|have got) (?!be\b|to\b|\w+ed\b)(?:a |an |\d+ |\w+ )?(\w+)"
)
_KNOWN_PREDICATES_WORDS: Final = (
    "name lives_in hometown works_at occupation age birthday relationship_status diet"
)
_KNOWN_PREDICATES: Final = frozenset(_KNOWN_PREDICATES_WORDS.split())
_KNOWN_PREFIXES: Final = ("favorite_", "likes_", "dislikes_", "prefers_")
_LIKE_PREDICATE: Final = {
    "like": "likes",
    "love": "likes",
    "enjoy": "likes",
    "adore": "likes",
    "hate": "dislikes",
    "dislike": "dislikes",
    "prefer": "prefers",
}
_SKIP_VERBS_WORDS: Final = (
    "be have do will would can could should might must may also really just still always "
    "never not don't didn't can't won't wouldn't even finally recently actually definitely "
    "gonna going wanna want to so"
)
_SKIP_VERBS: Final = frozenset(_SKIP_VERBS_WORDS.split())
_THIRD_PERSON_VERBS_WORDS: Final = (
    "is was lives lived works worked moved has had loves likes enjoys hates prefers went "
    "visited attended joined became"
)
_THIRD_PERSON_VERBS: Final = frozenset(_THIRD_PERSON_VERBS_WORDS.split())


def subject_slug(name: str) -> str:
    """The subject part of a key: ``"Caroline"`` → ``"caroline"``, ``""`` → ``"user"``."""
    slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    return slug or USER


def canonical(text: str, subject_names: tuple[str, ...] = ()) -> str:
    """Lower-case, American-spelled text with the first person (and ``subject_names``) as
    ``subj`` and forms of "be" as ``be``: "I'm living in Berlin" → "subj be living in berlin"."""
    names = {n.lower() for n in subject_names}
    out: list[str] = []
    for word in tokens(text):
        base = word[:-2] if word.endswith("'s") else word
        if word in {"i", "me", "myself"} or word in names:
            out.append("subj")
        elif word in {"my", "mine"} or (word.endswith("'s") and base in names):
            out.append("subj's")
        elif word in {"i'm"}:
            out.extend(["subj", "be"])
        elif word in {"i've"}:
            out.extend(["subj", "have"])
        elif word in {"i'd"}:
            out.extend(["subj", "would"])
        elif word in {"i'll"}:
            out.extend(["subj", "will"])
        elif word in {"am", "is", "are", "was", "were", "been", "being"}:
            out.append("be")
        else:
            out.append(american_spelling(base))
    return " ".join(out)


def topic_key(text: str, memory_type: MemoryType, subject: str = USER) -> str:
    """The topic key of a memory: ``"<subject>:<predicate>"``, never empty.

    Known predicates collapse paraphrases ("I live in Berlin", "I moved to Berlin" and "My home
    is in Berlin" → ``"user:lives_in"``; "my favourite colour is blue" →
    ``"user:favorite_color"``); other facts get ``"<verb>_<object head>"``. Instructions get
    ``"agent:<theme>"`` ("always answer in French" → ``"agent:answer_language"``), else
    ``"agent:<verb>_<object head>"``. A sentence opening with another person's name ("Caroline
    is a counselor") is keyed under that person (``"caroline:occupation"``).

    Args:
        text: the memory's text (first person as written, without a "Name: " prefix).
        memory_type: its type.
        subject: who "I" is: ``"user"`` or a speaker's name.
    """
    own = subject_slug(subject)
    third = _third_person_subject(text)
    first_person = bool(re.search(r"\b(?:i|i'm|i've|i'd|i'll|my|me)\b", text, _I))
    if third is not None and not first_person and memory_type != "instruction":
        # Keyed under the named person only for a predicate the rules know ("Caroline is a
        # counselor"); a capitalised first word is too often not a person ("Change is good").
        predicate = _predicate(canonical(text, (third,)))
        if predicate in _KNOWN_PREDICATES or predicate.startswith(_KNOWN_PREFIXES):
            return f"{subject_slug(third)}:{predicate}"
    form = canonical(text)
    owner = own
    if _NAME.search(form):
        return f"{owner}:name"
    if memory_type == "instruction":
        for pattern, theme in INSTRUCTION_THEMES:
            if pattern.search(text):
                return f"{AGENT}:{theme}"
        return f"{AGENT}:{_directive(text)}"
    return f"{owner}:{_predicate(form)}"


_DIRECTIVE_FILLER_WORDS: Final = (
    "please always never don't do not from now on you should must make sure to i i'd i'm like "
    "want would prefer ever kindly going forward the in future it if when that your can could "
    "be try remember"
)
_DIRECTIVE_FILLER: Final = frozenset(_DIRECTIVE_FILLER_WORDS.split())


def _predicate(form: str) -> str:
    for pattern, key in _PREDICATES:
        if pattern.search(form):
            return key
    favorite = FAVORITE.search(form)
    if favorite is not None:
        return favorite_key(favorite)
    occupation = _OCCUPATION.search(form)
    if occupation is not None and normalise_word(occupation[1]) in OCCUPATIONS:
        return "occupation"
    attribute = _ATTRIBUTE.search(form)
    if attribute is not None:
        words = [normalise_word(w) for w in attribute[1].split() if w not in STOPWORDS]
        if words:
            if words[-1] in ATTRIBUTES:
                return "_".join(words)
            head = _head(form[attribute.end() :])
            return "_".join([*words, head] if head else words)
    likes = _LIKES.search(form)
    if likes is not None:
        head = _head(likes[2])
        if head:
            return f"{_LIKE_PREDICATE[verb_lemma(likes[1])]}_{head}"
    has = _HAS.search(form)
    if has is not None and has[1] not in STOPWORDS and has[1] != "subj":
        return f"has_{normalise_word(has[1])}"
    return _verb_object(form) or _about(form)


def favorite_key(match: re.Match[str]) -> str:
    phrase = next(g for g in match.groups() if g)
    words = [normalise_word(w) for w in phrase.split() if w not in STOPWORDS and w != "subj"]
    return "favorite_" + "_".join(words or ["thing"])


def _verb_object(form: str) -> str | None:
    words = form.split()
    if "subj" not in words:
        return None
    rest = words[words.index("subj") + 1 :]
    while rest and (rest[0] in _SKIP_VERBS or rest[0] in STOPWORDS or rest[0].startswith("subj")):
        rest = rest[1:]
    if not rest:
        return None
    verb = verb_lemma(rest[0])
    head = _head(" ".join(rest[1:]))
    return f"{verb}_{head}" if head else verb


def _head(phrase: str) -> str:
    for word in phrase.split():
        if word in {"subj", "subj's", "be"} or word in STOPWORDS or len(word) < 3:
            continue
        return normalise_word(word[:-2] if word.endswith("'s") else word)
    return ""


def _about(form: str) -> str:
    words = [normalise_word(w) for w in content_words(form) if w not in {"subj", "subj's", "be"}]
    return "about_" + "_".join(words[:2]) if words else "note"


def _directive(text: str) -> str:
    words = [w for w in tokens(text) if w not in _DIRECTIVE_FILLER]
    if not words:
        return "general"
    verb = verb_lemma(words[0])
    head = _head(" ".join(words[1:]))
    return f"{verb}_{head}" if head else verb


def _third_person_subject(text: str) -> str | None:
    match = re.match(r"\s*([A-Z][a-z]+)(?:'s|’s)?\s+(\w+)", text)
    if match is None or match[1].lower() in STOPWORDS:
        return None
    if "'s" in match.group(0) or "’s" in match.group(0) or match[2] in _THIRD_PERSON_VERBS:
        return match[1]
    return None
