"""SQL and full-text syntax in every string input — ids, labels, names, content, queries — is
stored and queried literally, on both read-model backends (issue 14)."""

from __future__ import annotations

import pytest
from support.messages import msg

from memstream.client import Memstream

pytestmark = pytest.mark.both_backends

# SQL of both dialects, LIKE wildcards, FTS5 and tsquery operators, NATS subject wildcards.
HOSTILE = (
    "'; DROP TABLE messages; --",
    "Robert'); DROP TABLE sessions;--",
    '" OR 1=1 --',
    "$$; SELECT pg_sleep(5); $$",
    "%_\\%",
    "a & !b | c:* <-> d",
    'NEAR("a" "b") * ^x',
    "ms.default.>.*",
    "é中文🙂",
)


async def test_session_and_message_ids_and_texts_are_literal(ms: Memstream) -> None:
    for i, text in enumerate(HOSTILE):
        # Given a session whose id, message id and text are each a hostile string
        session = ms.session(text)
        await session.append_message(msg(text, f"{text} marker{i}"), parent_id=None)
        # Then it reads back exactly, by its own id
        history = await session.get_history()
        assert [(m["id"], m["parts"][0]["text"]) for m in history] == [(text, f"{text} marker{i}")]
        assert (await session.get_message(text) or {})["id"] == text
        # And a search for a plain word of it finds it alone, a search for the string itself
        # fails nothing
        hits = await session.search(f"marker{i}")
        assert [h["id"] for h in hits] == [text]
        assert isinstance(await session.search(text), list)
    # And no other session sees another's messages; the tables are all there
    manager = ms.session_manager()
    for i, text in enumerate(HOSTILE):
        found = await manager.search(f"marker{i}")
        assert [(h["session_id"], h["id"]) for h in found] == [(text, text)]
        assert isinstance(await manager.search(text), list)
    assert len(await ms.session("'; DROP TABLE messages; --").get_history()) == 1


async def test_registered_session_names_models_and_sources_are_literal(ms: Memstream) -> None:
    manager = ms.session_manager()
    created = [
        await manager.create(text, model=text, source=text, session_id=f"s{i}")
        for i, text in enumerate(HOSTILE)
    ]
    for info, text in zip(created, HOSTILE, strict=True):
        got = await manager.get(info["id"])
        assert got is not None
        assert (got["name"], got["model"], got["source"]) == (text, text, text)
    assert sorted(s["name"] for s in await manager.list()) == sorted(HOSTILE)


async def test_context_labels_and_contents_are_literal(ms: Memstream) -> None:
    for i, text in enumerate(HOSTILE):
        session = ms.session(f"ctx{i}").with_context(text, description=text)
        await session.replace_context_block(text, f"{text} body")
        await ms.wait_for("context")
        assert (
            ms.core.reads.context_queries.block_content(ms.namespace, text, f"ctx{i}")
            == f"{text} body"
        )
        assert f"{text} body" in await session.freeze_system_prompt()


async def test_profile_names_memories_and_queries_are_literal(ms: Memstream) -> None:
    memory = ms.agent_memory("default")
    for text in HOSTILE[:4]:
        # Given a profile named by a hostile string that remembers a hostile string
        profile = await memory.get_profile(text)
        remembered = await profile.remember(f"Prefers {text} as a greeting")
        # Then it is stored, listed and recalled literally, and only in its own profile
        assert text in remembered["content"]
        listed = (await profile.list())["memories"]
        assert [m["id"] for m in listed] == [remembered["id"]]
        recalled = await profile.recall(text)
        assert [c["id"] for c in recalled["candidates"]] == [remembered["id"]]
    assert sorted(p["name"] for p in await memory.list_profiles()) == sorted(HOSTILE[:4])
