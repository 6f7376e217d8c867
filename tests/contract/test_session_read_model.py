"""The sessions read model's contract on every backend: the same events give the same answers.

:class:`SessionReadModelContract` says what the session queries answer after the session
projection applied some events (each test names the answers it expects); each backend's
subclass says how to apply events and read. A property test drives random trees through
SQLite and PostgreSQL side by side and compares every query.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.events import RecordedLog
from support.messages import ids, msg

from memstream.domain.session import SessionAggregate
from memstream.projections.ports import SessionQueries
from memstream.projections.postgres.connection import connect
from memstream.projections.postgres.schema import migrate
from memstream.projections.postgres.session_queries import PgSessionQueries
from memstream.projections.postgres.session_writer import PgSessionRows
from memstream.projections.postgres.session_writer import (
    apply_session_writes as pg_apply_session_writes,
)
from memstream.projections.session_projector import InsertMessage, project_session_event
from memstream.projections.sqlite.database import open_database
from memstream.projections.sqlite.session_queries import SqliteSessionQueries
from memstream.projections.sqlite.session_writer import SessionRows
from memstream.projections.sqlite.session_writer import (
    apply_session_writes as sqlite_apply_session_writes,
)
from memstream.workers.log.event_log import LogEntry

NS = "default"
Decide = Callable[[SessionAggregate], list[Any]]


class Backend:
    """A sessions read model of one backend: ``apply`` log records in one transaction, read
    through ``queries``."""

    queries: SessionQueries

    def apply(self, entries: list[LogEntry]) -> None:
        raise NotImplementedError


class SqliteBackend(Backend):
    def __init__(self, path: Path) -> None:
        self.connection: sqlite3.Connection = open_database(path)
        self.queries = SqliteSessionQueries(self.connection)
        self.rows = SessionRows()

    def apply(self, entries: list[LogEntry]) -> None:
        self.connection.execute("BEGIN IMMEDIATE")
        for entry in entries:
            writes = project_session_event(entry.namespace(), entry.seq, entry.decode())
            sqlite_apply_session_writes(self.connection, writes, self.rows)
        self.rows.flush(self.connection)
        self.connection.execute("COMMIT")

    def close(self) -> None:
        self.connection.close()


class PostgresBackend(Backend):
    def __init__(self, url: str) -> None:
        self.writer = connect(url)
        migrate(self.writer, url)
        self.reader = connect(url, autocommit=True)
        self.queries = PgSessionQueries(self.reader)
        self.rows = PgSessionRows()

    def apply(self, entries: list[LogEntry]) -> None:
        with self.writer.transaction():
            for entry in entries:
                writes = project_session_event(entry.namespace(), entry.seq, entry.decode())
                pg_apply_session_writes(self.writer, writes, self.rows)
            self.rows.flush(self.writer)

    def close(self) -> None:
        self.writer.close()
        self.reader.close()


class SessionReadModelContract:
    """What every backend's session queries answer (not collected itself: no ``Test``)."""

    @pytest.fixture
    def backend(self) -> Iterator[Backend]:
        raise NotImplementedError

    @pytest.fixture
    def log(self) -> RecordedLog:
        return RecordedLog()

    def given(self, backend: Backend, log: RecordedLog, *steps: tuple[str, Decide]) -> None:
        entries: list[LogEntry] = []
        for session_id, decide in steps:
            entries += log.session(session_id, decide)
        backend.apply(entries)

    # -- paths -----------------------------------------------------------------------------

    def test_a_chain_reads_root_to_leaf_with_its_sizes(
        self, backend: Backend, log: RecordedLog
    ) -> None:
        self.given(
            backend,
            log,
            ("s", lambda s: s.append_message(msg("m1", "héllo ✓"))),
            ("s", lambda s: s.append_messages([msg("m2"), msg("m3"), msg("m4")])),
        )
        q = backend.queries
        assert ids(q.history(NS, "s")) == ["m1", "m2", "m3", "m4"]
        assert q.path_length(NS, "s") == 4
        assert q.path_length(NS, "s", "m2") == 2
        leaf = q.latest_leaf(NS, "s")
        assert leaf is not None
        assert leaf["id"] == "m4"
        stats = q.row_stats(NS, "s")
        assert [r["id"] for r in stats] == ["m1", "m2", "m3", "m4"]
        assert stats[0]["bytes"] > len("héllo ✓")  # bytes of the stored JSON, UTF-8
        assert q.message_count(NS, "s") == 4
        assert q.history(NS, "nobody") == []
        assert q.path_length(NS, "nobody") == 0

    def test_branches_and_the_latest_leaf(self, backend: Backend, log: RecordedLog) -> None:
        self.given(
            backend,
            log,
            ("s", lambda s: s.append_message(msg("m1"))),
            ("s", lambda s: s.append_message(msg("m2"), parent_id="m1")),
            ("s", lambda s: s.append_message(msg("m3"), parent_id="m1")),
        )
        q = backend.queries
        assert ids(q.branches(NS, "s", "m1")) == ["m2", "m3"]
        assert ids(q.history(NS, "s")) == ["m1", "m3"]
        assert ids(q.history(NS, "s", "m2")) == ["m1", "m2"]
        summary = q.summary(NS, "s")
        assert summary is not None
        assert (summary["messages"], summary["leaves"], summary["latest_leaf"]) == (3, 2, "m3")
        assert summary["path_length"] == 2

    def test_an_update_changes_sizes_and_search(self, backend: Backend, log: RecordedLog) -> None:
        self.given(
            backend,
            log,
            ("s", lambda s: s.append_messages([msg("m1", "about kyoto"), msg("m2", "x")])),
            ("s", lambda s: s.update_message(msg("m1", "about lisbon and a longer text"))),
        )
        q = backend.queries
        assert [h["id"] for h in q.search(NS, "s", "lisbon", 10)] == ["m1"]
        assert q.search(NS, "s", "kyoto", 10) == []
        recent = q.recent_history(NS, "s", 10_000)
        assert ids(recent.messages) == ["m1", "m2"]
        assert recent.total_content_bytes == sum(r["bytes"] for r in q.row_stats(NS, "s"))

    def test_a_deleted_message_leaves_its_children_as_roots_until_it_returns(
        self, backend: Backend, log: RecordedLog
    ) -> None:
        self.given(
            backend,
            log,
            ("s", lambda s: s.append_messages([msg("m1"), msg("m2"), msg("m3"), msg("m4")])),
            ("s", lambda s: s.delete_messages(["m2"])),
        )
        q = backend.queries
        assert ids(q.history(NS, "s")) == ["m3", "m4"]
        assert q.path_length(NS, "s") == 2
        assert q.message_count(NS, "s") == 3
        self.given(backend, log, ("s", lambda s: s.append_message(msg("m2"), parent_id="m1")))
        assert ids(q.history(NS, "s", "m4")) == ["m1", "m2", "m3", "m4"]
        assert q.path_length(NS, "s", "m4") == 4
        total = sum(r["bytes"] for r in q.row_stats(NS, "s"))
        assert q.recent_history(NS, "s", 1).total_content_bytes == total

    def test_a_cleared_session_is_empty(self, backend: Backend, log: RecordedLog) -> None:
        self.given(
            backend,
            log,
            ("s", lambda s: s.append_messages([msg("m1"), msg("m2")])),
            ("s", lambda s: s.add_compaction("sum", "m1", "m1")),
            ("s", lambda s: s.clear_messages()),
        )
        q = backend.queries
        assert q.history(NS, "s") == []
        assert q.message_count(NS, "s") == 0
        assert q.compactions(NS, "s") == []
        assert q.sessions(NS) == [
            {"session_id": "s", "messages": 0, "first_at": None, "last_at": None}
        ]
        summary = q.summary(NS, "s")
        assert summary is not None
        assert (summary["messages"], summary["leaves"], summary["latest_leaf"]) == (0, 0, None)

    def test_overlays_replace_their_span_in_history(
        self, backend: Backend, log: RecordedLog
    ) -> None:
        self.given(
            backend,
            log,
            ("s", lambda s: s.append_messages([msg(f"m{i}") for i in range(1, 6)])),
            ("s", lambda s: s.add_compaction("the first three", "m1", "m3")),
        )
        q = backend.queries
        history = q.history(NS, "s")
        assert len(history) == 3
        assert "the first three" in str(history[0])
        assert ids(history[1:]) == ["m4", "m5"]
        assert [c.summary for c in q.compactions(NS, "s")] == ["the first three"]
        assert q.path_length(NS, "s") == 5  # raw messages

    def test_text_with_nul_round_trips(self, backend: Backend, log: RecordedLog) -> None:
        tricky = "left\x00right \ue000 marker"
        self.given(
            backend,
            log,
            ("s", lambda s: s.append_messages([msg("m1", tricky), msg("m2", "x")])),
            ("s", lambda s: s.add_compaction(tricky, "m1", "m1")),
        )
        q = backend.queries
        assert q.message(NS, "s", "m1") == msg("m1", tricky)
        assert [c.summary for c in q.compactions(NS, "s")] == [tricky]
        assert [h["id"] for h in q.search(NS, "s", "right", 5)] == ["m1"]

    def test_a_recent_window_keeps_what_fits_the_budget(
        self, backend: Backend, log: RecordedLog
    ) -> None:
        self.given(
            backend,
            log,
            ("s", lambda s: s.append_messages([msg(f"m{i}", "x" * 100) for i in range(10)])),
        )
        q = backend.queries
        size = q.row_stats(NS, "s")[0]["bytes"]
        recent = q.recent_history(NS, "s", size * 3)
        assert ids(recent.messages) == ["m7", "m8", "m9"]
        assert recent.truncated
        assert recent.total_content_bytes == size * 10
        assert ids(q.recent_history(NS, "s", 1, min_recent_messages=2).messages) == ["m8", "m9"]
        assert not q.recent_history(NS, "s", size * 10).truncated

    def test_path_messages_containing_a_needle(self, backend: Backend, log: RecordedLog) -> None:
        self.given(
            backend,
            log,
            (
                "s",
                lambda s: s.append_messages(
                    [
                        msg("m1", "needle one", role="assistant"),
                        msg("m2", "needle two"),
                        msg("m3", "none", role="assistant"),
                        msg("m4", "needle three", role="assistant"),
                    ]
                ),
            ),
        )
        found = backend.queries.path_messages_containing(NS, "s", "assistant", "needle")
        assert ids(found) == ["m1", "m4"]

    # -- search ----------------------------------------------------------------------------

    @pytest.fixture
    def searchable(self, backend: Backend, log: RecordedLog) -> Backend:
        self.given(
            backend,
            log,
            (
                "a",
                lambda s: s.append_messages(
                    [
                        msg("a1", "Could you help me plan a trip to Kyoto?"),
                        msg("a2", "Lisbon has great pastries", role="assistant"),
                        msg("a3", "python asyncio tips"),
                        msg("a4", "python typing tips"),
                    ]
                ),
            ),
            ("b", lambda s: s.append_message(msg("b1", "Kyoto temples in autumn"))),
        )
        log_other = RecordedLog("other")
        backend.apply(log_other.session("a", lambda s: s.append_message(msg("o1", "kyoto"))))
        return backend

    @pytest.mark.parametrize(
        ("query", "expected"),
        [
            ("kyoto", {"a1"}),
            ("KYOTO trip", {"a1"}),
            ('"could you help"', {"a1"}),
            ('"help could"', set()),
            ("kyoto OR lisbon", {"a1", "a2"}),
            ("python -asyncio", {"a4"}),
            ('python -"typing tips"', {"a3"}),
            ("pastry", {"a2"}),  # stemmed
            ("tips", {"a3", "a4"}),
            ("", set()),
            ("-python", set()),
            ("'; DROP TABLE messages; --", set()),
            ("a1') OR 1=1 --", set()),
            ('"unbalanced', set()),
            ("%s %(x)s {}", set()),
        ],
    )
    def test_search_in_a_session(self, searchable: Backend, query: str, expected: set[str]) -> None:
        hits = searchable.queries.search(NS, "a", query, 10)
        assert {h["id"] for h in hits} == expected
        assert all(h["session_id"] == "a" for h in hits)
        # The tables are intact after hostile text.
        assert searchable.queries.message_count(NS, "a") == 4

    def test_search_across_a_namespace_and_its_hits(self, searchable: Backend) -> None:
        hits = searchable.queries.search(NS, None, "kyoto", 10)
        assert {(h["id"], h["session_id"]) for h in hits} == {("a1", "a"), ("b1", "b")}
        a1 = next(h for h in hits if h["id"] == "a1")
        assert a1["content"] == "Could you help me plan a trip to Kyoto?"
        assert a1["role"] == "user"
        assert a1["created_at"]
        assert len(searchable.queries.search(NS, None, "kyoto", 1)) == 1
        assert [h["id"] for h in searchable.queries.search("other", None, "kyoto", 10)] == ["o1"]

    def test_sessions_of_a_namespace(self, searchable: Backend) -> None:
        sessions = searchable.queries.sessions(NS)
        assert [(s["session_id"], s["messages"]) for s in sessions] == [("a", 4), ("b", 1)]
        assert all(s["first_at"] and s["last_at"] for s in sessions)


class TestSqliteSessionReadModel(SessionReadModelContract):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[Backend]:
        backend = SqliteBackend(tmp_path / "rm.db")
        yield backend
        backend.close()


@pytest.mark.postgres
class TestPostgresSessionReadModel(SessionReadModelContract):
    @pytest.fixture
    def backend(self, postgres_url: str) -> Iterator[Backend]:
        backend = PostgresBackend(postgres_url)
        yield backend
        backend.close()


# -- both backends, side by side ---------------------------------------------------------------

_IDS = [f"m{i}" for i in range(8)]
_WORDS = ["kyoto", "lisbon", "tea", "garden", "train", "python", "tips", "autumn"]
_KINDS = ["append", "append", "append", "chain", "update", "update", "delete", "delete"]
_KINDS += ["restore", "restore", "compact", "clear"]
# (kind, an id of the pool (a new message, maybe one deleted before), picks among the stored
# ids (a parent, the target of an update, delete or overlay), a text)
_operation = st.tuples(
    st.sampled_from(_KINDS),
    st.sampled_from(_IDS),
    st.lists(st.integers(0, 63), min_size=2, max_size=4),
    st.lists(st.sampled_from(_WORDS), min_size=1, max_size=6).map(" ".join),
)


def _decide(operation: tuple[Any, ...], stored: list[str], deleted: list[str]) -> Decide:
    """The command of ``operation`` on a session whose stored ids are ``stored`` (oldest
    first) and whose deleted ones are ``deleted``, which it keeps up to date."""
    kind, new_id, picks, text = operation

    def pick(index: int) -> str | None:
        return stored[picks[index] % len(stored)] if stored else None

    def decide(s: SessionAggregate) -> list[Any]:
        events: list[Any]
        try:
            if kind == "append":
                parent = pick(0) if picks[1] % 4 else None
                events = s.append_message(msg(new_id, text), parent_id=parent)
                chain = [new_id]
            elif kind == "restore" and deleted:
                # A deleted message comes back: its orphans point at it again.
                chain = [deleted[picks[0] % len(deleted)]]
                events = s.append_message(msg(chain[0], text), parent_id=pick(1))
            elif kind == "chain":
                chain = list(dict.fromkeys(_IDS[p % len(_IDS)] for p in picks))
                events = s.append_messages([msg(m, text) for m in chain])
            elif kind == "update" and stored:
                events = s.update_message(msg(str(pick(0)), text))
            elif kind == "delete" and stored:
                chain = sorted({str(pick(0)), str(pick(1))})
                events = s.delete_messages(chain)
            elif kind == "compact" and stored:
                events = s.add_compaction(f"summary: {text}", str(pick(0)), str(pick(1)))
            elif kind == "clear":
                events = s.clear_messages()
            else:
                return []
        except (LookupError, ValueError):
            return []  # refused by the domain: no events
        if events and kind in ("append", "chain", "restore"):
            stored.extend(m for m in chain if m not in stored)
            deleted[:] = [m for m in deleted if m not in chain]
        elif events and kind == "delete":
            stored[:] = [m for m in stored if m not in chain]
            deleted.extend(chain)
        elif events and kind == "clear":
            stored.clear()
        return events

    return decide


def _answers(queries: SessionQueries, ns: str) -> dict[str, Any]:
    return {
        "history": queries.history(ns, "s"),
        "each": {m: (queries.history(ns, "s", m), queries.path_length(ns, "s", m)) for m in _IDS},
        "branches": {m: queries.branches(ns, "s", m) for m in _IDS},
        "rows": queries.row_stats(ns, "s"),
        "leaf": queries.latest_leaf(ns, "s"),
        "summary": queries.summary(ns, "s"),
        "recent": [queries.recent_history(ns, "s", budget) for budget in (1, 200, 10_000)],
        "count": queries.message_count(ns, "s"),
        "compactions": queries.compactions(ns, "s"),
        "search": {w: sorted(h["id"] for h in queries.search(ns, "s", w, 50)) for w in _WORDS[:4]},
        "sessions": queries.sessions(ns),
    }


@pytest.mark.postgres
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    operations=st.lists(_operation, min_size=1, max_size=16),
    commits=st.lists(st.booleans(), min_size=16, max_size=16),
)
def test_random_trees_read_the_same_on_sqlite_and_postgresql(
    postgres_url: str, tmp_path: Path, operations: list[Any], commits: list[bool]
) -> None:
    # One database and one file for every example, each example in a namespace of its own.
    ns = f"n{uuid.uuid4().hex[:10]}"
    sqlite = SqliteBackend(tmp_path / "rm.db")
    postgres = PostgresBackend(postgres_url)
    try:
        log = RecordedLog(ns)
        stored: list[str] = []
        deleted: list[str] = []
        batch: list[LogEntry] = []
        for operation, commit in zip(operations, commits, strict=False):
            entries = log.session("s", _decide(operation, stored, deleted))
            # Each command's events in a transaction of their own on SQLite; on PostgreSQL,
            # the commands of a batch together (as a projector does), so that the inserts it
            # holds meet deletes, restores (orphans adopted) and updates of their batch.
            sqlite.apply(entries)
            batch += entries
            if commit:
                postgres.apply(batch)
                batch = []
        postgres.apply(batch)
        assert _answers(postgres.queries, ns) == _answers(sqlite.queries, ns)
    finally:
        sqlite.close()
        postgres.close()


@pytest.mark.postgres
def test_held_inserts_meet_orphans_and_a_repeated_id_as_row_by_row_writes_do(
    postgres_url: str, tmp_path: Path
) -> None:
    """PostgreSQL holds a batch's message inserts and writes them with one statement: in one
    batch, a restored message adopts its orphans while a child of an orphan is held, and an id
    inserted twice keeps its first content (the statement is undone and made row by row). The
    answers are SQLite's, whose writer inserts row by row."""
    ns = f"n{uuid.uuid4().hex[:10]}"
    log = RecordedLog(ns)
    first = log.session("s", lambda s: s.append_messages([msg("m1"), msg("m2"), msg("m3")]))
    first += log.session("s", lambda s: s.delete_messages(["m2"]))
    second = log.session("s", lambda s: s.append_message(msg("m2", "back"), parent_id="m1"))
    second += log.session("s", lambda s: s.append_message(msg("m4", "kyoto"), parent_id="m3"))
    second += log.session("s", lambda s: s.append_message(msg("m5", "lisbon"), parent_id="m4"))
    writes = [w for e in second for w in project_session_event(ns, e.seq, e.decode())]
    inserts = [w for w in writes if isinstance(w, InsertMessage)]
    again = replace(inserts[1], content=inserts[2].content, text="osaka")  # m4 once more
    writes.insert(writes.index(inserts[2]), again)
    sqlite = SqliteBackend(tmp_path / "rm.db")
    postgres = PostgresBackend(postgres_url)
    try:
        sqlite.apply(first)
        postgres.apply(first)
        sqlite.connection.execute("BEGIN IMMEDIATE")
        sqlite_apply_session_writes(sqlite.connection, writes, sqlite.rows)
        sqlite.rows.flush(sqlite.connection)
        sqlite.connection.execute("COMMIT")
        with postgres.writer.transaction():
            pg_apply_session_writes(postgres.writer, writes, postgres.rows)
            postgres.rows.flush(postgres.writer)
        answers = _answers(postgres.queries, ns)
        assert answers == _answers(sqlite.queries, ns)
        assert ids(answers["each"]["m5"][0]) == ["m1", "m2", "m3", "m4", "m5"]
        assert answers["search"]["kyoto"] == ["m4"]
        assert postgres.queries.search(ns, "s", "osaka", 10) == []
    finally:
        sqlite.close()
        postgres.close()
