"""Agent Memory end to end on a real nats-server: ingest, extraction, indexing, recall, deletion,
isolation, limits and replay (spec memory.md)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

import pytest

from memstream import InvalidInputError, NotFoundError
from memstream.client import Memstream, open_memstream
from memstream.settings import Settings
from memstream.workers.admin.rebuild import rebuild, verify

# Every behaviour here holds on both read-model backends (issue 14).
pytestmark = pytest.mark.both_backends

WHEN = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def conversation(*texts: str, role: str = "user") -> list[dict[str, Any]]:
    return [{"role": role, "content": text, "timestamp": WHEN} for text in texts]


async def profile_subject_seq(ms: Memstream, namespace: str, name: str) -> int:
    return await ms.core.log.last_seq(f"{ms.core.log.subject_prefix}.{namespace}.profile.{name}")


async def test_ingest_extracts_memories_with_provenance_and_is_idempotent(ms: Memstream) -> None:
    # Given a profile with an ingested conversation
    profile = await ms.agent_memory("default").get_profile("alice")
    messages = conversation(
        "I moved to Berlin last week.", "My sister Anna works as a nurse in Hamburg."
    )
    await profile.ingest(messages, session_id="s1")
    listed = (await profile.list())["memories"]
    assert len(listed) == 2
    assert all("content" not in m for m in listed)
    # Then each memory names the raw messages it came from, readable by id
    berlin = next(m for m in listed if "Berlin" in m["summary"])
    full = await profile.get(berlin["id"])
    [source] = full["source_message_ids"]
    message = await profile.get_message(source)
    assert message["content"] == "I moved to Berlin last week."
    assert (message["session_id"], message["role"]) == ("s1", "user")
    # And its relative date is resolved against the message's timestamp
    assert full["event_time"] == "2023-05-01T00:00:00Z"
    # When the same messages are ingested again, with new timestamps
    before = await profile_subject_seq(ms, "default", "alice")
    again = [{**m, "timestamp": "2024-01-01T00:00:00Z"} for m in messages]
    await profile.ingest(again, session_id="s1")
    # Then nothing is added: no event, no memory, no message
    assert await profile_subject_seq(ms, "default", "alice") == before
    assert len((await profile.list())["memories"]) == 2
    assert (await ms.agent_memory("default").list_profiles())[0]["messages"] == 2


async def test_a_newer_fact_supersedes_the_older_and_history_keeps_both(ms: Memstream) -> None:
    profile = await ms.agent_memory("default").get_profile("bob")
    # Given a fact, When a newer fact on the same topic is remembered
    old = await profile.remember("My favourite colour is blue")
    new = await profile.remember("My favourite colour is green now")
    # Then the older is kept but superseded, and the history shows both in order
    assert new["topic_key"] == old["topic_key"]
    assert (await profile.get(old["id"]))["superseded_by"] == new["id"]
    history = await profile.history(new["id"])
    assert [h["id"] for h in history] == [old["id"], new["id"]]
    assert [h["current"] for h in history] == [False, True]
    assert history[0]["events"][-1]["action"] == "superseded"
    # And recall surfaces the current one first, with scores in [0, 1], best first
    result = await profile.recall("What is my favourite colour?")
    scores = [c["score"] for c in result["candidates"]]
    assert result["candidates"][0]["id"] == new["id"]
    assert scores == sorted(scores, reverse=True)
    assert all(0 <= s <= 1 for s in scores)
    assert "green" in result["answer"]


async def test_delete_removes_the_memory_and_its_source_messages(ms: Memstream) -> None:
    profile = await ms.agent_memory("default").get_profile("carol")
    await profile.ingest(
        conversation("I adopted a cat named Miso.", "I play the cello every Sunday."),
        session_id="s1",
    )
    memories = (await profile.list())["memories"]
    cat = next(m for m in memories if "Miso" in m["summary"])
    [source] = (await profile.get(cat["id"]))["source_message_ids"]
    # When the memory is deleted
    deleted = await profile.delete(cat["id"])
    # Then it is returned, and it and its source message are gone; the rest stays
    assert deleted["id"] == cat["id"]
    with pytest.raises(NotFoundError):
        await profile.get(cat["id"])
    with pytest.raises(NotFoundError):
        await profile.get_message(source)
    with pytest.raises(NotFoundError):
        await profile.delete(cat["id"])
    assert [m["id"] for m in (await profile.list())["memories"]] == [
        m["id"] for m in memories if m["id"] != cat["id"]
    ]
    assert all("Miso" not in c["summary"] for c in (await profile.recall("cat"))["candidates"])


async def test_delete_session_leaves_other_sessions_and_tolerates_unknown_ids(
    ms: Memstream,
) -> None:
    profile = await ms.agent_memory("default").get_profile("dave")
    await profile.ingest(conversation("I started learning Portuguese."), session_id="s1")
    await profile.ingest(conversation("I bought a red bicycle."), session_id="s2")
    # When one session is forgotten (and an unknown one)
    await profile.delete_session("s1")
    await profile.delete_session("never-seen")
    # Then its memories are gone and the other session's stay
    assert (await profile.list(session_id="s1"))["memories"] == []
    [kept] = (await profile.list(session_id="s2"))["memories"]
    assert "bicycle" in kept["summary"]
    assert (await profile.recall("Portuguese"))["count"] == 0


async def test_a_removed_conversation_ingested_again_is_extracted_again(ms: Memstream) -> None:
    # Given a session that was ingested, extracted and then forgotten (a removal)
    memory = ms.agent_memory("default")
    profile = await memory.get_profile("erin")
    messages = conversation("I adopted a greyhound called Pixel.")
    await profile.ingest(messages, session_id="s1")
    await profile.delete_session("s1")
    assert (await profile.list())["memories"] == []
    # When the same conversation is ingested again at once (within the log's duplicate window)
    await profile.ingest(messages, session_id="s1")
    # Then its messages and memories are back
    [again] = (await profile.list())["memories"]
    assert "Pixel" in again["summary"]
    [source] = (await profile.get(again["id"]))["source_message_ids"]
    assert (await profile.get_message(source))["content"] == messages[0]["content"]
    # And ingesting it once more adds nothing
    before = await profile_subject_seq(ms, "default", "erin")
    await profile.ingest(messages, session_id="s1")
    assert await profile_subject_seq(ms, "default", "erin") == before
    # And the same holds after the whole profile was deleted and made again
    await memory.delete_profile("erin")
    profile = await memory.get_profile("erin")
    await profile.ingest(messages, session_id="s1")
    [third] = (await profile.list())["memories"]
    assert "Pixel" in third["summary"]
    assert third["id"] != again["id"]
    # And after the memory was deleted with its message
    await profile.delete(third["id"])
    await profile.ingest(messages, session_id="s1")
    [fourth] = (await profile.list())["memories"]
    assert "Pixel" in fourth["summary"]


async def test_profiles_and_namespaces_are_isolated(ms: Memstream) -> None:
    alice = await ms.agent_memory("default").get_profile("alice")
    other = await ms.agent_memory("default").get_profile("mallory")
    elsewhere = await ms.agent_memory("team-2").get_profile("alice")
    memory = await alice.remember("I am allergic to peanuts")
    # Then another profile, or the same name in another namespace, does not find it
    for profile in (other, elsewhere):
        with pytest.raises(NotFoundError):
            await profile.get(memory["id"])
        with pytest.raises(NotFoundError):
            await profile.delete(memory["id"])
        assert (await profile.recall("peanuts allergy"))["count"] == 0
    assert [p["name"] for p in await ms.agent_memory("default").list_profiles()] == [
        "alice",
        "mallory",
    ]
    assert [p["name"] for p in await ms.agent_memory("team-2").list_profiles()] == ["alice"]


async def test_recall_on_an_empty_profile_answers_nothing(ms: Memstream) -> None:
    profile = await ms.agent_memory("default").get_profile("empty")
    result = await profile.recall("What do you know about me?")
    assert result == {"answer": "", "count": 0, "candidates": []}
    assert (await profile.get_summary())["summary"] == ""


async def test_list_pages_with_an_opaque_cursor_and_filters(ms: Memstream) -> None:
    profile = await ms.agent_memory("default").get_profile("erin")
    for text in ("I live in Oslo", "Always reply in English", "I need to call the bank"):
        await profile.remember(text, session_id="s1")
    seen: list[str] = []
    cursor = None
    while True:
        page = await profile.list(limit=2, cursor=cursor)
        seen += [m["id"] for m in page["memories"]]
        if "cursor" not in page:  # the last page has none
            break
        cursor = page["cursor"]
    assert len(seen) == len(set(seen)) == 3
    types = {m["type"] for m in (await profile.list(limit=500))["memories"]}
    assert {"fact", "instruction", "task"} <= types
    [instruction] = (await profile.list(type="instruction"))["memories"]
    assert "English" in instruction["summary"]
    summary = (await profile.get_summary())["summary"]
    assert "## Key Facts" in summary
    assert "## Instructions" in summary
    assert "## Active Tasks" in summary
    with pytest.raises(InvalidInputError, match="cursor"):
        await profile.list(cursor="bogus!")


async def test_every_limit_is_refused_before_anything_is_published(ms: Memstream) -> None:
    memory = ms.agent_memory("default")
    profile = await memory.get_profile("frank")
    last = await ms.core.log.stream_last_seq()
    refused = [
        (lambda: profile.ingest([]), "at least 1"),
        (lambda: profile.ingest(conversation(*["x"] * 501)), "limit is 500"),
        (lambda: profile.ingest(conversation("x" * (32 * 1024 + 1))), "content is 32769 bytes"),
        (lambda: profile.ingest([{"role": "tool", "content": "x"}]), "role"),
        (lambda: profile.ingest([{"role": "user", "content": 3}]), "content must be a string"),
        (lambda: profile.ingest(conversation("x"), session_id="s" * 65), "65 characters"),
        (
            lambda: profile.ingest([{"role": "user", "content": "x", "timestamp": "nope"}]),
            "ISO 8601",
        ),
        (lambda: profile.recall("q" * 1025), "query is 1025 bytes"),
        (lambda: profile.recall(""), "query is 0 bytes"),
        (lambda: profile.recall("q", thinking_level="max"), "thinking_level"),
        (lambda: profile.recall("q", response_length="huge"), "response_length"),
        (lambda: profile.list(limit=0), "limit is 0"),
        (lambda: profile.list(limit=501), "limit is 501"),
        (lambda: profile.list(type="opinion"), "type"),
        (lambda: profile.remember(""), "content is 0 bytes"),
        (lambda: profile.delete_session("s" * 65), "65 characters"),
        (lambda: memory.get_profile("p" * 101), "101 characters"),
    ]
    for call, message in refused:
        with pytest.raises(InvalidInputError, match=message):
            await call()
    with pytest.raises(InvalidInputError, match="namespace"):
        ms.agent_memory("Not Valid")
    assert await ms.core.log.stream_last_seq() == last


async def test_replay_rebuilds_memories_identically_without_running_the_extractor(
    ms: Memstream,
) -> None:
    profile = await ms.agent_memory("default").get_profile("gina")
    await profile.ingest(
        conversation("I moved to Lisbon in 2021.", "I moved to Porto last month."),
        session_id="s1",
    )
    await profile.remember("Never schedule meetings before 10am")
    before = (await profile.list(limit=500))["memories"]
    # When the memory read model is dropped and rebuilt from the log (the extractor is not
    # involved: its output is in the log)
    extractor = ms.core.workers.extractor
    assert extractor is not None
    extracted = extractor.extracted
    results = await verify(ms.core.log, ms.core.reads.copy, ["memory"])
    assert [r.ok for r in results] == [True]
    await rebuild(ms.core.log, ms.core.reads.copy, ["memory"])
    # Then every memory is back, the same, and nothing was extracted again
    assert (await profile.list(limit=500))["memories"] == before
    assert extractor.extracted == extracted


async def test_a_large_ingest_is_split_into_parts_and_kept_whole(ms: Memstream) -> None:
    profile = await ms.agent_memory("default").get_profile("hugo")
    texts = [f"Note {i}: I visited museum number {i} in Madrid. " + "x" * 30_000 for i in range(80)]
    await profile.ingest(conversation(*texts), session_id="big")
    profiles = await ms.agent_memory("default").list_profiles()
    assert next(p for p in profiles if p["name"] == "hugo")["messages"] == 80
    assert len((await profile.list(limit=500))["memories"]) == 80


class _OtherModel:
    """An embedding model of another name (never asked to embed here)."""

    model_name = "some-other-model"

    def encode(self, texts: Any) -> Any:
        raise AssertionError("not expected to embed")


async def test_vectors_of_another_model_are_dropped_to_be_reindexed_not_mixed(
    ms: Memstream,
) -> None:
    profile = await ms.agent_memory("default").get_profile("ivan")
    await profile.ingest(conversation("I keep bees on my roof."), session_id="s1")
    assert ms.core.reads.memory_queries.vector_state("default", "ivan", "memory")[0] == 1
    # When an indexer of another model opens the read model (at its start)
    await ms.close()
    store = ms.core.reads.copy.store(("vectors",), long_lived=True, encoder=_OtherModel())
    try:
        # Then the vectors of the first model are gone and the projection starts over from the
        # log (its consumer binds at sequence 1), so vectors of two models never mix
        assert store.positions() == {"vectors": 0}
        assert store.checksum("vectors") == _EMPTY_VECTORS
    finally:
        store.close()


_EMPTY_VECTORS = hashlib.sha256(b"\x00").hexdigest()  # no rows: one empty part


async def test_a_process_that_only_reads_a_profile_never_replays_it(
    ms: Memstream, settings: Settings
) -> None:
    # Given a profile with ingested messages, written by one client
    written = await ms.agent_memory("default").get_profile("reader")
    # (waiting until recallable: the extractor here has written its events to the profile)
    await written.ingest(conversation("I live in Lisbon."), session_id="s1", wait=True)
    await ms.wait_for("memory")
    # When another client (as a new process would) gets the profile and lists it
    other = await open_memstream(settings, workers=False)
    try:
        replayed: list[str] = []
        read_subject = other.core.log.read_subject

        def spied(subject: str, after_seq: int = 0) -> Any:
            replayed.append(subject)
            return read_subject(subject, after_seq)

        other.core.log.read_subject = spied  # type: ignore[method-assign]
        before = await profile_subject_seq(other, "default", "reader")
        profile = await other.agent_memory("default").get_profile("reader")
        assert profile.name == "reader"
        await profile.list()
        # Then it read none of the profile's events from the log and published nothing
        assert replayed == []
        assert await profile_subject_seq(other, "default", "reader") == before
        # And a profile that does not exist yet is still created by get_profile
        await other.agent_memory("default").get_profile("new-one")
        assert [p["name"] for p in await other.agent_memory("default").list_profiles()] == [
            "new-one",
            "reader",
        ]
    finally:
        await other.close()
