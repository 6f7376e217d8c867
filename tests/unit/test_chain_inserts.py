"""Chains of new messages are inserted in one executemany (their row ids and path aggregates
worked out in Python); the read model is the same as row by row, whatever came before: deleted
messages re-appended under the chain (orphans), ids that exist, branches, clears."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.messages import msg

from memstream.domain.errors import MemstreamError
from memstream.domain.session import OMITTED, SessionAggregate
from memstream.projections.session_projector import project_session_event
from memstream.projections.sqlite import session_writer
from memstream.projections.sqlite.checksum import checksum
from memstream.projections.sqlite.database import open_database
from memstream.projections.sqlite.session_queries import SqliteSessionQueries
from memstream.projections.sqlite.session_writer import SessionRows, apply_session_writes

IDS = [f"m{i}" for i in range(30)]

steps = st.one_of(
    st.tuples(
        st.just("chain"),
        st.lists(st.sampled_from(IDS), min_size=1, max_size=14),
        st.sampled_from(["omit", "root"]),
    ),
    st.tuples(st.just("append"), st.sampled_from(IDS), st.sampled_from([None, *IDS[:6]])),
    st.tuples(st.just("delete"), st.lists(st.sampled_from(IDS), max_size=4)),
    st.tuples(st.just("update"), st.sampled_from(IDS)),
    st.tuples(st.just("clear")),
)


def events(program: list[tuple[Any, ...]]) -> list[Any]:
    session = SessionAggregate.empty("default", "s")
    decided: list[Any] = []
    for step, action in enumerate(program):
        kind = action[0]
        try:
            if kind == "chain":
                chain = [msg(i, f"text {step} {i}") for i in action[1]]
                parent = {"omit": OMITTED, "root": None}[action[2]]
                new = session.append_messages(chain, parent)
            elif kind == "append":
                new = session.append_message(msg(action[1], f"one {step}"), action[2])
            elif kind == "delete":
                new = session.delete_messages(action[1])
            elif kind == "update":
                new = session.update_message(msg(action[1], f"updated {step}"))
            else:
                new = session.clear_messages()
        except MemstreamError:
            continue
        for event in new:
            event.mutate(session)
            decided.append(event)
    return decided


def build(path: Path, decided: list[Any], batch: int) -> sqlite3.Connection:
    """A read model of ``decided``, ``batch`` events per transaction, one memory throughout."""
    connection = open_database(path)
    rows = SessionRows()
    for start in range(0, len(decided), batch):
        connection.execute("BEGIN")
        for seq, event in enumerate(decided[start : start + batch], start=start + 1):
            apply_session_writes(connection, project_session_event("default", seq, event), rows)
        rows.flush(connection)
        connection.execute("COMMIT")
    return connection


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=st.lists(steps, min_size=1, max_size=25), batch=st.integers(1, 6))
@example(  # a deleted message, with children still pointing at it, re-appended in a long chain
    program=[
        ("chain", ["m0", "m1", "m2"], "omit"),
        ("append", "m5", "m1"),
        ("delete", ["m1"]),
        ("chain", ["m1", *(f"m{i}" for i in range(10, 18))], "root"),
    ],
    batch=1,
)
def test_chains_build_the_same_read_model_as_row_by_row(
    program: list[tuple[Any, ...]], batch: int
) -> None:
    decided = events(program)
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        fast = build(Path(tmp) / "fast.db", decided, batch)
        patch.setattr(session_writer, "CHAIN_ROWS", 10**9)
        slow = build(Path(tmp) / "slow.db", decided, batch)
        try:
            assert checksum(fast, "sessions") == checksum(slow, "sessions")
            for connection in (fast, slow):
                # the index of leaves and the search rows agree with the rows too
                queries = SqliteSessionQueries(connection)
                history = queries.history("default", "s")
                assert len(history) == queries.path_length("default", "s")
            fast_hits = SqliteSessionQueries(fast).search("default", "s", "text", 500)
            slow_hits = SqliteSessionQueries(slow).search("default", "s", "text", 500)
            assert [h["id"] for h in fast_hits] == [h["id"] for h in slow_hits]
        finally:
            fast.close()
            slow.close()


def test_a_long_chain_takes_one_insert_statement(tmp_path: Path) -> None:
    decided = events([("chain", [f"c{i}" for i in range(200)], "omit")])
    statements: list[str] = []
    connection = open_database(tmp_path / "m.db")
    connection.set_trace_callback(statements.append)
    rows = SessionRows()
    connection.execute("BEGIN")
    for seq, event in enumerate(decided, start=1):
        apply_session_writes(connection, project_session_event("default", seq, event), rows)
    rows.flush(connection)
    connection.execute("COMMIT")
    inserts = [s for s in statements if s.startswith("INSERT INTO messages (")]
    assert len(inserts) == 200  # one executemany: the trace shows each row it ran
    assert all("mid, sid" in s for s in inserts)  # the chain's own statement, row ids given
    history = SqliteSessionQueries(connection).history("default", "s")
    assert [m["id"] for m in history] == [f"c{i}" for i in range(200)]
    connection.close()


def test_a_chain_checks_its_ids_through_the_indexes_not_by_scanning_the_session(
    tmp_path: Path,
) -> None:
    # Given a session that holds a chain already
    decided = events(
        [
            ("chain", [f"a{i}" for i in range(12)], "omit"),
            ("chain", [f"b{i}" for i in range(12)], "omit"),
        ]
    )
    connection = open_database(tmp_path / "m.db")
    try:
        rows = SessionRows()
        connection.execute("BEGIN")
        apply_session_writes(connection, project_session_event("default", 1, decided[0]), rows)
        rows.flush(connection)
        connection.execute("COMMIT")
        # When the next chain is inserted
        statements: list[str] = []
        connection.set_trace_callback(statements.append)
        connection.execute("BEGIN")
        apply_session_writes(connection, project_session_event("default", 2, decided[1]), rows)
        rows.flush(connection)
        connection.execute("COMMIT")
        connection.set_trace_callback(None)
        # Then its checks of ids and parents among the session's rows each seek an index on
        # (sid, id) or (sid, parent_id): none visits every row of the session (an OR of the two
        # lists did, and a chain's cost grew with its session)
        checks = [s for s in statements if s.startswith("SELECT 1 FROM messages") and " IN (" in s]
        assert len(checks) == 2
        for check in checks:
            plan = " ".join(row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + check))
            assert "sid=? AND id=?" in plan or "sid=? AND parent_id=?" in plan, plan
        history = SqliteSessionQueries(connection).history("default", "s")
        assert [m["id"] for m in history] == [f"a{i}" for i in range(12)] + [
            f"b{i}" for i in range(12)
        ]
    finally:
        connection.close()
