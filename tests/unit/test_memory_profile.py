"""The memory profile aggregate: given events, when a command, then events (no services)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from memstream.domain.errors import InvalidInputError, NotFoundError
from memstream.domain.memory_input import check_ingest, message_id
from memstream.domain.memory_profile import PART_MAX_BYTES, MemoryProfile

NOW = datetime(2026, 5, 1, tzinfo=UTC)


def applied(profile: MemoryProfile, events: list[Any]) -> list[Any]:
    for event in events:
        event.mutate(profile)
    return events


def created() -> MemoryProfile:
    profile = MemoryProfile.empty("default", "alice")
    applied(profile, profile.create())
    return profile


def memory(memory_id: str, topic: str, sources: list[str], kind: str = "fact") -> dict[str, Any]:
    return {
        "id": memory_id,
        "type": kind,
        "topic_key": topic,
        "summary": memory_id,
        "content": memory_id,
        "keywords": [],
        "queries": [],
        "source_message_ids": sources,
        "event_time": None,
        "session_id": "s1",
    }


def test_an_ingest_records_only_new_messages_and_nothing_when_all_are_known() -> None:
    profile = created()
    sid, messages = check_ingest(
        [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "s1", NOW
    )
    [event] = applied(profile, profile.ingest(sid, messages))
    assert [m["id"] for m in event.messages] == [message_id("s1", "user", t) for t in "ab"]
    # Re-ingesting (even with another timestamp) decides nothing; one new message alone is new
    _, again = check_ingest(
        [{"role": "user", "content": "a", "timestamp": "2030-01-01T00:00:00Z"}], "s1", NOW
    )
    assert profile.ingest(sid, again) == []
    _, more = check_ingest(
        [{"role": "user", "content": "a"}, {"role": "user", "content": "c"}], "s1", NOW
    )
    [event] = profile.ingest(sid, more)
    assert [m["content"] for m in event.messages] == ["c"]


def test_a_large_ingest_is_split_into_consecutive_parts() -> None:
    profile = created()
    big = [{"role": "user", "content": f"{i} " + "x" * 30_000} for i in range(200)]
    sid, messages = check_ingest(big, "s1", NOW)
    events = profile.ingest(sid, messages)
    assert len(events) > 1
    assert [e.part for e in events] == list(range(1, len(events) + 1))
    assert {e.parts for e in events} == {len(events)}
    assert [e.originator_version for e in events] == [
        profile.version + i for i in range(1, len(events) + 1)
    ]
    assert sum(len(e.messages) for e in events) == 200
    assert all(len(str(e.messages)) < PART_MAX_BYTES * 1.1 for e in events)


def test_an_extraction_is_recorded_once_and_supersedes_by_topic() -> None:
    profile = created()
    sid, messages = check_ingest([{"role": "user", "content": "I live in Rome"}], "s1", NOW)
    [ingested] = applied(profile, profile.ingest(sid, messages))
    source = ingested.ingest_id
    mid = messages[0].id
    applied(profile, profile.record_extraction(source, {}, [memory("m1", "user:lives_in", [mid])]))
    assert profile.record_extraction(source, {}, []) == []  # a redelivery: nothing
    applied(profile, profile.remember("m2", "I live in Milan", None))
    events = applied(
        profile, profile.record_extraction("m2", {}, [memory("m2", "user:lives_in", [])])
    )
    assert [type(e).__name__ for e in events] == ["MemoriesExtracted", "MemorySuperseded"]
    assert (events[1].memory_id, events[1].superseded_by) == ("m1", "m2")
    # Deleting the newer makes the older current again
    applied(profile, profile.delete_memory("m2"))
    assert profile.topics["user:lives_in"] == "m1"
    assert profile.memories["m1"].superseded_by is None


def test_an_extraction_of_forgotten_messages_records_nothing() -> None:
    profile = created()
    sid, messages = check_ingest([{"role": "user", "content": "I live in Rome"}], "s1", NOW)
    [ingested] = applied(profile, profile.ingest(sid, messages))
    applied(profile, profile.forget_session("s1"))
    assert profile.record_extraction(ingested.ingest_id, {}, [memory("m1", "t", [])]) == []


def test_deletes_of_unknown_things() -> None:
    profile = created()
    with pytest.raises(NotFoundError):
        profile.delete_memory("nope")
    assert profile.forget_session("nope") == []
    assert MemoryProfile.empty("default", "ghost").delete() == []
    with pytest.raises(NotFoundError):
        MemoryProfile.empty("default", "ghost").ingest("s1", [])
    applied(profile, profile.remember("r1", "x", None))
    with pytest.raises(InvalidInputError):
        profile.remember("r1", "x", None)


def test_the_same_messages_after_a_removal_are_a_new_ingest_to_extract() -> None:
    # Given an ingest that was extracted
    profile = created()
    sid, messages = check_ingest([{"role": "user", "content": "I live in Porto."}], "s1", NOW)
    [first] = applied(profile, profile.ingest(sid, messages))
    assert profile.generation() == ""
    applied(profile, profile.record_extraction(first.ingest_id, {"name": "t"}, []))
    # When its session is forgotten and the same messages are ingested again
    applied(profile, profile.forget_session("s1"))
    assert profile.generation() == "1"
    [again] = applied(profile, profile.ingest(sid, messages))
    # Then it is another ingest (another id), which the extractor's record accepts
    assert again.ingest_id != first.ingest_id
    assert [m["id"] for m in again.messages] == [m["id"] for m in first.messages]
    assert profile.record_extraction(again.ingest_id, {"name": "t"}, [])
    # And once more after the profile is deleted and created again
    applied(profile, profile.delete())
    applied(profile, profile.create())
    assert profile.generation() == "2"
    [third] = applied(profile, profile.ingest(sid, messages))
    assert third.ingest_id not in (first.ingest_id, again.ingest_id)
    # And without a forget in between, the same messages add nothing
    assert profile.ingest(sid, messages) == []


def test_the_messages_of_a_deleted_memory_ingested_again_are_a_new_ingest() -> None:
    # Given a one-message ingest whose memory was extracted, then deleted with its message
    profile = created()
    sid, messages = check_ingest([{"role": "user", "content": "I live in Porto."}], "s1", NOW)
    [first] = applied(profile, profile.ingest(sid, messages))
    found = memory("m1", "home", [m.id for m in messages])
    applied(profile, profile.record_extraction(first.ingest_id, {"name": "t"}, [found]))
    applied(profile, profile.delete_memory("m1"))
    # When the same message is ingested again
    [again] = applied(profile, profile.ingest(sid, messages))
    # Then it is another ingest, whose extraction is recorded
    assert again.ingest_id != first.ingest_id
    assert profile.record_extraction(again.ingest_id, {"name": "t"}, [])
