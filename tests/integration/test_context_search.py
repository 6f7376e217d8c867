"""Searchable context blocks through real sessions (spec Part A.5, §4.3, §9.3; §12.1
AgentSearchProvider FTS5, §12.3, §12.5 search after init): the event-sourced SearchBlock over the
full-text read model, user search providers, set_context indexing, and query robustness.
"""

from __future__ import annotations

import pytest
from support.providers import MemorySearch, ReadonlySearch, content_of
from support.read_models import drop_projection

from memstream import SearchBlock, Session, StaticContext
from memstream.client import Memstream
from memstream.domain.entry_keys import entry_key
from memstream.domain.errors import InvalidInputError
from memstream.workers.admin.rebuild import rebuild

# Every behaviour here holds on both read-model backends (issue 14).
pytestmark = pytest.mark.both_backends

SEP = "═" * 46
NO_RESULTS = "No results found."
CATS = "Cats are independent animals that purr when happy."
DOGS = "Dogs are loyal animals that bark at strangers."
RUNNER = "The runner was running fast, and she runs daily."


def knowledge_session(ms: Memstream, session_id: str, provider: object = None) -> Session:
    return (
        ms.session(session_id)
        .with_context("memory")
        .with_context(
            "knowledge",
            description="Docs",
            provider=provider if provider is not None else SearchBlock(),
        )
    )


async def index(session: Session, title: str | None, content: str, label: str = "knowledge") -> str:
    metadata = {"title": title} if title is not None else {}
    return await session.execute_tool(
        "set_context", {"label": label, "content": content, "metadata": metadata}
    )


async def search(session: Session, query: object, label: str = "knowledge") -> str:
    return await session.execute_tool("search_context", {"label": label, "query": query})


def hits(result: str) -> list[str]:
    """The entry keys of a search_context result, in rank order."""
    if result == NO_RESULTS:
        return []
    return [chunk.split("\n", 1)[0].strip("[]") for chunk in result.split("\n\n")]


async def test_search_block_renders_and_offers_search_and_set_context(ms: Memstream) -> None:
    session = knowledge_session(ms, "tools")
    # Given an empty search block, Then it renders with an empty body, marked searchable
    assert await session.freeze_system_prompt() == (
        f"{SEP}\nMEMORY [writable]\n{SEP}\n\n\n{SEP}\nKNOWLEDGE (Docs) [searchable]\n{SEP}\n"
    )
    # And it gets search_context, and set_context lists it as a keyed block
    tools = await session.tools()
    assert list(tools) == ["set_context", "search_context"]
    assert tools["search_context"].description == (
        "Search for information in a searchable context block. ONLY these blocks are "
        'searchable: "knowledge". Other blocks cannot be searched.'
    )
    assert tools["search_context"].parameters["properties"]["label"]["enum"] == ["knowledge"]
    assert '- "knowledge" (searchable, keyed entries): Docs' in tools["set_context"].description
    assert "metadata" in tools["set_context"].parameters["properties"]
    # And searching it before anything was indexed finds nothing
    assert await search(session, "anything") == NO_RESULTS


async def test_set_context_indexes_entries_that_search_context_finds(ms: Memstream) -> None:
    session = knowledge_session(ms, "indexing")
    frozen = await session.freeze_system_prompt()
    # When an entry is indexed with a title
    assert await index(session, "Cats", CATS) == 'Indexed "cats" in knowledge.'
    # Then the block's summary counts it (the frozen prompt does not change)
    block = session.get_context_block("knowledge")
    assert block is not None
    assert block.content == "1 entries indexed."
    assert await session.freeze_system_prompt() == frozen
    # And search_context finds it by one word, and by words that are not adjacent
    assert await search(session, "purr") == f"[cats]\n{CATS}"
    assert await search(session, "independent happy") == f"[cats]\n{CATS}"
    # And a query that matches nothing says so
    assert await search(session, "zebra") == NO_RESULTS
    assert await search(session, "purr zebra") == NO_RESULTS
    # When entries are indexed without a title, Then their key comes from the content
    key = entry_key(None, "Remember to water the plants")
    assert key == "remember-to-water-the-plants-1u2xin7"
    assert await index(session, None, "Remember to water the plants") == (
        f'Indexed "{key}" in knowledge.'
    )
    assert await index(session, "Dogs", DOGS) == 'Indexed "dogs" in knowledge.'
    assert content_of(session, "knowledge") == "3 entries indexed."
    assert await search(session, "plants") == f"[{key}]\nRemember to water the plants"
    # And several hits come back as "[key]\ncontent" joined by blank lines
    assert sorted((await search(session, "animals")).split("\n\n")) == [
        f"[cats]\n{CATS}",
        f"[dogs]\n{DOGS}",
    ]
    # And memory, a plain writable block, is still written as text
    assert await session.execute_tool("set_context", {"label": "memory", "content": "x"}) == (
        "Written to memory. Usage: 2 tokens"
    )


async def test_same_title_replaces_the_entry(ms: Memstream) -> None:
    session = knowledge_session(ms, "upsert")
    await index(session, "Pets", "cats purr")
    # When the same title is indexed with new text
    assert await index(session, "Pets", "felines sleep all day") == 'Indexed "pets" in knowledge.'
    # Then the old text is no longer found and the new one is, still one entry
    assert await search(session, "cats") == NO_RESULTS
    assert await search(session, "felines") == "[pets]\nfelines sleep all day"
    assert content_of(session, "knowledge") == "1 entries indexed."
    await ms.wait_for("context")
    assert ms.core.reads.context_queries.entry_count(ms.namespace, "knowledge") == 1


async def test_web_search_syntax(ms: Memstream) -> None:
    session = knowledge_session(ms, "syntax")
    for title, text in (("cats", CATS), ("dogs", DOGS), ("runner", RUNNER)):
        await index(session, title, text)
    # Quoted words are a phrase
    assert hits(await search(session, '"loyal animals"')) == ["dogs"]
    assert await search(session, '"animals loyal"') == NO_RESULTS
    # OR between terms is an alternative; terms are otherwise ANDed
    assert sorted(hits(await search(session, "purr OR bark"))) == ["cats", "dogs"]
    assert await search(session, "purr bark") == NO_RESULTS
    # -term excludes
    assert hits(await search(session, "animals -bark")) == ["cats"]
    assert hits(await search(session, 'animals -"loyal animals"')) == ["cats"]
    # Matching is stemmed and case-insensitive
    assert hits(await search(session, "run")) == ["runner"]
    assert hits(await search(session, "PURR")) == ["cats"]
    assert hits(await search(session, "Barking")) == ["dogs"]
    # A query of exclusions only, or of nothing searchable, finds nothing
    assert await search(session, "-cats") == NO_RESULTS
    assert await search(session, "") == NO_RESULTS
    assert await search(session, "   ") == NO_RESULTS


async def test_results_are_ranked_and_limited_to_ten(ms: Memstream) -> None:
    session = knowledge_session(ms, "ranking")
    # Given twelve entries mentioning "common", one of them many times
    for i in range(11):
        await index(session, f"entry {i:02d}", f"common word in a longer entry number {i} here")
    await index(session, "best", "common common common")
    # When searched
    result = await search(session, "common")
    # Then the best BM25 match comes first and at most ten entries come back
    keys = hits(result)
    assert keys[0] == "best"
    assert len(keys) == 10
    assert content_of(session, "knowledge") == "12 entries indexed."


QUERIES = [
    '"',
    '""',
    '"""',
    "*",
    "cats*",
    "NEAR(",
    "NEAR(cats dogs, 2)",
    "OR",
    "OR OR",
    "cats OR",
    "OR cats",
    "AND",
    "NOT",
    "cats AND NOT dogs",
    "-",
    "--",
    "- cats",
    "-cats -dogs",
    '"unbalanced quote',
    'cats"',
    'purr "and',
    "\x00",
    "cats\x00",
    "\x00purr",
    "purr\x00happy",
    "()",
    "(cats",
    "cats)",
    "{a b}",
    "text:cats",
    "scope:1",
    "^cats",
    "cats + dogs",
    "'",
    "\\",
    ";DROP TABLE search_entries;--",
    "💥",
    "ñandú über",
    "a" * 200,
    " ".join(["purr"] * 100),
]


async def test_search_never_fails_on_odd_queries(ms: Memstream) -> None:
    session = knowledge_session(ms, "robust")
    await index(session, "cats", CATS)
    await index(session, "dogs", DOGS)
    # When any odd query is searched
    for query in QUERIES:
        result = await search(session, query)
        # Then it is a result or "No results found.", never an error
        assert result == NO_RESULTS or result.startswith("["), (query, result)
    # And the FTS5 operators are plain words, not syntax
    assert await search(session, "NEAR(") == NO_RESULTS
    assert hits(await search(session, "\x00purr happy\x00")) == ["cats"]
    assert hits(await search(session, "independent\x00animals")) == ["cats"]  # joined: a phrase
    assert hits(await search(session, '"purr')) == ["cats"]
    assert hits(await search(session, "purr*")) == ["cats"]
    assert hits(await search(session, "(purr)")) == ["cats"]
    # And content with a NUL byte is indexed and returned intact
    await index(session, "nul", "alpha\x00beta gamma")
    assert await search(session, "gamma") == "[nul]\nalpha\x00beta gamma"
    # And the index still works afterwards
    assert hits(await search(session, "bark")) == ["dogs"]


async def test_search_context_errors_are_strings(ms: Memstream) -> None:
    session = knowledge_session(ms, "errors")
    # Unknown or non-searchable label
    assert await search(session, "x", label="memory") == (
        'Error: "memory" is not searchable. Searchable blocks: knowledge'
    )
    assert await search(session, "x", label=None) == (  # type: ignore[arg-type]
        'Error: "None" is not searchable. Searchable blocks: knowledge'
    )
    # Query of the wrong type or missing
    assert (await search(session, 42)).startswith("Error: ")
    assert (await session.execute_tool("search_context", {"label": "knowledge"})).startswith(
        "Error: "
    )
    # A query over 4 KiB matches nothing (any string is a query, spec Part A.5)
    assert await search(session, "purr " * 1000) == NO_RESULTS
    # Indexing bad content is refused without writing
    assert (
        await session.execute_tool(
            "set_context", {"label": "knowledge", "content": None, "metadata": {"title": "t"}}
        )
    ).startswith("Error: ")
    await ms.wait_for("context")
    assert ms.core.reads.context_queries.entry_count(ms.namespace, "knowledge") == 0


async def test_read_only_search_provider_gets_search_context_only(ms: Memstream) -> None:
    # Given a user search provider without set
    session = ms.session("ro-search").with_context(
        "archive", description="Old notes", provider=ReadonlySearch({"trip": "Paris in May"})
    )
    # Then it renders its summary as searchable, with search_context but no set_context
    assert await session.freeze_system_prompt() == (
        f"{SEP}\nARCHIVE (Old notes) [searchable]\n{SEP}\n1 entries indexed."
    )
    tools = await session.tools()
    assert list(tools) == ["search_context"]
    assert await search(session, "paris", label="archive") == "[trip]\nParis in May"
    assert await search(session, "london", label="archive") == NO_RESULTS


async def test_no_search_provider_means_no_search_context(ms: Memstream) -> None:
    session = (
        ms.session("no-search")
        .with_context("memory")
        .with_context("soul", provider=StaticContext("x"))
    )
    assert list(await session.tools()) == ["set_context"]
    assert await search(session, "x") == (
        'Error: unknown tool "search_context". Available tools: set_context'
    )


async def test_user_search_provider_indexes_through_set(ms: Memstream) -> None:
    # Given an in-memory search provider with set
    provider = MemorySearch()
    session = knowledge_session(ms, "user-search", provider)
    # When set_context indexes an entry without a title
    reply = await index(session, None, "Deploy on Fridays")
    # Then the provider stored it under the derived key, and the summary was refreshed
    key = entry_key(None, "Deploy on Fridays")
    assert reply == f'Indexed "{key}" in knowledge.'
    assert provider.entries == {key: "Deploy on Fridays"}
    assert content_of(session, "knowledge") == "1 entries indexed."
    # And search_context returns the provider's answer, or "No results found." for None
    assert await search(session, "fridays") == f"[{key}]\nDeploy on Fridays"
    assert await search(session, "mondays") == NO_RESULTS
    # And nothing went to the built-in search index
    await ms.wait_for("context")
    assert ms.core.reads.context_queries.entry_count(ms.namespace, "knowledge") == 0


async def test_search_block_keys_share_or_isolate_entries(ms: Memstream) -> None:
    # Given two sessions whose blocks use the same explicit key, and two labels with default keys
    writer = knowledge_session(ms, "kb-writer", SearchBlock(key="team-kb"))
    reader = ms.session("kb-reader").with_context("facts", provider=SearchBlock(key="team-kb"))
    one = ms.session("labels").with_context("one", provider=SearchBlock())
    one.with_context("two", provider=SearchBlock())
    # When entries are indexed
    await index(writer, "Cats", CATS)
    await index(one, "Dogs", DOGS, label="one")
    # Then the same key is one knowledge base, whatever the label or session
    assert await search(reader, "purr", label="facts") == f"[cats]\n{CATS}"
    assert await reader.freeze_system_prompt() == (
        f"{SEP}\nFACTS [searchable]\n{SEP}\n1 entries indexed."
    )
    # And a default key is the block's label: other labels do not see the entry
    assert hits(await search(one, "bark", label="one")) == ["dogs"]
    assert await search(one, "bark", label="two") == NO_RESULTS
    assert await search(one, "purr", label="one") == NO_RESULTS


async def test_search_block_needs_a_session_and_a_key() -> None:
    # A SearchBlock not added to a session has nowhere to read from
    with pytest.raises(InvalidInputError, match="not attached"):
        await SearchBlock(key="kb").get()
    with pytest.raises(InvalidInputError):
        SearchBlock(key="")


async def test_search_entries_come_back_after_a_rebuild(ms: Memstream) -> None:
    # Given indexed entries, one of them replaced
    session = knowledge_session(ms, "replay")
    await index(session, "Cats", "cats purr")
    await index(session, "Cats", CATS)
    await index(session, "Dogs", DOGS)
    await ms.wait_for("context")
    # When the context read model is dropped and rebuilt from the log
    drop_projection(ms.core.reads.copy, "context")
    assert ms.core.reads.context_queries.entry_count(ms.namespace, "knowledge") == 0
    await rebuild(ms.core.log, ms.core.reads.copy, ["context"])
    # Then the entries are back, with their latest content only
    assert ms.core.reads.context_queries.entry_count(ms.namespace, "knowledge") == 2
    fresh = knowledge_session(ms, "replay")
    assert hits(await search(fresh, "animals -bark")) == ["cats"]
    assert hits(await search(fresh, "bark")) == ["dogs"]
    assert await search(fresh, '"cats purr"') == NO_RESULTS
    assert content_of(fresh, "knowledge") == "2 entries indexed."
