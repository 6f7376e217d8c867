"""Context blocks, the frozen system prompt and set_context through real sessions (spec §2, §6,
§9.1; §12.1 ContextBlocks / tools() / builder / edge cases / multi-session prompt / Session tools
and context; §12.5 init lifecycle).

Every test runs against a real nats-server with the projector in-process. Block writes, prompt
freezes and refreshes are events on the log; reads wait for the client's own last write.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.messages import msg
from support.providers import (
    AsyncMemoryProvider,
    CountingProvider,
    MemoryProvider,
    MemorySearch,
    MemorySkills,
    ReadonlyProvider,
    RecordingProvider,
    RecordingSearch,
    RecordingSkills,
    RecordingWritable,
    content_of,
)
from support.read_models import drop_projection

from memstream import ContextBlock, Session, StaticContext
from memstream.client import Memstream, open_memstream
from memstream.domain.errors import InvalidInputError, NotFoundError
from memstream.projections.read_models import open_read_models
from memstream.settings import Settings
from memstream.workers.admin.rebuild import rebuild

# Every behaviour here holds on both read-model backends (issue 14).
pytestmark = pytest.mark.both_backends

SEP = "═" * 46
WORKED_EXAMPLE = (
    f"{SEP}\nSOUL (Identity) [readonly]\n{SEP}\nYou are helpful.\n\n"
    f"{SEP}\nMEMORY (Learned facts) [0% — 5/1100 tokens] [writable]\n{SEP}\nUser likes coffee."
)


def soul_and_memory(ms: Memstream, session_id: str) -> Session:
    """The reference's soul (read-only) + memory (built-in, writable) session, prompt cached."""
    return (
        ms.session(session_id)
        .with_context("soul", description="Identity", provider=StaticContext("You are helpful."))
        .with_context("memory", description="Learned facts", max_tokens=1100)
        .with_cached_prompt()
    )


async def cached_prompt(ms: Memstream, session_id: str) -> str | None:
    await ms.wait_for("context")
    return ms.core.reads.context_queries.cached_prompt(ms.namespace, session_id)


async def stored_keys(ms: Memstream) -> list[str]:
    await ms.wait_for("context")
    return [b["key"] for b in ms.core.reads.context_queries.blocks(ms.namespace)]


# -- the rendered prompt ---------------------------------------------------------------------------


async def test_worked_prompt_example_byte_for_byte(ms: Memstream) -> None:
    # Given the reference's soul + memory session
    session = soul_and_memory(ms, "worked")
    # When memory learns a fact and the prompt is frozen
    block = await session.replace_context_block("memory", "User likes coffee.")
    prompt = await session.freeze_system_prompt()
    # Then the prompt is the worked example of §6.6, byte for byte
    assert prompt == WORKED_EXAMPLE
    assert "<context_block" not in prompt
    # And the written block reports its tokens and budget
    assert block == ContextBlock(
        "memory",
        "User likes coffee.",
        description="Learned facts",
        max_tokens=1100,
        writable=True,
    )
    assert block.tokens == 5
    # And both blocks are loaded now
    assert [b.label for b in session.get_context_blocks()] == ["soul", "memory"]
    # And the frozen prompt is on the log: the read model holds the same string
    assert await cached_prompt(ms, "worked") == WORKED_EXAMPLE


async def test_minimal_session_works_without_any_configuration(ms: Memstream) -> None:
    # Given a session built with nothing
    session = ms.session("minimal")
    assert isinstance(session, Session)
    # Then its history is empty, nothing is loaded, the prompt is empty and it has no tools
    assert await session.get_history() == []
    assert session.get_context_blocks() == []
    assert session.get_context_block("memory") is None
    assert await session.freeze_system_prompt() == ""
    assert await session.tools() == {}
    assert session.get_loaded_skill_keys() == set()


async def test_empty_blocks_render_by_kind_and_readonly_empty_ones_vanish(ms: Memstream) -> None:
    # Given an empty read-only block, an empty built-in block, a user block returning None,
    # an empty skill provider and an empty search provider
    session = (
        ms.session("empties")
        .with_context("gone", provider=StaticContext(None))
        .with_context("alsogone", provider=ReadonlyProvider(""))
        .with_context("notes")
        .with_context("memory", provider=MemoryProvider(None))
        .with_context("skills", provider=MemorySkills())
        .with_context("knowledge", description="Docs", provider=MemorySearch())
    )
    # When the prompt is frozen
    prompt = await session.freeze_system_prompt()
    # Then empty read-only blocks vanish and the others render with an empty body
    assert prompt == (
        f"{SEP}\nNOTES [writable]\n{SEP}\n\n\n"
        f"{SEP}\nMEMORY [writable]\n{SEP}\n\n\n"
        f"{SEP}\nSKILLS [loadable]\n{SEP}\n\n\n"
        f"{SEP}\nKNOWLEDGE (Docs) [searchable]\n{SEP}\n"
    )
    # And every configured block is loaded, empty ones included
    assert [b.content for b in session.get_context_blocks()] == [""] * 6


# -- the builder -----------------------------------------------------------------------------------


async def test_builder_methods_chain_and_order_does_not_matter(ms: Memstream) -> None:
    # Given with_context before for_session, and another session the other way round
    late = ms.session().with_context("memory").for_session("xyz").with_cached_prompt()
    early = ms.session().for_session("abc").with_context("memory")
    builder = ms.session("chain")
    assert builder.with_context("a") is builder
    assert builder.for_session("chain") is builder
    assert builder.with_cached_prompt() is builder
    # When each writes through the set_context tool and late freezes its prompt
    assert await late.execute_tool("set_context", {"label": "memory", "content": "x"}) == (
        "Written to memory. Usage: 2 tokens"
    )
    await early.execute_tool("set_context", {"label": "memory", "content": "y"})
    prompt = await late.freeze_system_prompt()
    # Then the blocks are stored under label_<session id>, and never under the bare label
    assert await stored_keys(ms) == ["memory_abc", "memory_xyz"]
    rows = {b["key"]: b for b in ms.core.reads.context_queries.blocks(ms.namespace)}
    assert (rows["memory_xyz"]["label"], rows["memory_xyz"]["session_id"]) == ("memory", "xyz")
    assert rows["memory_xyz"]["content"] == "x"
    assert ms.core.reads.context_queries.block_content(ms.namespace, "memory", "abc") == "y"
    assert ms.core.reads.context_queries.block_content(ms.namespace, "memory", "") is None
    # And the cached prompt belongs to session xyz only
    assert await cached_prompt(ms, "xyz") == prompt
    assert await cached_prompt(ms, "") is None
    assert prompt == f"{SEP}\nMEMORY [writable]\n{SEP}\nx"


async def test_default_session_uses_bare_keys_and_caches_its_prompt(ms: Memstream) -> None:
    # Given the default session with a built-in block and a cached prompt
    session = ms.session().with_context("memory").with_cached_prompt()
    # When the block is written and the prompt frozen twice
    await session.execute_tool("set_context", {"label": "memory", "content": "likes tea"})
    first = await session.freeze_system_prompt()
    second = await session.freeze_system_prompt()
    # Then the block is stored under "memory", and the prompt under the default session
    assert await stored_keys(ms) == ["memory"]
    assert ms.core.reads.context_queries.blocks(ms.namespace)[0]["session_id"] in (None, "")
    assert first == second == f"{SEP}\nMEMORY [writable]\n{SEP}\nlikes tea"
    assert await cached_prompt(ms, "") == first


async def test_builder_refuses_configuration_after_first_use(ms: Memstream) -> None:
    # Given a session whose context was used
    session = ms.session("used").with_context("memory")
    await session.freeze_system_prompt()
    # Then it can no longer be reconfigured (use add_context instead)
    with pytest.raises(InvalidInputError):
        session.with_context("notes")
    with pytest.raises(InvalidInputError):
        session.for_session("other")
    with pytest.raises(InvalidInputError):
        session.with_cached_prompt()
    assert session.session_id == "used"


# -- freeze / refresh / persistence ----------------------------------------------------------------


async def test_block_writes_never_change_the_frozen_prompt_until_refresh(ms: Memstream) -> None:
    # Given a frozen prompt
    session = soul_and_memory(ms, "frozen")
    await session.replace_context_block("memory", "User likes coffee.")
    frozen = await session.freeze_system_prompt()
    # When the block changes by replace, append, and the set_context tool
    await session.replace_context_block("memory", "User likes tea.")
    await session.append_context_block("memory", "User has a cat.")
    reply = await session.execute_tool(
        "set_context", {"label": "memory", "content": "User is vegan.", "action": "append"}
    )
    assert reply == "Written to memory. Usage: 1% (13/1100 tokens)"
    # Then the frozen prompt is unchanged, in memory and on the log
    assert await session.freeze_system_prompt() == frozen == WORKED_EXAMPLE
    assert await cached_prompt(ms, "frozen") == frozen
    # But the blocks hold the new content
    assert len(session.get_context_blocks()) == 2
    current = "User likes tea.\nUser has a cat.\nUser is vegan."
    block = session.get_context_block("memory")
    assert block is not None
    assert block.content == current
    # When the prompt is refreshed
    refreshed = await session.refresh_system_prompt()
    # Then it shows the new content and becomes the frozen prompt
    assert refreshed != frozen
    assert refreshed.endswith(f"[1% — 13/1100 tokens] [writable]\n{SEP}\n{current}")
    assert "User likes coffee." not in refreshed
    assert await session.freeze_system_prompt() == refreshed
    assert await cached_prompt(ms, "frozen") == refreshed


async def test_frozen_prompt_is_shared_by_new_session_objects_and_clients(
    ms: Memstream, settings: Settings
) -> None:
    # Given a frozen prompt of session "shared"
    session = soul_and_memory(ms, "shared")
    await session.replace_context_block("memory", "User likes coffee.")
    frozen = await session.freeze_system_prompt()
    # When the block changes after the freeze
    await session.replace_context_block("memory", "User likes tea.")
    # (reads are read-your-writes per client: the first client's wait is what guarantees the
    # other client's reads of the block below)
    await ms.wait_for("context")
    # Then a new session object with the same id gets the frozen prompt, not a new rendering
    again = soul_and_memory(ms, "shared")
    assert await again.freeze_system_prompt() == frozen
    # And so does a session in another client (another process) on the same log
    other = await open_memstream(settings, workers=False)
    try:
        theirs = soul_and_memory(other, "shared")
        assert await theirs.freeze_system_prompt() == frozen
        # And the other client reads the block as it is now
        await theirs.tools()
        block = theirs.get_context_block("memory")
        assert block is not None
        assert block.content == "User likes tea."
    finally:
        await other.close()
    # But another session id has a prompt of its own
    assert await soul_and_memory(ms, "elsewhere").freeze_system_prompt() == (
        f"{SEP}\nSOUL (Identity) [readonly]\n{SEP}\nYou are helpful.\n\n"
        f"{SEP}\nMEMORY (Learned facts) [0% — 0/1100 tokens] [writable]\n{SEP}\n"
    )


async def test_refresh_replaces_the_persisted_prompt_for_every_reader(ms: Memstream) -> None:
    # Given a frozen prompt and a later write
    session = soul_and_memory(ms, "refresh")
    await session.replace_context_block("memory", "Fact A")
    frozen = await session.freeze_system_prompt()
    await session.replace_context_block("memory", "Fact B")
    assert await soul_and_memory(ms, "refresh").freeze_system_prompt() == frozen
    # When one session object refreshes
    refreshed = await session.refresh_system_prompt()
    # Then the refresh includes the new fact, and a new session object gets the refreshed one
    assert "Fact B" in refreshed
    assert "Fact A" not in refreshed
    assert await soul_and_memory(ms, "refresh").freeze_system_prompt() == refreshed
    assert await cached_prompt(ms, "refresh") == refreshed


async def test_clear_messages_refreshes_the_frozen_prompt(ms: Memstream) -> None:
    # Given a conversation with a frozen prompt, and a fact learned after the freeze
    session = soul_and_memory(ms, "clearing")
    await session.append_message(msg("m1"))
    frozen = await session.freeze_system_prompt()
    await session.replace_context_block("memory", "User likes tea.")
    assert await session.freeze_system_prompt() == frozen
    # When the messages are cleared
    await session.clear_messages()
    # Then the history is empty and the prompt was re-rendered with the new fact, persisted
    assert await session.get_history() == []
    prompt = await session.freeze_system_prompt()
    assert prompt != frozen
    assert prompt.endswith(f"{SEP}\nUser likes tea.")
    assert await cached_prompt(ms, "clearing") == prompt
    assert await soul_and_memory(ms, "clearing").freeze_system_prompt() == prompt


async def test_concurrent_freezes_return_one_prompt(ms: Memstream) -> None:
    # Given several session objects of one session, whose provider renders differently each time
    provider = CountingProvider()
    sessions = [
        ms.session("race").with_context("facts", provider=provider).with_cached_prompt()
        for _ in range(5)
    ]
    # When they all freeze at once (and one of them three times more)
    prompts = await asyncio.gather(
        *(s.freeze_system_prompt() for s in sessions),
        *(sessions[0].freeze_system_prompt() for _ in range(3)),
    )
    # Then every caller gets the same prompt: the first freeze on the log wins
    assert len(set(prompts)) == 1
    assert prompts[0].startswith(f"{SEP}\nFACTS [readonly]\n{SEP}\nrendering ")
    assert await cached_prompt(ms, "race") == prompts[0]
    # And a later session object gets it too
    late = ms.session("race").with_context("facts", provider=provider).with_cached_prompt()
    assert await late.freeze_system_prompt() == prompts[0]


async def test_concurrent_freezes_without_a_cache_are_identical_per_object(ms: Memstream) -> None:
    # Given one session object without a prompt cache, over a provider that changes every read
    session = ms.session("memory-only").with_context("facts", provider=CountingProvider())
    # When it freezes concurrently
    prompts = await asyncio.gather(*(session.freeze_system_prompt() for _ in range(5)))
    # Then the snapshot is taken once, and nothing is persisted
    assert len(set(prompts)) == 1
    assert await cached_prompt(ms, "memory-only") is None


async def test_empty_prompt_is_persisted_and_returned_without_rendering(ms: Memstream) -> None:
    # Given a session whose only block is an empty read-only one
    session = ms.session("empty").with_context("soul", provider=StaticContext(None))
    session.with_cached_prompt()
    # When the prompt is frozen
    # Then it is "" and "" is what the log holds
    assert await session.freeze_system_prompt() == ""
    assert await cached_prompt(ms, "empty") == ""
    # And a new session object whose block now has text still gets "" (stored, not rendered)
    later = (
        ms.session("empty")
        .with_context("soul", provider=StaticContext("Now text"))
        .with_cached_prompt()
    )
    assert await later.freeze_system_prompt() == ""
    # Until it refreshes
    assert await later.refresh_system_prompt() == f"{SEP}\nSOUL [readonly]\n{SEP}\nNow text"


async def test_prompt_of_cleared_blocks_is_persisted(ms: Memstream) -> None:
    # Given a built-in block that was written and then cleared
    session = ms.session("cleared").with_context("memory").with_cached_prompt()
    await session.replace_context_block("memory", "something")
    await session.replace_context_block("memory", "")
    # When the prompt is frozen twice
    first = await session.freeze_system_prompt()
    # Then the empty-bodied block is the persisted prompt, and it stays
    assert first == f"{SEP}\nMEMORY [writable]\n{SEP}\n"
    assert await session.freeze_system_prompt() == first
    assert await cached_prompt(ms, "cleared") == first


async def test_user_prompt_store_distinguishes_none_from_empty(ms: Memstream) -> None:
    # Given a user prompt store that already holds ""
    holds_empty = MemoryProvider("")
    session = ms.session("store").with_context("soul", provider=StaticContext("Hi"))
    session.with_cached_prompt(holds_empty)
    # Then "" is returned as the frozen prompt, not a rendering
    assert await session.freeze_system_prompt() == ""
    assert holds_empty.writes == []
    # Given a user prompt store holding nothing yet
    fresh = AsyncMemoryProvider(None)
    other = (
        ms.session("store2")
        .with_context("soul", provider=StaticContext("Hi"))
        .with_cached_prompt(fresh)
    )
    # Then the rendering is stored there (not on the log), once
    prompt = await other.freeze_system_prompt()
    assert prompt == f"{SEP}\nSOUL [readonly]\n{SEP}\nHi"
    assert await other.freeze_system_prompt() == prompt
    assert fresh.writes == [prompt]
    assert await cached_prompt(ms, "store2") is None
    # And a prompt store must be writable
    with pytest.raises(InvalidInputError):
        await ms.session("store3").with_cached_prompt(ReadonlyProvider("x")).freeze_system_prompt()


# -- writes ----------------------------------------------------------------------------------------


async def test_replace_append_and_get_context_block(ms: Memstream) -> None:
    # Given soul + memory, nothing loaded yet
    session = soul_and_memory(ms, "rw")
    assert session.get_context_block("memory") is None
    assert session.get_context_blocks() == []
    # When memory is replaced and then appended to
    replaced = await session.replace_context_block("memory", "fact1")
    appended = await session.append_context_block("memory", "\nfact2")
    appended_again = await session.append_context_block("memory", "fact3")
    # Then each call returns the block as written, with one newline between appends
    assert replaced.content == "fact1"
    assert appended.content == "fact1\nfact2"
    assert appended_again.content == "fact1\nfact2\nfact3"
    assert appended_again.tokens == 5
    # And the blocks read back, and the log has the content
    block = session.get_context_block("memory")
    assert block is not None
    assert block.content == "fact1\nfact2\nfact3"
    soul = session.get_context_block("soul")
    assert soul is not None
    assert (soul.content, soul.writable) == ("You are helpful.", False)
    assert len(session.get_context_blocks()) == 2
    await ms.wait_for("context")
    assert (
        ms.core.reads.context_queries.block_content(ms.namespace, "memory", "rw")
        == "fact1\nfact2\nfact3"
    )
    # And appending to an empty block adds no leading newline
    notes = await ms.session("rw2").with_context("notes").append_context_block("notes", "first")
    assert notes.content == "first"


async def test_missing_readonly_and_keyed_blocks_refuse_writes(ms: Memstream) -> None:
    session = (
        soul_and_memory(ms, "refuse")
        .with_context("skills", provider=MemorySkills())
        .with_context("knowledge", provider=MemorySearch())
    )
    # A block that does not exist: the reference's texts (§6.4), as NotFoundError
    with pytest.raises(NotFoundError, match=r'^Block "nope" is readonly$'):
        await session.replace_context_block("nope", "x")
    with pytest.raises(NotFoundError, match=r'^Block "nope" not found$'):
        await session.append_context_block("nope", "x")
    # A read-only block
    with pytest.raises(InvalidInputError, match=r'^Block "soul" is readonly$'):
        await session.replace_context_block("soul", "x")
    with pytest.raises(InvalidInputError, match="readonly"):
        await session.append_context_block("soul", "x")
    # Keyed blocks are written with set_context metadata, not replaced
    for label in ("skills", "knowledge"):
        with pytest.raises(InvalidInputError, match="keyed provider"):
            await session.replace_context_block(label, "x")
    # Nothing was written
    assert await stored_keys(ms) == []
    soul = session.get_context_block("soul")
    assert soul is not None
    assert soul.content == "You are helpful."


async def test_max_tokens_is_enforced(ms: Memstream) -> None:
    session = ms.session("budget").with_context("memory", max_tokens=10)
    fifty_words = "word " * 50
    # Replacing with 65 tokens into a budget of 10 is refused, naming the numbers
    with pytest.raises(InvalidInputError, match=r'^Block "memory" exceeds maxTokens: 65 > 10$'):
        await session.replace_context_block("memory", fifty_words)
    # The tool reports the same as an error string
    reply = await session.execute_tool("set_context", {"label": "memory", "content": fifty_words})
    assert reply == 'Error: Block "memory" exceeds maxTokens: 65 > 10'
    # An append is bounded by the combined text ("a b c d e" is 7 tokens, twice is 13)
    await session.replace_context_block("memory", "a b c d e")
    with pytest.raises(InvalidInputError, match="exceeds maxTokens: 13 > 10"):
        await session.append_context_block("memory", "a b c d e")
    block = session.get_context_block("memory")
    assert block is not None
    assert block.content == "a b c d e"
    await ms.wait_for("context")
    assert (
        ms.core.reads.context_queries.block_content(ms.namespace, "memory", "budget") == "a b c d e"
    )
    # A budget of 0 is enforced although the header does not show it
    zero = ms.session("zero").with_context("memory", max_tokens=0)
    with pytest.raises(InvalidInputError, match=r"exceeds maxTokens: 2 > 0"):
        await zero.replace_context_block("memory", "a")
    assert await zero.freeze_system_prompt() == f"{SEP}\nMEMORY [writable]\n{SEP}\n"


async def test_explicit_user_providers_sync_and_async(ms: Memstream) -> None:
    # Given a sync writable provider, an async one, and a read-only one
    sync_store, async_store = MemoryProvider("likes tea"), AsyncMemoryProvider(None)
    session = (
        ms.session("user-providers")
        .with_context("soul", provider=ReadonlyProvider("I am a bot"))
        .with_context("memory", provider=sync_store)
        .with_context("notes", description="Scratch", provider=async_store)
    )
    # Then the prompt has their data (None renders as an empty writable block)
    assert await session.freeze_system_prompt() == (
        f"{SEP}\nSOUL [readonly]\n{SEP}\nI am a bot\n\n"
        f"{SEP}\nMEMORY [writable]\n{SEP}\nlikes tea\n\n"
        f"{SEP}\nNOTES (Scratch) [writable]\n{SEP}\n"
    )
    # When they are written through the API and the tool
    await session.replace_context_block("memory", "likes coffee")
    reply = await session.execute_tool(
        "set_context", {"label": "notes", "content": "todo", "action": "append"}
    )
    # Then the writes went to the providers, not to the built-in store on the log
    assert reply == "Written to notes. Usage: 2 tokens"
    assert sync_store.writes == ["likes coffee"]
    assert async_store.writes == ["todo"]
    assert await stored_keys(ms) == []


async def test_add_and_remove_context(ms: Memstream) -> None:
    # Given a frozen prompt with one block
    session = soul_and_memory(ms, "adding")
    frozen = await session.freeze_system_prompt()
    # When a built-in block is added
    added = await session.add_context("notes", description="Scratch", max_tokens=100)
    # Then it is loaded and writable, appended after the configured blocks
    assert added == ContextBlock("notes", "", description="Scratch", max_tokens=100, writable=True)
    assert [b.label for b in session.get_context_blocks()] == ["soul", "memory", "notes"]
    await session.replace_context_block("notes", "remember milk")
    assert await stored_keys(ms) == ["notes_adding"]
    # And the tool now offers it
    tools = await session.tools()
    assert tools["set_context"].parameters["properties"]["label"]["enum"] == ["memory", "notes"]
    # But the frozen prompt only shows it after a refresh
    assert await session.freeze_system_prompt() == frozen
    refreshed = await session.refresh_system_prompt()
    assert refreshed.endswith(
        f"NOTES (Scratch) [4% — 4/100 tokens] [writable]\n{SEP}\nremember milk"
    )
    # And a label that exists is refused
    with pytest.raises(InvalidInputError, match=r'^Block "notes" already exists$'):
        await session.add_context("notes")
    with pytest.raises(InvalidInputError, match=r'^Block "soul" already exists$'):
        await session.add_context("soul", provider=StaticContext("again"))
    # When blocks are removed
    assert session.remove_context("notes") is True
    assert session.remove_context("notes") is False
    assert session.remove_context("never") is False
    # Then they are gone from the blocks and the tools, but not from the frozen prompt
    assert session.get_context_block("notes") is None
    tools = await session.tools()
    assert tools["set_context"].parameters["properties"]["label"]["enum"] == ["memory"]
    assert await session.freeze_system_prompt() == refreshed
    assert "NOTES" not in await session.refresh_system_prompt()


async def test_remove_context_before_first_use(ms: Memstream) -> None:
    # Given a configured block that nothing has loaded yet
    session = soul_and_memory(ms, "remove-early").with_context("notes")
    # When it is removed, Then it was known: True, and a second remove finds nothing
    assert session.remove_context("notes") is True
    assert session.remove_context("notes") is False
    assert session.remove_context("never") is False
    # And it is not part of the blocks or the prompt
    assert "NOTES" not in await session.freeze_system_prompt()
    assert [b.label for b in session.get_context_blocks()] == ["soul", "memory"]


async def test_concurrent_appends_from_many_session_objects_all_land(ms: Memstream) -> None:
    # Given five session objects of one session, each loaded before anyone appends
    sessions = [ms.session("appends").with_context("log") for _ in range(5)]
    for session in sessions:
        await session.tools()
    # When each appends its own line at once (each object's loaded content is stale but one)
    await asyncio.gather(
        *(s.append_context_block("log", f"line {i}") for i, s in enumerate(sessions))
    )
    # Then every line is in the block: appends are decided on the log, not on a stale read
    await ms.wait_for("context")
    content = ms.core.reads.context_queries.block_content(ms.namespace, "log", "appends") or ""
    assert sorted(content.split("\n")) == [f"line {i}" for i in range(5)]


async def test_built_in_block_persists_across_clients(ms: Memstream, settings: Settings) -> None:
    # Given a built-in block never written
    session = ms.session("persist").with_context("memory")
    await session.tools()
    block = session.get_context_block("memory")
    assert block is not None
    assert block.content == ""
    await ms.wait_for("context")
    assert ms.core.reads.context_queries.block_content(ms.namespace, "memory", "persist") is None
    # When it is written (and projected, which the first client's wait guarantees)
    await session.replace_context_block("memory", "hello world")
    await ms.wait_for("context")
    # Then another client's session with the same id reads it
    other = await open_memstream(settings, workers=False)
    try:
        theirs = other.session("persist").with_context("memory")
        await theirs.tools()
        assert content_of(theirs, "memory") == "hello world"
        # When that client overwrites it
        await theirs.replace_context_block("memory", "updated")
        await other.wait_for("context")
    finally:
        await other.close()
    # Then the first client's new session object reads the overwrite
    again = ms.session("persist").with_context("memory")
    await again.tools()
    assert content_of(again, "memory") == "updated"
    assert (
        ms.core.reads.context_queries.block_content(ms.namespace, "memory", "persist") == "updated"
    )


# -- tools -----------------------------------------------------------------------------------------


async def test_tools_load_blocks_lazily_and_write_through(ms: Memstream) -> None:
    # Given a read-only soul and two writable blocks, nothing loaded
    session = (
        ms.session("tools")
        .with_context("soul", provider=StaticContext("Be nice"))
        .with_context("memory", description="Learned facts", max_tokens=100)
        .with_context("todos")
    )
    assert session.get_context_blocks() == []
    # When the tools are asked for
    tools = await session.tools()
    # Then set_context is the only tool, listing the writable blocks only
    assert list(tools) == ["set_context"]
    description = tools["set_context"].description
    assert description == (
        "Write to a context block. Available blocks:\n"
        '- "memory" (writable): Learned facts\n'
        '- "todos" (writable): no description\n\n'
        "Writes are durable and persist across sessions."
    )
    assert "soul" not in description
    # When the tool writes
    reply = await tools["set_context"].execute({"label": "memory", "content": "User likes coffee."})
    # Then the reply shows usage and the log holds the text
    assert reply == "Written to memory. Usage: 5% (5/100 tokens)"
    await ms.wait_for("context")
    assert (
        ms.core.reads.context_queries.block_content(ms.namespace, "memory", "tools")
        == "User likes coffee."
    )
    # And a read-only block is refused with an error string, not an exception
    refused = await tools["set_context"].execute({"label": "soul", "content": "x"})
    assert refused == 'Error: Block "soul" is readonly'


async def test_set_context_append_action(ms: Memstream) -> None:
    session = ms.session("append").with_context("memory")
    tools = await session.tools()
    # Given "fact1", When "\nfact2" is appended, Then the block is "fact1\nfact2"
    await tools["set_context"].execute({"label": "memory", "content": "fact1"})
    reply = await tools["set_context"].execute(
        {"label": "memory", "content": "\nfact2", "action": "append"}
    )
    assert reply == "Written to memory. Usage: 3 tokens"
    assert content_of(session, "memory") == "fact1\nfact2"
    # And an unknown action replaces (replace is the default)
    await tools["set_context"].execute({"label": "memory", "content": "only", "action": "other"})
    await ms.wait_for("context")
    assert ms.core.reads.context_queries.block_content(ms.namespace, "memory", "append") == "only"


async def test_no_tools_without_writable_blocks_and_exports(ms: Memstream) -> None:
    # Given only read-only blocks
    readonly = ms.session("ro").with_context("soul", provider=StaticContext("You are helpful."))
    # Then there are no tools, but the prompt has the text
    tools = await readonly.tools()
    assert tools == {}
    assert tools.openai() == []
    assert tools.anthropic() == []
    assert "You are helpful." in await readonly.freeze_system_prompt()
    assert (await readonly.execute_tool("set_context", {"label": "soul", "content": "x"})) == (
        'Error: unknown tool "set_context". Available tools: none'
    )
    # Given a writable block
    writable = ms.session("rw-export").with_context("memory")
    tools = await writable.tools()
    tool = tools["set_context"]
    # Then the tool exports in the OpenAI and Anthropic formats
    assert tools.openai() == [
        {
            "type": "function",
            "function": {
                "name": "set_context",
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
    ]
    assert tools.anthropic() == [
        {"name": "set_context", "description": tool.description, "input_schema": tool.parameters}
    ]


# -- bad input -------------------------------------------------------------------------------------


async def test_builder_refuses_bad_configuration(ms: Memstream) -> None:
    session = ms.session("bad-config")
    with pytest.raises(InvalidInputError):
        session.with_context(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        session.with_context("")
    with pytest.raises(InvalidInputError, match="64"):
        session.with_context("x" * 65)
    with pytest.raises(InvalidInputError):
        session.with_context("memory", description=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        session.with_context("memory", max_tokens=-1)
    with pytest.raises(InvalidInputError):
        session.with_context("memory", max_tokens="10")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        session.with_context("memory", max_tokens=True)
    with pytest.raises(InvalidInputError, match="get"):
        session.with_context("memory", provider=object())
    with pytest.raises(InvalidInputError):
        StaticContext(123)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        ms.session(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        ms.session("x").for_session(None)  # type: ignore[arg-type]
    # A 64-character label is fine; a label configured twice is not
    session.with_context("y" * 64)
    with pytest.raises(InvalidInputError, match="already exists"):
        session.with_context("y" * 64)
    # None of the refused blocks was configured
    assert [b.label for b in await _loaded(session)] == ["y" * 64]
    with pytest.raises(InvalidInputError):
        await session.add_context(7)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        await session.add_context("z" * 65)


async def _loaded(session: Session) -> list[ContextBlock]:
    await session.tools()
    return session.get_context_blocks()


async def test_writes_refuse_non_string_content(ms: Memstream) -> None:
    session = ms.session("bad-content").with_context("memory")
    for content in (None, 42, b"bytes", ["a"]):
        with pytest.raises(InvalidInputError):
            await session.replace_context_block("memory", content)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError):
            await session.append_context_block("memory", content)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        await session.replace_context_block("memory", "\ud800")  # lone surrogate
    with pytest.raises(NotFoundError):
        await session.replace_context_block(42, "x")  # type: ignore[arg-type]
    # Nothing was written
    assert await stored_keys(ms) == []
    assert content_of(session, "memory") == ""


async def test_provider_returning_a_non_string_is_refused(ms: Memstream) -> None:
    # Given a provider whose get() returns a number
    provider = ReadonlyProvider(3)  # type: ignore[arg-type]
    session = ms.session("bad-provider").with_context("count", provider=provider)
    # Then loading the blocks fails with a clear error, and the tool runner says so as a string
    with pytest.raises(InvalidInputError, match="count"):
        await session.freeze_system_prompt()
    assert (await session.execute_tool("set_context", {})).startswith("Error: ")


async def test_text_that_cannot_be_stored_is_refused_where_it_comes_in(ms: Memstream) -> None:
    before = await ms.core.log.stream_last_seq()
    # A static block's text, a block's description (lone surrogates: not valid Unicode)
    with pytest.raises(InvalidInputError, match="text is not valid Unicode"):
        StaticContext("hi \ud800")
    with pytest.raises(InvalidInputError, match="description is not valid Unicode"):
        ms.session("odd").with_context("soul", description="d\udfff")
    # And what a provider returns, named by its block, before anything is frozen
    provider = ReadonlyProvider("fine \ud800")
    session = ms.session("odd").with_context("soul", provider=provider).with_cached_prompt()
    with pytest.raises(InvalidInputError, match='provider of block "soul" returned is not valid'):
        await session.freeze_system_prompt()
    assert await ms.core.log.stream_last_seq() == before


async def test_tools_return_error_strings_for_bad_arguments(ms: Memstream) -> None:
    session = ms.session("bad-args").with_context("memory")
    tools = await session.tools()
    set_context = tools["set_context"]
    # Label of the wrong type or unknown
    assert await set_context.execute({"label": 5, "content": "x"}) == 'Error: block "5" not found'
    assert await set_context.execute({"label": "nope", "content": "x"}) == (
        'Error: block "nope" not found'
    )
    assert await set_context.execute({"content": "x"}) == 'Error: block "None" not found'
    # Content missing or of the wrong type
    assert await set_context.execute({"label": "memory", "content": None}) == (
        "Error: content is required"
    )
    assert await set_context.execute({"label": "memory"}) == "Error: content is required"
    assert await set_context.execute({"label": "memory", "content": 3}) == (
        "Error: content must be a string, not int"
    )
    # Arguments that are not an object
    assert await set_context.execute(["memory", "x"]) == (  # type: ignore[arg-type]
        "Error: arguments must be an object, not list"
    )
    assert await set_context.execute("memory") == (  # type: ignore[arg-type]
        "Error: arguments must be an object, not str"
    )
    assert (await set_context.execute(None)).startswith("Error: ")
    # Unknown tool names through the session
    assert await session.execute_tool("nope", {}) == (
        'Error: unknown tool "nope". Available tools: set_context'
    )
    assert (await session.execute_tool(None, {})).startswith(  # type: ignore[arg-type]
        'Error: unknown tool "None"'
    )
    # Nothing was written
    assert await stored_keys(ms) == []


async def test_provider_failures_come_back_from_tools_as_error_strings(ms: Memstream) -> None:
    # Given a provider whose backend fails on write, and one that fails on read
    class FailingWrites(MemoryProvider):
        def set(self, content: str) -> None:
            raise RuntimeError("backend refused the write")

    class FailingReads:
        def get(self) -> str:
            raise RuntimeError("backend down")

        def set(self, content: str) -> None:
            raise AssertionError("never reached")

    writes = ms.session("failing-writes").with_context("memory", provider=FailingWrites())
    reads = ms.session("failing-reads").with_context("memory", provider=FailingReads())
    # When the model calls set_context, Then the failure is an error string, never an exception
    arguments = {"label": "memory", "content": "x"}
    assert await writes.execute_tool("set_context", arguments) == (
        "Error: backend refused the write"
    )
    assert await reads.execute_tool("set_context", arguments) == "Error: backend down"


# -- init lifecycle (§12.5) ------------------------------------------------------------------------


async def test_init_receives_the_label_before_get_once_per_load(ms: Memstream) -> None:
    # Given a read-only, a writable, a skill and a search provider with init, and one without
    journal: list[tuple[str, Any]] = []
    plain = MemoryProvider("no init here")
    session = (
        ms.session("init")
        .with_context("soul", provider=RecordingProvider(journal))
        .with_context("memory", provider=RecordingWritable(journal))
        .with_context("skills", provider=RecordingSkills(journal))
        .with_context("knowledge", provider=RecordingSearch(journal))
        .with_context("plain", provider=plain)
    )
    # When the tools are asked for three times, two of them at once
    await asyncio.gather(session.tools(), session.tools())
    tools = await session.tools()
    # Then each provider got init(its own label) once, right before its get()
    assert journal == [
        ("init", "soul"),
        ("get", "soul"),
        ("init", "memory"),
        ("get", "memory"),
        ("init", "skills"),
        ("get", "skills"),
        ("init", "knowledge"),
        ("get", "knowledge"),
    ]
    # And the label is usable in get(), load() and search()
    soul = session.get_context_block("soul")
    assert soul is not None
    assert soul.content == "content of soul"
    assert await tools["load_context"].execute({"label": "skills", "key": "k"}) == "skills/k"
    assert await tools["search_context"].execute({"label": "knowledge", "query": "q"}) == (
        "[knowledge]\nq"
    )
    # And a provider without init works, content and writes alike
    assert content_of(session, "plain") == "no init here"
    reply = await tools["set_context"].execute({"label": "plain", "content": "new"})
    assert reply == "Written to plain. Usage: 2 tokens"
    assert plain.text == "new"
    # When the prompt is refreshed, every provider is reloaded: init then get again
    journal.clear()
    await session.refresh_system_prompt()
    assert journal[:2] == [("init", "soul"), ("get", "soul")]
    assert [e for e in journal if e[0] == "init"] == [
        ("init", label) for label in ("soul", "memory", "skills", "knowledge")
    ]


# -- replay: the read model rebuilt from the log ---------------------------------------------------


async def test_prompt_and_blocks_come_back_after_a_rebuild(ms: Memstream) -> None:
    # Given a frozen prompt and a block written after the freeze
    session = soul_and_memory(ms, "replay")
    await session.replace_context_block("memory", "User likes coffee.")
    frozen = await session.freeze_system_prompt()
    await session.replace_context_block("memory", "User likes tea.")
    await ms.session("replay-2").with_context("notes").replace_context_block("notes", "n")
    await ms.wait_for("context")
    before = ms.core.reads.context_queries.blocks(ms.namespace)
    # When the context read model is dropped
    drop_projection(ms.core.reads.copy, "context")
    assert ms.core.reads.context_queries.cached_prompt(ms.namespace, "replay") is None
    assert ms.core.reads.context_queries.blocks(ms.namespace) == []
    # And rebuilt from the log
    await rebuild(ms.core.log, ms.core.reads.copy, ["context"])
    # Then the blocks and the frozen prompt are back as they were
    assert ms.core.reads.context_queries.blocks(ms.namespace) == before
    assert ms.core.reads.context_queries.cached_prompt(ms.namespace, "replay") == frozen
    # And a new session object with the same id gets the same frozen prompt
    fresh = soul_and_memory(ms, "replay")
    assert await fresh.freeze_system_prompt() == frozen == WORKED_EXAMPLE
    # And, the frozen prompt having come from the log, loads the blocks only when asked to
    assert fresh.get_context_block("memory") is None
    await fresh.tools()
    assert content_of(fresh, "memory") == ("User likes tea.")


async def test_new_process_replays_a_dropped_read_model(settings: Settings) -> None:
    # Given a process that froze a prompt and wrote a block after the freeze, then exited
    first = await open_memstream(settings, workers=True)
    try:
        session = soul_and_memory(first, "restart")
        await session.replace_context_block("memory", "User likes coffee.")
        frozen = await session.freeze_system_prompt()
        await session.replace_context_block("memory", "User likes tea.")
    finally:
        await first.close()
    # And its read model was dropped while no process ran
    drop_projection(open_read_models(settings), "context")
    # When a new process starts (its projector replays the log)
    second = await open_memstream(settings, workers=True)
    try:
        # Then a session with the same id gets the same frozen prompt
        again = soul_and_memory(second, "restart")
        assert await again.freeze_system_prompt() == frozen == WORKED_EXAMPLE
        # And once the read model caught up with the log, the block is back too
        await second.sync("context")
        assert (
            second.core.reads.context_queries.cached_prompt(second.namespace, "restart") == frozen
        )
        assert second.core.reads.context_queries.block_content(
            second.namespace, "memory", "restart"
        ) == ("User likes tea.")
        assert "User likes tea." in await again.refresh_system_prompt()
    finally:
        await second.close()
