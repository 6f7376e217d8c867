"""``Session.search``: one web-search syntax over the message FTS read model (spec Part A §5, §4.1).

Terms are ANDed and stemmed, ``"quoted words"`` are phrases, ``OR`` between terms, ``-term``
excludes; results are ``[{id, role, content, created_at}]`` ranked best first.
"""

from __future__ import annotations

from datetime import datetime

import pytest
from support.messages import msg

from memstream.client import Memstream
from memstream.domain.errors import InvalidInputError
from memstream.session import Session

# Every behaviour here holds on both read-model backends (issue 14).
pytestmark = pytest.mark.both_backends


async def found(session: Session, query: str, limit: int = 20) -> list[str]:
    return [hit["id"] for hit in await session.search(query, limit)]


@pytest.fixture
async def corpus(ms: Memstream) -> Session:
    """A session with a few messages (the reference corpus plus neighbours)."""
    session = ms.session("search")
    await session.append_messages(
        [
            msg("ts", "I love TypeScript", "user"),
            msg("fri", "Remember: deploy to production on Fridays", "assistant"),
            msg("py", "We deployed the Python service to production", "user"),
            msg("pets", "cats and dogs", "user"),
        ]
    )
    return session


async def test_typescript_is_found_with_the_result_shape(corpus: Session) -> None:
    # When "TypeScript" is searched
    results = await corpus.search("TypeScript")
    # Then at least one result contains it, with exactly id, role, content, created_at
    assert len(results) >= 1
    hit = results[0]
    assert set(hit) == {"id", "role", "content", "created_at"}
    assert "TypeScript" in hit["content"]
    assert (hit["id"], hit["role"]) == ("ts", "user")
    assert isinstance(hit["created_at"], str)
    assert datetime.fromisoformat(hit["created_at"]).tzinfo is not None


async def test_terms_are_anded_stemmed_and_case_insensitive(corpus: Session) -> None:
    assert await found(corpus, "typescript") == ["ts"]
    assert await found(corpus, "TYPESCRIPT") == ["ts"]
    assert await found(corpus, "friday") == ["fri"]
    assert await found(corpus, "Fridays") == ["fri"]
    assert sorted(await found(corpus, "deploying")) == ["fri", "py"]
    # Terms need not be adjacent (unlike the reference's whole-query phrase)
    assert sorted(await found(corpus, "deploy production")) == ["fri", "py"]
    assert sorted(await found(corpus, "production deploy")) == ["fri", "py"]
    assert await found(corpus, "python production") == ["py"]
    assert await found(corpus, "typescript production") == []


async def test_phrases_or_and_exclusion(corpus: Session) -> None:
    assert await found(corpus, '"deploy to production"') == ["fri"]
    assert await found(corpus, '"deploy production"') == []
    assert sorted(await found(corpus, "typescript OR python")) == ["py", "ts"]
    assert sorted(await found(corpus, '"love typescript" OR cats')) == ["pets", "ts"]
    assert await found(corpus, "production -python") == ["fri"]
    assert await found(corpus, 'production -"python service"') == ["fri"]
    assert await found(corpus, "production -python -friday") == []
    # Lowercase "or" is an ordinary word
    assert await found(corpus, "typescript or python") == []


async def test_queries_with_nothing_searchable_return_nothing(corpus: Session) -> None:
    for query in ["", "   ", '""', "-typescript", "OR", "😀", "*", "-"]:
        assert await corpus.search(query) == [], query


async def test_results_are_ranked_and_limited(ms: Memstream) -> None:
    session = ms.session("ranking")
    # Given messages with different densities of "deploy"
    await session.append_messages(
        [
            msg("weak", "deploy " + "filler " * 40),
            msg("strong", "deploy deploy deploy now"),
            msg("none", "unrelated words"),
            msg("mid", "deploy deploy with filler filler filler"),
        ]
    )
    # Then BM25 order is best first, and limit cuts the tail
    assert await found(session, "deploy") == ["strong", "mid", "weak"]
    assert await found(session, "deploy", limit=2) == ["strong", "mid"]
    assert await found(session, "deploy", limit=1) == ["strong"]


async def test_default_limit_is_20(ms: Memstream) -> None:
    session = ms.session("many")
    # Given 30 matching messages
    await session.append_messages([msg(f"m{i}", f"needle number {i}") for i in range(30)])
    # Then the default limit returns 20, and an explicit limit more
    assert len(await session.search("needle")) == 20
    assert len(await session.search("needle", limit=30)) == 30


async def test_search_is_scoped_to_the_session(ms: Memstream) -> None:
    a, b = ms.session("scope-a"), ms.session("scope-b")
    # Given "TypeScript" in a and "Python" in b, and the same id in both
    await a.append_message(msg("m1", "I love TypeScript"))
    await b.append_message(msg("m1", "I love Python"))
    # Then each session finds only its own
    assert await found(a, "typescript") == ["m1"]
    assert await found(a, "python") == []
    assert [h["content"] for h in await b.search("love")] == ["I love Python"]


async def test_only_text_parts_are_searchable_and_content_is_their_text(ms: Memstream) -> None:
    session = ms.session("parts")
    # Given a message with text, reasoning and tool parts
    await session.append_message(
        {
            "id": "m1",
            "role": "assistant",
            "parts": [
                {"type": "text", "text": "visible words"},
                {"type": "reasoning", "text": "secret reasoning"},
                {"type": "tool-lookup", "input": {"q": "toolquery"}, "output": "tooloutput"},
                {"type": "text", "text": "more visible"},
            ],
        }
    )
    # Then content is the text parts joined by a space; other parts are not indexed
    (hit,) = await session.search("visible")
    assert hit["content"] == "visible words more visible"
    assert hit["role"] == "assistant"
    for hidden in ("secret", "reasoning", "toolquery", "tooloutput"):
        assert await session.search(hidden) == [], hidden


async def test_update_delete_and_clear_keep_the_index_in_step(ms: Memstream) -> None:
    session = ms.session("reindex")
    # Given two messages
    await session.append_message(msg("m1", "original wording"))
    await session.append_message(msg("m2", "another original"))
    # When m1 is updated
    await session.update_message(msg("m1", "rewritten wording"))
    # Then the old text is gone from search and the new text is found
    assert await found(session, "original") == ["m2"]
    assert await found(session, "rewritten") == ["m1"]
    # When m1 is updated to parts without text, it is no longer searchable
    await session.update_message({"id": "m1", "role": "user", "parts": [{"type": "image"}]})
    assert await found(session, "wording") == []
    # When m2 is deleted, it is no longer found
    await session.delete_messages(["m2"])
    assert await found(session, "original") == []
    # When the session is cleared, nothing is found
    await session.append_message(msg("m3", "final words"))
    await session.clear_messages()
    assert await found(session, "final") == []


async def test_unicode_and_emoji_text(ms: Memstream) -> None:
    session = ms.session("unicode")
    await session.append_message(msg("m1", "Grüße aus Köln 😀 naïve café"))
    assert await found(session, "köln") == ["m1"]
    assert await found(session, "grüße café") == ["m1"]
    assert await found(session, "😀 köln") == ["m1"]


async def test_bad_limits_and_queries_are_invalid_input(corpus: Session) -> None:
    for limit in (0, -1, 501, True, 2.5, "5", None):
        with pytest.raises(InvalidInputError, match="limit"):
            await corpus.search("typescript", limit)  # type: ignore[arg-type]
    for query in (None, 5, b"typescript", ["typescript"]):
        with pytest.raises(InvalidInputError, match="query"):
            await corpus.search(query)  # type: ignore[arg-type]
    # A 500-limit search is fine
    assert await found(corpus, "typescript", limit=500) == ["ts"]
