"""Words: tokenizer, stop words, keywords, light normalisation (spelling, plurals, verbs)."""

from __future__ import annotations

import re
from typing import Final

WORD: Final = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
MAX_KEYWORDS: Final = 12

_STOPWORD_TEXT: Final = """\
a about above after again against ago all almost also although always am among an and another
any anyone anything anyway are aren't around as at away back be because been before being below
between both but by can can't cannot could couldn't did didn't do does doesn't doing don't done
down during each either else enough even ever every everything few for from further get gets
getting go goes going gonna got gotta had hadn't has hasn't have haven't having he he'd he'll
he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into is
isn't it it'd it'll it's its itself just kind kinda know let let's like lot lots made make makes
many may maybe me might mine more most much must mustn't my myself need needs never no nor not
nothing now of off oh ok okay on once one only onto or other ought our ours ourselves out over
own pretty quite rather really same say said says see seem seems shall shan't she she'd she'll
she's should shouldn't so some something sometimes soon still such sure than that that'd that's
the their theirs them themselves then there there's these they they'd they'll they're they've
thing things think this those though through thus to too totally toward towards um uh under
until up upon us very via wanna was wasn't way we we'd we'll we're we've well were weren't
what what's whatever when when's where where's whether which while who who's whom whose why
why's will with within without won't would wouldn't yeah yep yes yet you you'd you'll you're
you've your yours yourself yourselves hey hi hello thanks thank wow cool awesome great glad
lol haha hmm anyway actually definitely absolutely especially probably right sounds sound
"""
STOPWORDS: Final = frozenset(_STOPWORD_TEXT.split())
# Relative time words say nothing once dates are resolved; they are not keywords.
_TIME_WORDS: Final = frozenset(
    ["last", "next", "yesterday", "today", "tomorrow", "tonight", "ago", "lately", "recently"]
)

# British → American spellings of common words, so paraphrases share keys.
_SPELLING: Final = {
    "favourite": "favorite",
    "favourites": "favorites",
    "colour": "color",
    "colours": "colors",
    "flavour": "flavor",
    "flavours": "flavors",
    "honour": "honor",
    "neighbour": "neighbor",
    "neighbours": "neighbors",
    "behaviour": "behavior",
    "organise": "organize",
    "organised": "organized",
    "recognise": "recognize",
    "realise": "realize",
    "realised": "realized",
    "theatre": "theater",
    "centre": "center",
    "metre": "meter",
    "metres": "meters",
    "programme": "program",
    "travelling": "traveling",
    "travelled": "traveled",
    "counsellor": "counselor",
    "counselling": "counseling",
    "jewellery": "jewelry",
    "grey": "gray",
    "mum": "mom",
    "mums": "moms",
    "labour": "labor",
    "humour": "humor",
}

_IRREGULAR_PLURALS: Final = {
    "children": "child",
    "kids": "kid",
    "people": "person",
    "men": "man",
    "women": "woman",
    "feet": "foot",
    "teeth": "tooth",
    "mice": "mouse",
    "geese": "goose",
    "wives": "wife",
    "lives": "life",
    "knives": "knife",
    "leaves": "leaf",
}

_NOT_PLURAL_WORDS: Final = (
    "news series species glass class boss bus gas yes this his is was has does its us always "
    "perhaps sometimes physics mathematics politics tennis chess lens plus minus status "
    "christmas analysis basis crisis thesis"
)
_NOT_PLURAL: Final = frozenset(_NOT_PLURAL_WORDS.split())

_IRREGULAR_VERBS: Final = {
    "went": "go",
    "gone": "go",
    "goes": "go",
    "saw": "see",
    "seen": "see",
    "met": "meet",
    "got": "get",
    "gotten": "get",
    "had": "have",
    "has": "have",
    "made": "make",
    "took": "take",
    "taken": "take",
    "gave": "give",
    "given": "give",
    "ran": "run",
    "did": "do",
    "does": "do",
    "done": "do",
    "came": "come",
    "bought": "buy",
    "found": "find",
    "began": "begin",
    "begun": "begin",
    "won": "win",
    "lost": "lose",
    "left": "leave",
    "felt": "feel",
    "heard": "hear",
    "kept": "keep",
    "knew": "know",
    "thought": "think",
    "told": "tell",
    "said": "say",
    "sang": "sing",
    "swam": "swim",
    "wrote": "write",
    "written": "write",
    "read": "read",
    "ate": "eat",
    "drank": "drink",
    "drove": "drive",
    "flew": "fly",
    "brought": "bring",
    "taught": "teach",
    "caught": "catch",
    "built": "build",
    "sent": "send",
    "spent": "spend",
    "sold": "sell",
    "paid": "pay",
    "held": "hold",
    "stood": "stand",
    "sat": "sit",
    "slept": "sleep",
    "became": "become",
    "chose": "choose",
    "grew": "grow",
    "drew": "draw",
    "threw": "throw",
    "wore": "wear",
    "broke": "break",
    "fell": "fall",
    "forgot": "forget",
    "spoke": "speak",
    "was": "be",
    "were": "be",
    "am": "be",
    "is": "be",
    "are": "be",
    "been": "be",
    "lives": "live",
}
PAST_IRREGULAR: Final = frozenset(
    w
    for w, lemma in _IRREGULAR_VERBS.items()
    if w not in {"goes", "has", "does", "lives", "am", "is", "are", "read"} and not w.endswith("n")
) | frozenset({"done", "seen", "gone", "taken", "given", "been", "begun", "won"})


def tokens(text: str) -> list[str]:
    """The lower-case word tokens of ``text`` (curly apostrophes made straight)."""
    return [m.group(0).lower().replace("’", "'") for m in WORD.finditer(text)]


def american_spelling(word: str) -> str:
    """The American spelling of a lower-case word, if it is a common British one ("colour")."""
    return _SPELLING.get(word, word)


def normalise_word(word: str) -> str:
    """American spelling and singular form of a lower-case word ("favourites" → "favorite")."""
    word = _SPELLING.get(word, word)
    if word in _IRREGULAR_PLURALS:
        return _IRREGULAR_PLURALS[word]
    if len(word) <= 3 or word in _NOT_PLURAL or word.endswith(("ss", "us", "is")):
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("ches", "shes", "xes", "zzes", "sses")):
        return word[:-2]
    if word.endswith("s") and not word.endswith("'s"):
        return word[:-1]
    return word


def verb_lemma(word: str) -> str:
    """A rough base form of a lower-case verb ("went" → "go", "moved" → "move", "tries" → "try")."""
    word = _SPELLING.get(word, word)
    if word in _IRREGULAR_VERBS:
        return _IRREGULAR_VERBS[word]
    if word.endswith("ied") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("ed") and len(word) > 3 and is_past_tense(word):
        stem = word[:-2]
        if len(stem) > 2 and stem[-1] == stem[-2] and stem[-1] not in "lsz":
            return stem[:-1]  # stopped → stop
        if stem.endswith(("at", "iv", "ov", "us", "ak", "bl", "dg", "rg", "nc", "rs", "ir", "ur")):
            return stem + "e"  # created → create, moved → move, used → use
        if stem.endswith(("v", "c", "z")):
            return stem + "e"
        return stem
    if word.endswith("ing") and len(word) > 5:
        stem = word[:-3]
        if len(stem) > 2 and stem[-1] == stem[-2] and stem[-1] not in "lsz":
            return stem[:-1]
        if stem.endswith(("at", "iv", "ov", "us", "ak", "bl", "dg", "rg", "nc", "rs", "ir", "ur")):
            return stem + "e"
        return stem
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("ches", "shes", "xes", "sses")):
        return word[:-2]
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


def is_past_tense(word: str) -> bool:
    """Whether a lower-case word looks like a past-tense verb ("visited", "went")."""
    return word in PAST_IRREGULAR or (
        word.endswith("ed")
        and len(word) > 3
        and word not in {"need", "seed", "feed", "bred", "shed", "sled", "breed", "speed", "greed"}
    )


def content_words(text: str) -> list[str]:
    """The non-stop-word tokens of ``text``, in order, with repeats; possessives lose ``'s``."""
    words = []
    for token in tokens(text):
        word = token[:-2] if token.endswith("'s") else token
        if word not in STOPWORDS and (len(word) > 2 or word.isdigit()):
            words.append(word)
    return words


def keywords(text: str, limit: int = MAX_KEYWORDS) -> list[str]:
    """Distinct lower-case content words of ``text`` in order of first use (at most ``limit``).

    Possessives lose their ``'s`` ("Caroline's" → "caroline"); stop words and one- or
    two-letter words (but not numbers) are dropped.
    """
    seen: dict[str, None] = {}
    for word in content_words(text):
        if word in _TIME_WORDS:
            continue
        seen.setdefault(word, None)
        if len(seen) >= limit:
            break
    return list(seen)
