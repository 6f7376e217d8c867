"""The one search syntax: parsing, compiling to FTS5, and "never a database error"."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memstream.domain.errors import InvalidInputError
from memstream.domain.limits import SEARCH_QUERY_MAX_BYTES, search_query
from memstream.projections.search_query import (
    MAX_CLAUSES,
    Clause,
    Phrase,
    SearchQuery,
    parse,
    to_fts5,
    to_tsquery_parts,
    words,
)

CORPUS = {
    1: "I love TypeScript",
    2: "Remember: deploy to production on Fridays",
    3: "Python is great for scripting",
    4: "We deployed the Python service to production",
    5: "cats and dogs",
}


def _fts() -> sqlite3.Connection:
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE VIRTUAL TABLE t USING fts5(text, tokenize = 'porter unicode61')")
    connection.executemany("INSERT INTO t (rowid, text) VALUES (?, ?)", CORPUS.items())
    return connection


@pytest.fixture
def fts() -> Iterator[sqlite3.Connection]:
    connection = _fts()
    yield connection
    connection.close()


def hits(connection: sqlite3.Connection, query: str) -> set[int]:
    expression = to_fts5(query)
    if expression is None:
        return set()
    rows = connection.execute("SELECT rowid FROM t WHERE t MATCH ?", (expression,))
    return {row[0] for row in rows}


# -- parsing ------------------------------------------------------------------------------------


def test_words_split_like_unicode61() -> None:
    assert words("Hello, world! it's 2024-01") == ["Hello", "world", "it", "s", "2024", "01"]
    assert words("naïve café über") == ["naïve", "café", "über"]
    assert words("😀 *** ^:{}") == []


def test_terms_are_anded() -> None:
    # Given two bare terms
    # When parsed
    # Then two positive one-word clauses
    assert parse("deploy production") == SearchQuery(
        (Clause((Phrase(("deploy",)),)), Clause((Phrase(("production",)),)))
    )
    assert to_fts5("deploy production") == '"deploy" AND "production"'


def test_quoted_words_are_a_phrase() -> None:
    assert parse('"deploy to production"') == SearchQuery(
        (Clause((Phrase(("deploy", "to", "production")),)),)
    )
    assert to_fts5('"deploy to production" friday') == '"deploy to production" AND "friday"'


def test_or_joins_neighbouring_terms_or_phrases() -> None:
    assert to_fts5("cats OR dogs") == '("cats" OR "dogs")'
    assert to_fts5('python OR "type script" OR rust deploy') == (
        '("python" OR "type script" OR "rust") AND "deploy"'
    )


def test_minus_excludes() -> None:
    assert to_fts5("python -service") == '("python") NOT "service"'
    assert to_fts5('python -"the service" -x') == '(("python") NOT "the service") NOT "x"'


def test_lowercase_or_and_operators_are_plain_words() -> None:
    # FTS5 keywords are only keywords when written in capitals; here everything is a word
    assert to_fts5("cats or dogs") == '"cats" AND "or" AND "dogs"'
    assert to_fts5("cats AND dogs") == '"cats" AND "AND" AND "dogs"'
    assert to_fts5("NOT cats") == '"NOT" AND "cats"'
    assert to_fts5("NEAR(cats dogs)") == '"NEAR cats" AND "dogs"'


@pytest.mark.parametrize(
    "query",
    ["", "   ", '"', '""', '" "', "-", "--", "OR", "OR OR", "*", "^", ":", "()", "😀", "\x00",
     "-cats", '-"cats dogs"', "-cats -dogs", "- - -", "\u00ad"],
)  # fmt: skip
def test_nothing_searchable_compiles_to_none(query: str) -> None:
    # Only exclusions, operators, punctuation or emoji → no query (no results)
    assert parse(query) is None
    assert to_fts5(query) is None
    assert to_tsquery_parts(query) is None


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ('"unbalanced phrase', '"unbalanced phrase"'),
        ('a "b c', '"a" AND "b c"'),
        ("text:foo", '"text foo"'),
        ("{a b}", '"a" AND "b"'),
        ("^start", '"start"'),
        ("pre*", '"pre"'),
        ("col:val OR x", '("col val" OR "x")'),
        ("a\x00b", '"a b"'),
        ("a \x00 b", '"a" AND "b"'),
        ("cats OR", '"cats"'),
        ("OR cats", '"cats"'),
        ("cats OR -dogs", '("cats") NOT "dogs"'),
        ("- cats", '"cats"'),
        ('say "it\'s" ok', '"say" AND "it s" AND "ok"'),
        ("😀 cats 🐈", '"cats"'),
    ],
)
def test_fts5_syntax_is_never_passed_through(query: str, expected: str) -> None:
    assert to_fts5(query) == expected


def test_clause_count_is_capped() -> None:
    # Given far more terms than the cap
    query = " ".join(f"w{i}" for i in range(200))
    # Then only the first MAX_CLAUSES are kept
    parsed = parse(query)
    assert parsed is not None
    assert len(parsed.clauses) == MAX_CLAUSES
    assert parsed.clauses[-1] == Clause((Phrase((f"w{MAX_CLAUSES - 1}",)),))


def test_tsquery_parts_keep_phrases_as_parameters() -> None:
    assert to_tsquery_parts('cats OR "big dogs" -mice') == [
        (["cats", "big dogs"], False),
        (["mice"], True),
    ]


# -- semantics on a real FTS5 table -------------------------------------------------------------


def test_stemmed_and_case_insensitive(fts: sqlite3.Connection) -> None:
    assert hits(fts, "typescript") == {1}
    assert hits(fts, "TYPESCRIPT") == {1}
    assert hits(fts, "friday") == {2}
    assert hits(fts, "deploying") == {2, 4}


def test_and_is_not_adjacency(fts: sqlite3.Connection) -> None:
    # Unlike the reference's whole-query phrase, terms need not be adjacent
    assert hits(fts, "deploy production") == {2, 4}
    assert hits(fts, '"deploy production"') == set()
    assert hits(fts, '"deploy to production"') == {2}


def test_or_and_exclusion(fts: sqlite3.Connection) -> None:
    assert hits(fts, "typescript OR python") == {1, 3, 4}
    assert hits(fts, "python -production") == {3}
    assert hits(fts, "production -python -friday") == set()
    assert hits(fts, "cats OR typescript -love") == {5}


def test_no_match(fts: sqlite3.Connection) -> None:
    assert hits(fts, "elephant") == set()
    assert hits(fts, "typescript elephant") == set()


@pytest.mark.parametrize(
    "query",
    ['"', '*', "NEAR(", "NEAR(a b, 2)", "OR", "-", '"unbalanced', "AND", "NOT", "^", ":",
     "text:foo", "{a b}", "😀", "\x00", "a" * 10_000, "OR " * 3000, '"' * 999, "a OR " * 2000,
     "(((((", ")))", "a:b:c", "+x", "a -", "-\"\"", "\\", "'", "`", "[x]", "x AND NOT y"],
)  # fmt: skip
def test_awkward_queries_are_valid_fts5(fts: sqlite3.Connection, query: str) -> None:
    # When any awkward text is searched, FTS5 accepts the compiled expression
    hits(fts, query)


# -- property: any text compiles to None or to an expression FTS5 accepts ------------------------

_FTS = _fts()

_alphabet = st.one_of(
    st.sampled_from([*"\"-*^:(){}[]+ \t\n\x00.,'\\", "OR", "AND", "NOT", "NEAR", "NEAR("]),
    st.characters(),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), st.lists(_alphabet, max_size=40).map("".join)))
def test_any_text_compiles_to_none_or_valid_fts5(query: str) -> None:
    expression = to_fts5(query)
    if expression is None:
        assert parse(query) is None
        return
    # Then FTS5 parses and runs it (raising sqlite3.OperationalError would fail the test)
    _FTS.execute("SELECT count(*) FROM t WHERE t MATCH ?", (expression,)).fetchone()


def test_any_string_is_a_query_and_over_4_kib_matches_nothing() -> None:
    # A string up to the limit is searched as given; one byte more matches nothing
    assert search_query("a" * SEARCH_QUERY_MAX_BYTES) == "a" * SEARCH_QUERY_MAX_BYTES
    assert search_query("a" * (SEARCH_QUERY_MAX_BYTES + 1)) is None
    assert search_query("é" * (SEARCH_QUERY_MAX_BYTES // 2)) == "é" * (SEARCH_QUERY_MAX_BYTES // 2)
    assert search_query("é" * (SEARCH_QUERY_MAX_BYTES // 2) + "a") is None  # counted in bytes
    # A lone surrogate becomes U+FFFD characters, which separate words like any non-letter
    cleaned = search_query("cat\ud800dog")
    assert cleaned == "cat\ufffd\ufffd\ufffddog"  # one per byte of its 3-byte encoding
    assert words(cleaned) == ["cat", "dog"]
    # Only a non-string is refused, by name
    with pytest.raises(InvalidInputError, match="query must be a string, not int"):
        search_query(42)
