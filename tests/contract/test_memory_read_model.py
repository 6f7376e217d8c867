"""The Agent Memory and vectors read models' contract on every backend: profiles, raw messages,
memories with provenance and supersession, history, extraction progress, recall's lookups and
stored vectors — the same events give the same answers on SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.events import RecordedLog

from memstream.domain.memory_input import check_ingest
from memstream.domain.memory_profile import MemoryProfile
from memstream.projections.memory_projector import project_memory_event
from memstream.projections.ports import MemoryQueries
from memstream.projections.postgres import memory_writer as pg_writer
from memstream.projections.postgres.connection import connect
from memstream.projections.postgres.memory_queries import PgMemoryQueries
from memstream.projections.postgres.schema import migrate
from memstream.projections.sqlite import memory_writer as sqlite_writer
from memstream.projections.sqlite import vector_writer as sqlite_vectors
from memstream.projections.sqlite.database import open_database
from memstream.projections.sqlite.memory_queries import SqliteMemoryQueries
from memstream.projections.vector_projector import DropVectors, EmbedTexts
from memstream.workers.log.event_log import LogEntry

NS = "default"
MODEL = "test-model"
EXTRACTOR = {"name": "offline", "version": "1"}


class Backend:
    queries: MemoryQueries

    def apply(self, entries: list[LogEntry]) -> None:
        raise NotImplementedError

    def vectors(self, write: EmbedTexts | DropVectors, vectors: list[Any] | None = None) -> None:
        raise NotImplementedError


class SqliteBackend(Backend):
    def __init__(self, path: Path) -> None:
        self.connection: sqlite3.Connection = open_database(path)
        self.queries = SqliteMemoryQueries(self.connection)

    def apply(self, entries: list[LogEntry]) -> None:
        self.connection.execute("BEGIN IMMEDIATE")
        for entry in entries:
            writes = project_memory_event(entry.namespace(), entry.seq, entry.decode())
            sqlite_writer.apply_memory_writes(self.connection, writes)
        self.connection.execute("COMMIT")

    def vectors(self, write: EmbedTexts | DropVectors, vectors: list[Any] | None = None) -> None:
        with self.connection:
            if isinstance(write, EmbedTexts):
                sqlite_vectors.store_vectors(self.connection, write, MODEL, vectors or [])
            else:
                sqlite_vectors.drop_vectors(self.connection, write)

    def close(self) -> None:
        self.connection.close()


class PostgresBackend(Backend):
    def __init__(self, url: str) -> None:
        self.writer = connect(url)
        migrate(self.writer, url)
        self.reader = connect(url, autocommit=True)
        self.queries = PgMemoryQueries(self.reader)

    def apply(self, entries: list[LogEntry]) -> None:
        with self.writer.transaction():
            for entry in entries:
                writes = project_memory_event(entry.namespace(), entry.seq, entry.decode())
                pg_writer.apply_memory_writes(self.writer, writes)

    def vectors(self, write: EmbedTexts | DropVectors, vectors: list[Any] | None = None) -> None:
        with self.writer.transaction():
            if isinstance(write, EmbedTexts):
                pg_writer.store_vectors(self.writer, write, MODEL, vectors or [])
            else:
                pg_writer.drop_vectors(self.writer, write)

    def close(self) -> None:
        self.writer.close()
        self.reader.close()


def _memory(memory_id: str, summary: str, sources: list[str], **fields: Any) -> dict[str, Any]:
    return {
        "id": memory_id,
        "type": "fact",
        "topic_key": "user:lives_in",
        "summary": summary,
        "content": summary,
        "keywords": summary.lower().split()[:3],
        "queries": [f"What about {summary.split()[-1]}?"],
        "source_message_ids": sources,
        "event_time": None,
        "session_id": "s1",
        **fields,
    }


class Scenario:
    """A profile built step by step (decided on its aggregate, recorded as log records)."""

    def __init__(self, log: RecordedLog, profile: str = "alice") -> None:
        self.log = log
        self.profile = MemoryProfile.empty(log.namespace, profile)
        self.message_ids: dict[str, list[str]] = {}

    def step(self, decide: Callable[[MemoryProfile], list[Any]]) -> list[LogEntry]:
        events = decide(self.profile)
        for event in events:
            event.mutate(self.profile)
        return self.log.record(events)

    def ingest(self, session_id: str, texts: list[str], day: int = 1) -> list[LogEntry]:
        at = datetime(2026, 5, day, 10, tzinfo=UTC)
        _, messages = check_ingest(
            [{"role": "user", "content": t, "timestamp": at.isoformat()} for t in texts],
            session_id,
            at,
        )
        self.message_ids[session_id] = [m.id for m in messages]
        return self.step(lambda p: p.ingest(session_id, messages))

    def extract(self, memories: list[dict[str, Any]]) -> list[LogEntry]:
        source = next(iter(self.profile.pending))
        return self.step(lambda p: p.record_extraction(source, EXTRACTOR, memories))


def _build(backend: Backend, log: RecordedLog) -> Scenario:
    """Two sessions, three memories (the third supersedes the first), a remembered text."""
    alice = Scenario(log)
    backend.apply(alice.step(lambda p: p.create()))
    backend.apply(alice.ingest("s1", ["I live in Lisbon", "I adopted a cat named Miso"]))
    s1 = alice.message_ids["s1"]
    backend.apply(
        alice.extract(
            [
                _memory("m1", "User lives in Lisbon", [s1[0]]),
                _memory(
                    "m2",
                    "User adopted a cat named Miso",
                    [s1[1], s1[0]],
                    topic_key="user:pet",
                    event_time="2026-04-30T00:00:00Z",
                ),
            ]
        )
    )
    backend.apply(alice.ingest("s2", ["I moved to Porto last week"], day=9))
    s2 = alice.message_ids["s2"]
    backend.apply(
        alice.extract(
            [
                _memory(
                    "m3",
                    "User lives in Porto",
                    [s2[0]],
                    session_id="s2",
                    event_time="2026-05-02T00:00:00Z",
                )
            ]
        )
    )
    backend.apply(alice.step(lambda p: p.remember("r1", "Prefers tea over coffee", "s2")))
    bob = Scenario(log, "bob")
    backend.apply(bob.step(lambda p: p.create()))
    backend.apply(bob.ingest("s1", ["I live in Lisbon too"]))
    return alice


class MemoryReadModelContract:
    """What every backend answers (not collected itself: no ``Test`` prefix)."""

    @pytest.fixture
    def backend(self) -> Iterator[Backend]:
        raise NotImplementedError

    def test_profiles_memories_and_messages(self, backend: Backend) -> None:
        alice = _build(backend, RecordedLog())
        q = backend.queries
        profiles = q.profiles(NS)
        assert [(p["name"], p["memories"], p["messages"]) for p in profiles] == [
            ("alice", 3, 3),
            ("bob", 0, 1),
        ]
        assert q.exists(NS, "alice")
        assert not q.exists(NS, "carol")
        s1 = alice.message_ids["s1"]
        m2 = q.memory(NS, "alice", "m2")
        assert m2 is not None
        assert m2["content"] == "User adopted a cat named Miso"
        assert m2["source_message_ids"] == [s1[0], s1[1]]  # in message order
        assert m2["keywords"] == ["user", "adopted", "a"]
        assert m2["queries"] == ["What about Miso?"]
        assert m2["extractor"] == "offline/1"
        assert q.memory(NS, "bob", "m2") is None  # another profile's id is not found
        message = q.message(NS, "alice", s1[0])
        assert message is not None
        assert (message["session_id"], message["content"]) == ("s1", "I live in Lisbon")
        page, cursor = q.page(NS, "alice", 2)
        assert [m["id"] for m in page] == ["m3", "m2"]
        assert "content" not in page[0]
        assert cursor is not None
        rest, end = q.page(NS, "alice", 2, after=cursor)
        assert ([m["id"] for m in rest], end) == (["m1"], None)
        assert [m["id"] for m in q.page(NS, "alice", 10, session_id="s2")[0]] == ["m3"]
        assert [m["id"] for m in q.all_memories(NS, "alice")] == ["m1", "m2", "m3"]
        assert set(q.memories(NS, "alice", ["m1", "m3", "nope"])) == {"m1", "m3"}

    def test_supersession_and_history(self, backend: Backend) -> None:
        _build(backend, RecordedLog())
        q = backend.queries
        m1 = q.memory(NS, "alice", "m1")
        assert m1 is not None
        assert m1["superseded_by"] == "m3"
        history = q.history(NS, "alice", "m3")
        assert history is not None
        assert [(m["id"], m["current"]) for m in history] == [("m1", False), ("m3", True)]
        assert [e["action"] for e in history[0]["events"]] == ["created", "superseded"]
        assert q.history(NS, "alice", "nope") is None
        assert q.memories_by_topic(NS, "alice", ["user:lives_in"], 10) == ["m3", "m1"]

    def test_extraction_progress(self, backend: Backend) -> None:
        log = RecordedLog()
        alice = _build(backend, log)
        q = backend.queries
        assert q.pending_extractions(NS, "alice") == 1  # the remembered text waits
        found = q.extraction(NS, "alice", "r1")
        assert found is not None
        assert found[1] is None
        backend.apply(alice.extract([_memory("r1", "Prefers tea", [], topic_key="user:tea")]))
        done = q.extraction(NS, "alice", "r1")
        assert done is not None
        assert done[1] is not None
        assert done[1] > done[0]
        assert q.pending_extractions(NS, "alice") == 0
        assert q.extraction(NS, "alice", "unknown") is None

    @pytest.mark.parametrize(
        ("terms", "expected"),
        [
            (["lisbon"], {"m1"}),
            (["porto", "miso"], {"m2", "m3"}),
            (["cats"], {"m2"}),  # stemmed
            (["'); DROP TABLE memories; --"], set()),
            ([], set()),
        ],
    )
    def test_search_channels(self, backend: Backend, terms: list[str], expected: set[str]) -> None:
        alice = _build(backend, RecordedLog())
        q = backend.queries
        assert set(q.search_memories(NS, "alice", terms, 10)) == expected
        found = set(q.search_messages(NS, "alice", terms, 10))
        sources = q.memories_of_messages(NS, "alice", sorted(found))
        assert {m for ids in sources.values() for m in ids} >= expected - {"r1"}
        assert q.search_messages(NS, "bob", ["porto"], 10) == []
        s1 = alice.message_ids["s1"]
        assert q.memories_of_messages(NS, "alice", [s1[0]]) == {s1[0]: ["m2", "m1"]}

    def test_the_temporal_channel(self, backend: Backend) -> None:
        _build(backend, RecordedLog())
        q = backend.queries
        between = q.memories_between(NS, "alice", "2026-04-01T00:00:00Z", "2026-06-01", 10)
        assert between == ["m3", "m2"]
        assert q.memories_between(NS, "alice", "2026-05-01", "2026-05-02", 10) == []

    def test_deletes(self, backend: Backend) -> None:
        log = RecordedLog()
        alice = _build(backend, log)
        q = backend.queries
        s2 = alice.message_ids["s2"]
        backend.apply(alice.step(lambda p: p.delete_memory("m3")))
        assert q.memory(NS, "alice", "m3") is None
        assert q.message(NS, "alice", s2[0]) is None  # its source message went with it
        m1 = q.memory(NS, "alice", "m1")
        assert m1 is not None
        assert m1["superseded_by"] is None  # current again
        backend.apply(alice.step(lambda p: p.forget_session("s1")))
        assert q.all_memories(NS, "alice") == []
        assert q.search_messages(NS, "alice", ["lisbon"], 10) == []
        assert q.exists(NS, "bob")
        assert q.search_messages(NS, "bob", ["lisbon"], 10) != []
        backend.apply(alice.step(lambda p: p.delete()))
        assert not q.exists(NS, "alice")
        assert [p["name"] for p in q.profiles(NS)] == ["bob"]

    def test_text_with_nul_round_trips(self, backend: Backend) -> None:
        tricky = "I live in Lisbon\x00 \ue000 really"
        alice = Scenario(RecordedLog())
        backend.apply(alice.step(lambda p: p.create()))
        backend.apply(alice.ingest("s1", [tricky]))
        (message_id,) = alice.message_ids["s1"]
        backend.apply(alice.extract([_memory("m1", tricky, [message_id])]))
        q = backend.queries
        message = q.message(NS, "alice", message_id)
        assert message is not None
        assert message["content"] == tricky
        memory = q.memory(NS, "alice", "m1")
        assert memory is not None
        assert (memory["summary"], memory["content"]) == (tricky, tricky)
        assert q.search_memories(NS, "alice", ["lisbon"], 5) == ["m1"]

    def test_vectors(self, backend: Backend) -> None:
        vectors = [np.arange(4, dtype=np.float32) + i for i in range(3)]
        items = [("b", "s1", "x"), ("a", "s1", "y"), ("c", "s2", "z")]
        backend.vectors(EmbedTexts(NS, "alice", "memory", items, 7), vectors)
        q = backend.queries
        ids, blobs = q.vectors(NS, "alice", "memory", MODEL)
        assert ids == ["a", "b", "c"]
        assert np.frombuffer(blobs[0], dtype=np.float32).tolist() == [1.0, 2.0, 3.0, 4.0]
        assert q.vector_state(NS, "alice", "memory") == (3, 7)
        assert q.vectors(NS, "alice", "memory", "another-model") == ([], [])
        backend.vectors(DropVectors(NS, "alice", "memory", ids=("a",)))
        assert q.vectors(NS, "alice", "memory", MODEL)[0] == ["b", "c"]
        backend.vectors(DropVectors(NS, "alice", session_id="s2"))
        assert q.vectors(NS, "alice", "memory", MODEL)[0] == ["b"]
        backend.vectors(DropVectors(NS, "alice"))
        assert q.vector_state(NS, "alice", "memory") == (0, 0)


class TestSqliteMemoryReadModel(MemoryReadModelContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[Backend]:
        backend = SqliteBackend(tmp_path / "rm.db")
        yield backend
        backend.close()


@pytest.mark.postgres
class TestPostgresMemoryReadModel(MemoryReadModelContract):
    @pytest.fixture
    def backend(self, postgres_url: str) -> Iterator[Backend]:
        backend = PostgresBackend(postgres_url)
        yield backend
        backend.close()


def _answers(q: MemoryQueries, alice: Scenario) -> dict[str, Any]:
    every = ["m1", "m2", "m3", "r1"]
    messages = [m for ids in alice.message_ids.values() for m in ids]
    return {
        "profiles": q.profiles(NS),
        "memories": [q.memory(NS, "alice", m) for m in every],
        "messages": [q.message(NS, "alice", m) for m in messages],
        "page": q.page(NS, "alice", 10),
        "history": [q.history(NS, "alice", m) for m in every],
        "sources": q.memories_of_messages(NS, "alice", messages),
        "topics": q.memories_by_topic(NS, "alice", ["user:lives_in", "user:pet"], 10),
        "pending": q.pending_extractions(NS, "alice"),
        "search": sorted(q.search_memories(NS, "alice", ["lisbon", "porto", "cat"], 10)),
    }


@pytest.mark.postgres
def test_sqlite_and_postgresql_answer_alike(postgres_url: str, tmp_path: Path) -> None:
    sqlite, postgres = SqliteBackend(tmp_path / "rm.db"), PostgresBackend(postgres_url)
    try:
        log = RecordedLog()
        alice = _build(sqlite, log)
        postgres.apply(log.entries)
        assert _answers(postgres.queries, alice) == _answers(sqlite.queries, alice)
        deleting = alice.step(lambda p: p.delete_memory("m3"))
        sqlite.apply(deleting)
        postgres.apply(deleting)
        assert _answers(postgres.queries, alice) == _answers(sqlite.queries, alice)
    finally:
        sqlite.close()
        postgres.close()
