"""The context and registry read models' contract on every backend: the same events give the
same answers (blocks, prompts, skills, search entries; registered sessions and their pages)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.events import RecordedLog
from support.messages import msg

from memstream.projections.context_projector import project_context_event
from memstream.projections.ports import ContextQueries, RegistryQueries
from memstream.projections.postgres.connection import connect
from memstream.projections.postgres.context_queries import PgContextQueries
from memstream.projections.postgres.context_writer import (
    apply_context_writes as pg_apply_context_writes,
)
from memstream.projections.postgres.registry_queries import PgRegistryQueries
from memstream.projections.postgres.registry_writer import (
    apply_registry_writes as pg_apply_registry_writes,
)
from memstream.projections.postgres.schema import migrate
from memstream.projections.registry_projector import project_registry_event
from memstream.projections.sqlite.context_queries import SqliteContextQueries
from memstream.projections.sqlite.context_writer import (
    apply_context_writes as sqlite_apply_context_writes,
)
from memstream.projections.sqlite.database import open_database
from memstream.projections.sqlite.registry_queries import SqliteRegistryQueries
from memstream.projections.sqlite.registry_writer import (
    apply_registry_writes as sqlite_apply_registry_writes,
)
from memstream.workers.log.event_log import LogEntry

NS = "default"


class Backend:
    context: ContextQueries
    registry: RegistryQueries

    def apply(self, entries: list[LogEntry]) -> None:
        raise NotImplementedError


class SqliteBackend(Backend):
    def __init__(self, path: Path) -> None:
        self.connection: sqlite3.Connection = open_database(path)
        self.context = SqliteContextQueries(self.connection)
        self.registry = SqliteRegistryQueries(self.connection)

    def apply(self, entries: list[LogEntry]) -> None:
        self.connection.execute("BEGIN IMMEDIATE")
        for entry in entries:
            event, namespace = entry.decode(), entry.namespace()
            sqlite_apply_context_writes(
                self.connection, project_context_event(namespace, entry.seq, event)
            )
            sqlite_apply_registry_writes(
                self.connection, project_registry_event(namespace, entry.seq, event)
            )
        self.connection.execute("COMMIT")


class PostgresBackend(Backend):
    def __init__(self, url: str) -> None:
        self.writer = connect(url)
        migrate(self.writer, url)
        self.reader = connect(url, autocommit=True)
        self.context = PgContextQueries(self.reader)
        self.registry = PgRegistryQueries(self.reader)

    def apply(self, entries: list[LogEntry]) -> None:
        with self.writer.transaction():
            for entry in entries:
                event, namespace = entry.decode(), entry.namespace()
                pg_apply_context_writes(
                    self.writer, project_context_event(namespace, entry.seq, event)
                )
                pg_apply_registry_writes(
                    self.writer, project_registry_event(namespace, entry.seq, event)
                )


class ContextRegistryContract:
    """What every backend answers (not collected itself: no ``Test`` prefix)."""

    @pytest.fixture
    def backend(self) -> Iterator[Backend]:
        raise NotImplementedError

    # -- context ---------------------------------------------------------------------------

    def test_blocks_are_written_replaced_listed_and_dropped(self, backend: Backend) -> None:
        log = RecordedLog()
        backend.apply(log.block("notes", "s", "first notes"))
        backend.apply(log.block("notes", "s", "second notes"))
        backend.apply(log.block("persona", None, "a calm helper"))
        backend.apply(log.block("todo", "s", "buy milk"))
        q = backend.context
        assert q.block_content(NS, "notes", "s") == "second notes"
        assert q.block_content(NS, "persona", "") == "a calm helper"
        assert q.block_content(NS, "notes", "other") is None
        listed = q.blocks(NS)
        assert [(b["session_id"], b["label"]) for b in listed] == [
            ("", "persona"),
            ("s", "notes"),
            ("s", "todo"),
        ]
        assert {b["content"] for b in q.blocks(NS, "s")} == {"second notes", "buy milk"}
        assert listed[1]["seq"] == 2
        assert listed[1]["updated_at"]
        assert set(listed[1]) == {"key", "label", "session_id", "content", "seq", "updated_at"}
        backend.apply(log.delete_block("todo", "s"))
        assert q.block_content(NS, "todo", "s") is None
        assert q.blocks("another-namespace") == []

    def test_prompts_and_skills_follow_the_session(self, backend: Backend) -> None:
        log = RecordedLog()
        backend.apply(log.session("s", lambda s: s.freeze_system_prompt("be brief")))
        backend.apply(log.session("s", lambda s: s.load_skill("docs", "a")))
        backend.apply(log.session("s", lambda s: s.load_skill("docs", "b")))
        backend.apply(log.session("s", lambda s: s.load_skill("tools", "c")))
        backend.apply(log.session("s", lambda s: s.unload_skill("docs", "a")))
        q = backend.context
        assert q.cached_prompt(NS, "s") == "be brief"
        assert q.loaded_skills(NS, "s") == ["docs:b", "tools:c"]
        backend.apply(log.session("s", lambda s: s.clear_system_prompt()))
        backend.apply(log.session("s", lambda s: s.clear_messages()))
        assert q.cached_prompt(NS, "s") is None
        assert q.loaded_skills(NS, "s") == []

    def test_text_with_nul_and_private_use_characters_round_trips(self, backend: Backend) -> None:
        tricky = "before\x00after \ue000\ue002 end"
        log = RecordedLog()
        backend.apply(log.block("notes", "s", tricky))
        backend.apply(log.entry("kb", "k1", f"garlic {tricky}"))
        backend.apply(log.session("s", lambda s: s.freeze_system_prompt(tricky)))
        q = backend.context
        assert q.block_content(NS, "notes", "s") == tricky
        assert [b["content"] for b in q.blocks(NS, "s")] == [tricky]
        assert q.search_entries(NS, "kb", "garlic", 5) == [("k1", f"garlic {tricky}")]
        assert q.search_entries(NS, "kb", "after", 5) == [("k1", f"garlic {tricky}")]
        assert q.cached_prompt(NS, "s") == tricky

    @pytest.mark.parametrize(
        ("query", "expected"),
        [
            ("garlic", {"k1"}),
            ("roasted OR soup", {"k1", "k2"}),
            ('"tomato soup"', {"k2"}),
            ("soup -tomato", set()),
            ("'); DELETE FROM search_entries; --", set()),
            ("", set()),
        ],
    )
    def test_search_entries(self, backend: Backend, query: str, expected: set[str]) -> None:
        log = RecordedLog()
        backend.apply(log.entry("kb", "k1", "roasted garlic bread"))
        backend.apply(log.entry("kb", "k2", "tomato soup with basil"))
        backend.apply(log.entry("kb", "k3", "old text about lentils"))
        backend.apply(log.entry("kb", "k3", "plain rice"))  # replaced: its old terms go
        backend.apply(log.entry("other", "x1", "garlic soup"))
        q = backend.context
        assert {key for key, _ in q.search_entries(NS, "kb", query, 10)} == expected
        assert q.search_entries(NS, "kb", "lentils", 10) == []
        assert q.search_entries(NS, "kb", "rice", 10) == [("k3", "plain rice")]
        assert q.entry_count(NS, "kb") == 3
        assert q.entry_count(NS, "nothing") == 0
        assert q.search_entries(NS, "nothing", "garlic", 10) == []

    # -- registry --------------------------------------------------------------------------

    def test_registered_sessions_and_their_changes(self, backend: Backend) -> None:
        log = RecordedLog()
        backend.apply(
            log.registry(
                "s1",
                lambda r: r.create("Trip", model="gpt-x", source="cli", parent_session_id="s0"),
            )
        )
        backend.apply(log.registry("s1", lambda r: r.rename("Trip to Lisbon")))
        backend.apply(log.registry("s1", lambda r: r.add_usage(120, 30, 0.0042)))
        backend.apply(log.registry("s1", lambda r: r.add_usage(10, 5, 0.001)))
        backend.apply(log.registry("s1", lambda r: r.end("compaction")))
        info = backend.registry.session(NS, "s1")
        assert info is not None
        expected: dict[str, Any] = {
            "id": "s1",
            "name": "Trip to Lisbon",
            "parent_session_id": "s0",
            "model": "gpt-x",
            "source": "cli",
            "input_tokens": 130,
            "output_tokens": 35,
            "end_reason": "compaction",
        }
        assert {k: info[k] for k in expected} == expected
        assert info["estimated_cost"] == pytest.approx(0.0052)
        assert info["created_at"] <= info["updated_at"]
        backend.apply(log.registry("s1", lambda r: r.delete()))
        assert backend.registry.session(NS, "s1") is None
        assert backend.registry.count(NS) == 0

    def test_pages_are_most_recently_active_first(self, backend: Backend) -> None:
        log = RecordedLog()
        for name in ("a", "b", "c", "d"):
            backend.apply(log.registry(name, lambda r, name=name: r.create(name.upper())))
        backend.apply(log.session("b", lambda s: s.append_message(msg("m1"))))  # b is active
        backend.apply(log.session("z", lambda s: s.append_message(msg("m1"))))  # not registered
        q = backend.registry
        first, cursor = q.page(NS, 2)
        assert [s["id"] for s in first] == ["b", "d"]
        assert cursor is not None
        rest, end = q.page(NS, 2, before=cursor)
        assert [s["id"] for s in rest] == ["c", "a"]
        assert end is None
        assert q.count(NS) == 4
        assert q.session(NS, "z") is None


class TestSqliteContextRegistry(ContextRegistryContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[Backend]:
        backend = SqliteBackend(tmp_path / "rm.db")
        yield backend
        backend.connection.close()


@pytest.mark.postgres
class TestPostgresContextRegistry(ContextRegistryContract):
    @pytest.fixture
    def backend(self, postgres_url: str) -> Iterator[Backend]:
        backend = PostgresBackend(postgres_url)
        yield backend
        backend.writer.close()
        backend.reader.close()
