"""A summary without a model: salient sentences of a conversation, in the four summary sections.

:func:`extractive_summary` answers the prompt that
:func:`~memstream.domain.compaction.build_summary_prompt` writes (reading the conversation, the
previous summary and the token target back out of it) with
``## Topic`` / ``## Key Points`` / ``## Current State`` / ``## Open Items``: the topic is the first
substantial user sentence and the conversation's most frequent terms; key points are the
sentences whose terms recur most (term frequency, in conversation order), plus the tools used;
the current state is the last user message and the last reply; open items are questions and
sentences that announce work (``TODO``, ``next``, ``need to``...). An update keeps the previous
summary's points first. Everything is quoted from the conversation, never invented, and the
result stays within the token target. Deterministic: the same prompt gives the same summary.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from memstream.domain.compaction import MESSAGE_SEPARATOR, SECTION_TITLES, parse_summary_prompt
from memstream.domain.tokens import estimate_string_tokens

DEFAULT_BUDGET: Final = 500
SENTENCE_MAX_CHARS: Final = 240
KEYWORDS: Final = 5
LEADING_POINTS: Final = 2
STATE_MAX_CHARS: Final = 160
CANDIDATES: Final = 60
OPEN_ITEMS_MAX: Final = 6

_ROLE_LINE: Final = re.compile(r"\[([^\]\n]{1,64})\]")
_TOOL_LINE: Final = re.compile(r"\[Tool: ([^\]\n]*)\]")
_SENTENCE_END: Final = re.compile(r"(?<=[.!?])\s+")
_MARKUP: Final = re.compile(r"^(?:[-*+•>]\s+|\d{1,3}[.)]\s+|#{1,6}\s+)+")
_WORD: Final = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
_TODO: Final = re.compile(
    r"\b(?:todo|to do|next step|next steps|need to|needs to|we should|i will|i'll|we will|"
    r"we'll|pending|follow up|follow-up|remind|not yet|still have to|open question)\b",
    re.IGNORECASE,
)
_STOPWORD_TEXT: Final = """\
a about above after again against all also am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does
    doesn't doing don't down during each few for from further get got had hadn't has hasn't have
    haven't having he he'd he'll he's her here here's hers herself him himself his how how's i
    i'd i'll i'm i've if in into is isn't it it's its itself just let's like me more most much
    mustn't my myself no nor not now of off ok okay on once only or other ought our ours
    ourselves out over own please same shan't she she'd she'll she's should shouldn't so some
    such sure than that that's the their theirs them themselves then there there's these they
    they'd they'll they're they've this those through thanks thank to too under until up use
    used using very was wasn't we we'd we'll we're we've well were weren't what what's when
    when's where where's which while who who's whom why why's will with won't would wouldn't
    yes you you'd you'll you're you've your yours yourself yourselves one two also can could
    may might must shall would want know think see make need yeah hi hello"""
_STOPWORDS: Final = frozenset(_STOPWORD_TEXT.split())


@dataclass(slots=True)
class _Turn:
    role: str
    lines: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Sentence:
    position: int
    role: str
    text: str
    terms: tuple[str, ...]


def extractive_summary(prompt: str, default_budget: int = DEFAULT_BUDGET) -> str:
    """Summarise the conversation in a summary prompt without a model (see the module doc).

    Args:
        prompt: a :func:`~memstream.domain.compaction.build_summary_prompt` prompt; any other text
            is summarised as one conversation.
        default_budget: the token target when the prompt states none.
    """
    request = parse_summary_prompt(prompt)
    budget = request.budget if request.budget is not None else default_budget
    turns = _turns(request.conversation)
    previous = _sections(request.previous_summary or "")
    sentences = [s for s in _sentences(turns) if s.terms]
    frequency = Counter(term for s in sentences for term in set(s.terms))

    opening = _opening(sentences)
    topic = previous.get("Topic") or [_topic(opening, frequency)]
    kept = previous.get("Key Points", [])
    news = [s for s in sentences if s is not opening]  # the topic is said once
    opened = _dedupe([*previous.get("Open Items", []), *_open_items(news)])
    ranked = _ranked(news, frequency, exclude={_normal(line) for line in kept + opened})

    # Lines by priority while the budget lasts; each section then reads in conversation order
    # (lines kept from the previous summary first).
    candidates: list[tuple[str, int, str]] = [
        *(("Key Points", order - len(kept), line) for order, line in enumerate(kept)),
        *(("Key Points", s.position, _bullet(s.text)) for s in ranked[:LEADING_POINTS]),
        *(("Key Points", len(sentences), line) for line in _tool_point(turns)),
        *(("Current State", order, line) for order, line in enumerate(_current_state(turns))),
        *(("Open Items", order, line) for order, line in reversed(list(enumerate(opened)))),
        *(("Key Points", s.position, _bullet(s.text)) for s in ranked[LEADING_POINTS:]),
    ]
    summary = _Summary(budget, topic[:1])
    open_items = 0
    for title, order, line in candidates:
        if title == "Open Items" and open_items == OPEN_ITEMS_MAX:
            continue
        if summary.add(title, order, line) and title == "Open Items":
            open_items += 1
    return summary.render()


class _Summary:
    """The four sections, filled line by line while the whole stays within the budget."""

    def __init__(self, budget: int, topic: list[str]) -> None:
        self.budget = budget
        self.sections: dict[str, list[tuple[int, str]]] = {title: [] for title in SECTION_TITLES}
        self.sections["Topic"] = [(0, _shorten(line)) for line in topic if line]
        while self.sections["Topic"] and estimate_string_tokens(self.render()) > budget:
            text = self.sections["Topic"][0][1]
            halved = text[: len(text) // 2].rstrip()
            self.sections["Topic"] = [(0, halved + "…")] if len(text) > 8 else []

    def add(self, title: str, order: int, line: str) -> bool:
        """Add ``line`` if the summary stays within the budget; True if it was added."""
        self.sections[title].append((order, line))
        if estimate_string_tokens(self.render()) <= self.budget:
            return True
        self.sections[title].pop()
        return False

    def render(self) -> str:
        blocks = []
        for title in SECTION_TITLES:
            lines = [line for _, line in sorted(self.sections[title])] or ["- None noted."]
            blocks.append("\n".join([f"## {title}", *lines]))
        return "\n\n".join(blocks)


def _turns(conversation: str) -> list[_Turn]:
    turns: list[_Turn] = []
    for chunk in conversation.split(MESSAGE_SEPARATOR):
        first, _, rest = chunk.partition("\n")
        match = _ROLE_LINE.fullmatch(first)
        if match is not None:
            turns.append(_Turn(match.group(1)))
            body = rest
        else:  # a message whose own text held the separator: it goes on
            if not turns:
                turns.append(_Turn(""))
            body = chunk
        in_tool = False
        for line in body.split("\n"):
            tool = _TOOL_LINE.fullmatch(line)
            if tool is not None:
                turns[-1].tools.append(tool.group(1))
                in_tool = True
            elif in_tool and line.startswith(("Input: ", "Output: ")):
                continue
            else:
                in_tool = False
                turns[-1].lines.append(line)
    return turns


def _sentences(turns: list[_Turn]) -> list[_Sentence]:
    found: list[_Sentence] = []
    for turn in turns:
        for line in turn.lines:
            line = _MARKUP.sub("", line.strip())
            if not line or line.startswith("```"):
                continue
            for piece in _SENTENCE_END.split(line):
                text = _shorten(piece.strip())
                if text:
                    found.append(_Sentence(len(found), turn.role, text, _terms(text)))
    return found


def _terms(text: str) -> tuple[str, ...]:
    words = (w.lower().replace("’", "'") for w in _WORD.findall(text))
    return tuple(w for w in words if w not in _STOPWORDS and (len(w) > 2 or w.isdigit()))


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= SENTENCE_MAX_CHARS:
        return text
    return text[: SENTENCE_MAX_CHARS - 1].rsplit(" ", 1)[0] + "…"


def _normal(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def _bullet(text: str) -> str:
    return f"- {text}"


def _dedupe(lines: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    kept = []
    for line in lines:
        key = _normal(line)
        if key and key not in seen:
            seen.add(key)
            kept.append(line)
    return kept


def _sections(summary: str) -> dict[str, list[str]]:
    """The lines of each known section of a previous summary (hint lines and blanks left out)."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in summary.split("\n"):
        line = raw.strip()
        if line.startswith("## "):
            title = line[3:].strip()
            current = sections.setdefault(title, []) if title in SECTION_TITLES else None
        elif current is not None and line and line != "- None noted." and not _is_hint(line):
            current.append(line if line.startswith(("- ", "* ")) else _bullet(line))
    if "Topic" in sections:
        sections["Topic"] = [line.removeprefix("- ") for line in sections["Topic"]]
    return sections


def _is_hint(line: str) -> bool:
    return line.startswith("[") and line.endswith("]")


def _opening(sentences: list[_Sentence]) -> _Sentence | None:
    """The first user sentence of substance (else the first sentence): what it is about."""
    return next(
        (s for s in sentences if s.role == "user" and len(s.terms) >= 2),
        sentences[0] if sentences else None,
    )


def _topic(opening: _Sentence | None, frequency: Counter[str]) -> str:
    keywords = [term for term, _ in sorted(frequency.items(), key=lambda kv: (-kv[1], kv[0]))]
    parts = [opening.text] if opening is not None else []
    if keywords:
        parts.append(f"(key terms: {', '.join(keywords[:KEYWORDS])})")
    return " ".join(parts)


def _score(sentence: _Sentence, frequency: Counter[str]) -> float:
    unique = set(sentence.terms)
    return sum(frequency[term] for term in unique) / math.sqrt(len(unique) + 1)


def _ranked(
    sentences: list[_Sentence], frequency: Counter[str], exclude: set[str]
) -> list[_Sentence]:
    candidates = [
        s
        for s in sentences
        if len(s.terms) >= 3 and not s.text.endswith("?") and _normal(s.text) not in exclude
    ]
    candidates.sort(key=lambda s: (-_score(s, frequency), s.position))
    return candidates[:CANDIDATES]


def _current_state(turns: list[_Turn]) -> list[str]:
    lines = []
    for role, label in (("user", "Last user message"), ("assistant", "Last assistant reply")):
        turn = next((t for t in reversed(turns) if t.role == role and _text(t)), None)
        if turn is not None:
            lines.append(f"- {label}: {_first_sentences(_text(turn))}")
    return lines


def _text(turn: _Turn) -> str:
    return " ".join(" ".join(turn.lines).split())


def _first_sentences(text: str) -> str:
    """As many whole sentences of ``text`` as fit in ``STATE_MAX_CHARS`` (at least one)."""
    taken = ""
    for sentence in _SENTENCE_END.split(text):
        joined = f"{taken} {sentence}".strip()
        if taken and len(joined) > STATE_MAX_CHARS:
            break
        taken = joined
    return _shorten(taken)[: STATE_MAX_CHARS + 1]


def _open_items(sentences: list[_Sentence]) -> list[str]:
    return [
        _bullet(s.text)
        for s in sentences
        if (s.text.endswith("?") and s.role == "user") or _TODO.search(s.text)
    ]


def _tool_point(turns: list[_Turn]) -> list[str]:
    uses = Counter(name for turn in turns for name in turn.tools)
    if not uses:
        return []
    named = ", ".join(
        f"{name} ×{count}" if count > 1 else name
        for name, count in sorted(uses.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    return [f"- Tools used: {named}"]
