"""The one search syntax (web-search style) compiled for SQLite FTS5 and PostgreSQL tsquery.

Syntax: terms are ANDed; ``"quoted words"`` is a phrase; ``OR`` between two terms or phrases
makes an alternative; ``-term`` or ``-"a phrase"`` excludes. Every input string compiles to a
valid query or to ``None`` (no results): user text never reaches FTS5 or tsquery unescaped.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

MAX_CLAUSES = 32

# unicode61 token characters: letters, numbers, and private-use code points.
_TOKEN_CATEGORIES = frozenset({"Lu", "Ll", "Lt", "Lm", "Lo", "Nd", "Nl", "No", "Co", "Mn", "Mc"})


def _is_token_char(char: str) -> bool:
    return unicodedata.category(char) in _TOKEN_CATEGORIES


def words(text: str) -> list[str]:
    """Split text the way FTS5's unicode61 tokenizer does (letters, digits, marks)."""
    out: list[str] = []
    current: list[str] = []
    for char in text:
        if _is_token_char(char):
            current.append(char)
        elif current:
            out.append("".join(current))
            current = []
    if current:
        out.append("".join(current))
    return out


@dataclass(frozen=True, slots=True)
class Phrase:
    """One or more adjacent words (a single word is a one-word phrase)."""

    words: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Clause:
    """Alternatives joined by OR; ``negated`` clauses exclude documents."""

    alternatives: tuple[Phrase, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """A parsed query: all positive clauses must match, no negative clause may."""

    clauses: tuple[Clause, ...]

    @property
    def positive(self) -> tuple[Clause, ...]:
        return tuple(c for c in self.clauses if not c.negated)

    @property
    def negative(self) -> tuple[Clause, ...]:
        return tuple(c for c in self.clauses if c.negated)


def _lex(query: str) -> list[tuple[str, str, bool]]:
    """Split into (kind, text, negated) items: kind is "phrase", "word" or "or"."""
    items: list[tuple[str, str, bool]] = []
    index, length = 0, len(query)
    while index < length:
        char = query[index]
        if char.isspace() or char == "\x00":
            index += 1
            continue
        negated = False
        if char == "-" and index + 1 < length and not query[index + 1].isspace():
            negated = True
            index += 1
            char = query[index]
        if char == '"':
            end = query.find('"', index + 1)
            if end == -1:  # unbalanced quote: the rest is the phrase
                end = length
            items.append(("phrase", query[index + 1 : end], negated))
            index = end + 1
            continue
        end = index
        while end < length and not query[end].isspace() and query[end] != '"':
            end += 1
        text = query[index:end]
        if text == "OR" and not negated:
            items.append(("or", text, False))
        else:
            items.append(("word", text, negated))
        index = end
    return items


def parse(query: str) -> SearchQuery | None:
    """Parse web-search syntax; ``None`` when nothing searchable remains."""
    clauses: list[Clause] = []
    pending_or = False
    for kind, text, negated in _lex(query):
        if kind == "or":
            pending_or = bool(clauses) and not clauses[-1].negated
            continue
        tokens = tuple(words(text))
        if not tokens:
            continue
        phrase = Phrase(tokens)
        if pending_or and not negated:
            last = clauses[-1]
            clauses[-1] = Clause((*last.alternatives, phrase), False)
        else:
            clauses.append(Clause((phrase,), negated))
        pending_or = False
    clauses = clauses[:MAX_CLAUSES]
    if not any(not c.negated for c in clauses):
        return None
    return SearchQuery(tuple(clauses))


def _fts5_phrase(phrase: Phrase) -> str:
    return '"' + " ".join(w.replace('"', '""') for w in phrase.words) + '"'


def _fts5_clause(clause: Clause) -> str:
    if len(clause.alternatives) == 1:
        return _fts5_phrase(clause.alternatives[0])
    return "(" + " OR ".join(_fts5_phrase(p) for p in clause.alternatives) + ")"


def to_fts5(query: str) -> str | None:
    """Compile to an FTS5 MATCH expression, or ``None`` for no results."""
    parsed = parse(query)
    if parsed is None:
        return None
    expression = " AND ".join(_fts5_clause(c) for c in parsed.positive)
    for clause in parsed.negative:
        expression = f"({expression}) NOT {_fts5_clause(clause)}"
    return expression


def to_tsquery_parts(query: str) -> list[tuple[list[str], bool]] | None:
    """Clauses for PostgreSQL: each is (phrases joined by OR, negated); phrases are word lists
    to be passed as parameters to ``phraseto_tsquery`` (never spliced into SQL)."""
    parsed = parse(query)
    if parsed is None:
        return None
    return [([" ".join(p.words) for p in c.alternatives], c.negated) for c in parsed.clauses]
