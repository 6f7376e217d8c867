"""The session projector and the SQLite read model against ``sqlite3.connect(":memory:")``.

Events are decided by the domain aggregate, projected by ``project_session_event`` at increasing
stream sequences and written by ``apply_session_writes``; reads go through
``SqliteSessionQueries``. No NATS.
"""

from __future__ import annotations

import contextlib
import copy
import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstream.domain.errors import InvalidInputError, MessageNotFoundError
from memstream.domain.messages import decode_message, searchable_text
from memstream.domain.session import OMITTED, SessionAggregate
from memstream.projections.recent_history import recent_window
from memstream.projections.session_projector import (
    BATCH_SLOTS,
    InsertMessage,
    UpdateMessage,
    project_session_event,
)
from memstream.projections.sqlite.checksum import checksum, first_difference
from memstream.projections.sqlite.message_rows import SessionRowsExhausted, mid_range
from memstream.projections.sqlite.schema import migrate
from memstream.projections.sqlite.session_queries import SqliteSessionQueries
from memstream.projections.sqlite.session_writer import apply_session_writes

NS = "default"


def msg(message_id: str, text: str | None = None, role: str = "user") -> dict[str, Any]:
    return {
        "id": message_id,
        "role": role,
        "parts": [{"type": "text", "text": text if text is not None else f"text of {message_id}"}],
    }


class Store:
    """A read-model database fed by domain decisions, one stream sequence per event."""

    def __init__(self) -> None:
        self.connection = sqlite3.connect(":memory:", isolation_level=None)
        migrate(self.connection)
        self.queries = SqliteSessionQueries(self.connection)
        self.sessions: dict[tuple[str, str], SessionAggregate] = {}
        self.seq = 0

    def session(self, session_id: str, namespace: str = NS) -> SessionAggregate:
        key = (namespace, session_id)
        if key not in self.sessions:
            self.sessions[key] = SessionAggregate.empty(namespace, session_id)
        return self.sessions[key]

    def do(
        self,
        decide: Callable[[SessionAggregate], Sequence[SessionAggregate.Event]],
        session_id: str = "s",
        namespace: str = NS,
    ) -> None:
        aggregate = self.session(session_id, namespace)
        events = decide(aggregate)
        aggregate.apply_events(events)
        for event in events:
            self.seq += 1
            self.write(project_session_event(namespace, self.seq, event))

    def write(self, writes: Sequence[Any]) -> None:
        self.connection.execute("BEGIN")
        apply_session_writes(self.connection, writes)
        self.connection.execute("COMMIT")

    def append(
        self, message_id: str, parent: Any = OMITTED, session_id: str = "s", **kw: Any
    ) -> None:
        self.do(lambda s: s.append_message(msg(message_id, **kw), parent), session_id)

    def history(self, leaf: str | None = None, session_id: str = "s") -> list[str]:
        return [m["id"] for m in self.queries.history(NS, session_id, leaf)]

    def clone(self) -> Store:
        """An independent copy (read model and decision state) that a test may change."""
        twin = Store()
        self.connection.backup(twin.connection)
        twin.sessions = copy.deepcopy(self.sessions)
        twin.seq = self.seq
        return twin


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store()
    yield s
    s.connection.close()


def fts_rows(store: Store) -> int:
    return int(store.connection.execute("SELECT count(*) FROM messages_fts").fetchone()[0])


# -- schema --------------------------------------------------------------------------------------


def test_version_4_links_existing_messages_to_their_parent_rows() -> None:
    # Given a version-3 database with a branch and an orphan (its parent deleted)
    connection = sqlite3.connect(":memory:", isolation_level=None)
    migrate(connection, target=3)
    connection.execute(
        "INSERT INTO session_keys (sid, namespace, session_id) VALUES (1, 'ns', 's')"
    )
    rows = [("r", None), ("a", "r"), ("b", "r"), ("c", "b"), ("o", "gone")]
    for position, (message_id, parent_id) in enumerate(rows):
        connection.execute(
            "INSERT INTO messages (sid, id, parent_id, role, content, bytes, position, created_at) "
            "VALUES (1, ?, ?, 'user', ?, 0, ?, '')",
            (message_id, parent_id, json.dumps(msg(message_id)), position),
        )
    # When it is migrated to version 4
    migrate(connection, target=4)
    # Then each message links to its parent's row, and paths read as before
    links = dict(
        connection.execute(
            "SELECT m.id, p.id FROM messages AS m LEFT JOIN messages AS p ON p.mid = m.parent_mid"
        ).fetchall()
    )
    assert links == {"r": None, "a": "r", "b": "r", "c": "b", "o": None}
    # (the queries need the path totals of version 7; version 8 re-projects the sessions)
    migrate(connection, target=7)
    queries = SqliteSessionQueries(connection)
    assert [m["id"] for m in queries.history("ns", "s", "c")] == ["r", "b", "c"]
    assert [m["id"] for m in queries.history("ns", "s", "o")] == ["o"]


def test_the_session_state_migration_projects_the_sessions_again() -> None:
    # Given a version-4 database whose sessions and context projections are at sequence 7
    connection = sqlite3.connect(":memory:", isolation_level=None)
    migrate(connection, target=4)
    connection.execute(
        "INSERT INTO session_keys (sid, namespace, session_id) VALUES (1, 'ns', 's')"
    )
    connection.execute(
        "INSERT INTO messages (sid, id, parent_id, role, content, bytes, position, created_at) "
        "VALUES (1, 'm1', NULL, 'user', '{}', 2, 7168, '')"
    )
    connection.execute("INSERT INTO tracking VALUES ('sessions', 7), ('context', 7)")
    # When it is migrated to version 8
    migrate(connection, target=8)
    # Then its sessions have a decision-state table, and the sessions projection starts over
    # (rows projected before have no state row), while the context projection is kept
    assert connection.execute("SELECT count(*) FROM messages").fetchone()[0] == 0
    assert connection.execute("SELECT count(*) FROM session_keys").fetchone()[0] == 0
    assert connection.execute("SELECT count(*) FROM session_state").fetchone()[0] == 0
    assert connection.execute("SELECT * FROM tracking").fetchall() == [("context", 7)]


def test_the_block_version_migration_projects_the_context_again() -> None:
    # Given a version-8 database with a block and a search entry, both projections at 7
    connection = sqlite3.connect(":memory:", isolation_level=None)
    migrate(connection, target=8)
    connection.execute(
        "INSERT INTO context_blocks VALUES ('ns', 's', 'notes', 'notes_s', 'old', 5, '')"
    )
    connection.execute("INSERT INTO search_blocks (bid, namespace, key) VALUES (1, 'ns', 'kb')")
    connection.execute("INSERT INTO search_entries VALUES (1, 1, 'k', 'text', 6, '', '')")
    connection.execute("INSERT INTO tracking VALUES ('sessions', 7), ('context', 7)")
    # When it is migrated to version 9
    migrate(connection, target=9)
    # Then blocks carry versions, and the context projection starts over (rows projected
    # before have none), while the sessions projection is kept
    assert connection.execute("SELECT count(*) FROM context_blocks").fetchone()[0] == 0
    assert connection.execute("SELECT count(*) FROM search_blocks").fetchone()[0] == 0
    assert connection.execute("SELECT count(*) FROM search_entries").fetchone()[0] == 0
    assert connection.execute("SELECT * FROM tracking").fetchall() == [("sessions", 7)]
    columns = [row[1] for row in connection.execute("PRAGMA table_info(search_blocks)")]
    assert columns[-2:] == ["last_seq", "version"]


def test_the_row_range_migration_projects_the_sessions_again() -> None:
    # Given a version-9 database with a message (FTS5 with a scope column), both projections at 7
    connection = sqlite3.connect(":memory:", isolation_level=None)
    migrate(connection, target=9)
    connection.execute(
        "INSERT INTO session_keys (sid, namespace, session_id) VALUES (1, 'ns', 's')"
    )
    connection.execute(
        "INSERT INTO messages (mid, sid, id, role, content, bytes, position, created_at) "
        "VALUES (1, 1, 'm1', 'user', '{}', 2, 0, '')"
    )
    connection.execute("INSERT INTO messages_fts (rowid, text, scope) VALUES (1, 'hi', 1)")
    connection.execute("INSERT INTO session_state VALUES ('ns', 's', 7, 1, NULL, '[]', 1)")
    connection.execute("INSERT INTO tracking VALUES ('sessions', 7), ('context', 7)")
    # When it is migrated to version 10
    migrate(connection, target=10)
    # Then the sessions projection starts over (its row ids change), the context one is kept,
    # and the FTS5 table holds the text alone
    for table in ("messages", "messages_fts", "session_keys", "session_state"):
        assert connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0, table
    assert connection.execute("SELECT * FROM tracking").fetchall() == [("context", 7)]
    columns = [row[1] for row in connection.execute("PRAGMA table_info(messages_fts)")]
    assert columns == ["text"]


def test_the_version_migration_records_version_1_for_projected_rows() -> None:
    # Given a version-10 database with both projections at sequence 7
    connection = sqlite3.connect(":memory:", isolation_level=None)
    migrate(connection, target=10)
    connection.execute("INSERT INTO tracking VALUES ('sessions', 7), ('context', 7)")
    # When it is migrated to the current version
    migrate(connection)
    # Then both keep their position, projected by version 1 of each (nothing starts over)
    rows = connection.execute("SELECT projection, seq, version FROM tracking ORDER BY 1")
    assert rows.fetchall() == [("context", 7, 1), ("sessions", 7, 1)]


def test_migrate_is_idempotent(store: Store) -> None:
    # Given a migrated database, when migrated again, nothing changes
    version = store.connection.execute("PRAGMA user_version").fetchone()[0]
    migrate(store.connection)
    assert store.connection.execute("PRAGMA user_version").fetchone()[0] == version >= 1


def test_each_session_keeps_its_rows_in_a_row_id_range_of_its_own(store: Store) -> None:
    # Given two sessions appended in turn, one of them also by a chain (append_messages)
    for n in range(5):
        store.append(f"a{n}", session_id="a")
        store.append(f"b{n}", session_id="b")
    store.do(lambda s: s.append_messages([msg(f"c{n}") for n in range(10)]), "b")
    # Then every message row and its search row lie in its session's range, numbered from 1
    rows = store.connection.execute(
        "SELECT m.sid, m.mid, f.rowid FROM messages AS m "
        "JOIN messages_fts AS f ON f.rowid = m.mid ORDER BY m.mid"
    ).fetchall()
    assert len(rows) == 20
    for sid in {sid for sid, _, _ in rows}:
        low, _ = mid_range(sid)
        assert [mid - low for s, mid, _ in rows if s == sid] == list(
            range(1, 1 + sum(s == sid for s, _, _ in rows))
        )
    # and a session's search finds its own rows only
    assert {h["id"] for h in store.queries.search(NS, "a", "text", 50)} == {
        f"a{n}" for n in range(5)
    }


def test_a_session_with_no_row_ids_left_is_refused_and_nothing_is_written(store: Store) -> None:
    store.append("m1")
    sid, mid = store.connection.execute("SELECT sid, mid FROM messages").fetchone()
    # Given a session whose last row has the last id of its range
    store.connection.execute("UPDATE messages SET mid = ? WHERE mid = ?", (mid_range(sid)[1], mid))
    # When a message is inserted, by itself or in a chain, it is refused and nothing is written
    with pytest.raises(SessionRowsExhausted):
        store.append("m2", parent="m1")
    store.connection.execute("ROLLBACK")
    with pytest.raises(SessionRowsExhausted):
        store.do(lambda s: s.append_messages([msg(f"c{n}") for n in range(10)]))
    store.connection.execute("ROLLBACK")
    assert store.connection.execute("SELECT count(*) FROM messages").fetchone()[0] == 1


# -- the tree ------------------------------------------------------------------------------------


def test_empty_and_unknown_sessions(store: Store) -> None:
    q = store.queries
    assert q.history(NS, "s") == []
    assert q.latest_leaf(NS, "s") is None
    assert q.path_length(NS, "s") == 0
    assert q.branches(NS, "s", "m1") == []
    assert q.message(NS, "s", "m1") is None
    assert q.compactions(NS, "s") == []
    assert q.row_stats(NS, "s") == []
    assert q.recent_history(NS, "s", 100).messages == []
    assert q.search(NS, "s", "hello", 20) == []


def test_chain_history_and_latest_leaf(store: Store) -> None:
    # Given m1 → m2 → m3
    for i in (1, 2, 3):
        store.append(f"m{i}")
    # Then history is root→leaf, the leaf is m3, the path has 3 rows
    assert store.history() == ["m1", "m2", "m3"]
    leaf = store.queries.latest_leaf(NS, "s")
    assert leaf == msg("m3")
    assert store.queries.path_length(NS, "s") == 3
    assert store.queries.path_length(NS, "s", "m2") == 2
    assert store.queries.path_length(NS, "s", "nope") == 0
    assert store.history("m2") == ["m1", "m2"]
    assert store.history("nope") == []


def test_walks_longer_than_10000_rows_are_not_cut(store: Store) -> None:
    # Given a chain of 10,003 messages (the walk used to stop 10,000 rows up from the leaf)
    for start in range(0, 10_003, 500):
        end = min(start + 500, 10_003)
        store.do(lambda s, a=start, b=end: s.append_messages([msg(f"m{i}") for i in range(a, b)]))
    # Then history, path length and the row stats all run from the root to the leaf: none is cut
    expected = [f"m{i}" for i in range(10_003)]
    assert store.history() == expected
    assert store.queries.path_length(NS, "s") == 10_003
    assert [r["id"] for r in store.queries.row_stats(NS, "s")] == expected
    recent = store.queries.recent_history(NS, "s", 10**12)
    assert [m["id"] for m in recent.messages] == expected
    assert recent.truncated is False
    # And the content walked along is each row's own message
    assert store.queries.history(NS, "s", "m9")[-1] == msg("m9")
    assert len(store.history("m9")) == 10


def test_branches_in_log_order_and_the_latest_branch_is_the_leaf(store: Store) -> None:
    # Given m1 → m2, then m2b and m2c under m1
    store.append("m1")
    store.append("m2")
    store.append("m2b", "m1")
    store.append("m2c", "m1")
    # Then the children of m1 are in log order, and the latest leaf is m2c
    assert [m["id"] for m in store.queries.branches(NS, "s", "m1")] == ["m2", "m2b", "m2c"]
    assert store.history() == ["m1", "m2c"]
    assert store.history("m2") == ["m1", "m2"]
    # And a new root is the latest leaf after it is appended
    store.append("r", None)
    assert store.history() == ["r"]


def test_batch_positions_order_within_one_event(store: Store) -> None:
    # Given a 120-message chain appended as one event
    store.do(lambda s: s.append_messages([msg(f"m{i}") for i in range(120)]))
    # Then history follows the chain and positions are seq*BATCH_SLOTS + index
    assert store.history() == [f"m{i}" for i in range(120)]
    positions = [
        r[0] for r in store.connection.execute("SELECT position FROM messages ORDER BY mid")
    ]
    assert positions == [BATCH_SLOTS + i for i in range(120)]


def test_delete_tip_interior_and_fts_rows(store: Store) -> None:
    # Given m0 → m1 → m2
    for i in range(3):
        store.append(f"m{i}")
    assert fts_rows(store) == 3
    # When the interior m1 is deleted
    store.do(lambda s: s.delete_messages(["m1"]))
    # Then m2 stays the leaf and its path starts at itself (the parent is missing)
    assert store.queries.latest_leaf(NS, "s") == msg("m2")
    assert store.history() == ["m2"]
    assert store.queries.search(NS, "s", "m1", 20) == []
    assert fts_rows(store) == 2
    # When the tip m2 is deleted too, m0 (childless again) is the leaf
    store.do(lambda s: s.delete_messages(["m2"]))
    assert store.history() == ["m0"]


def test_reappend_after_delete_keeps_orphans_consistent(store: Store) -> None:
    # Given m0 → m1 → m2 with m1 deleted
    for i in range(3):
        store.append(f"m{i}")
    store.do(lambda s: s.delete_messages(["m1"]))
    # When m1 is appended again under m0
    store.append("m1", "m0", text="again")
    # Then m2 hangs under it again, and m2 is still the leaf (m1 has a child)
    assert store.history() == ["m0", "m1", "m2"]
    assert store.queries.message(NS, "s", "m1") == msg("m1", "again")


def test_a_reused_row_id_never_becomes_a_parent(store: Store) -> None:
    # Given p → c, where p was deleted and appended again: p now has the highest row id
    store.append("p")
    store.append("c", "p")
    store.do(lambda s: s.delete_messages(["p"]))
    store.append("p", None, text="again")
    assert store.history("c") == ["p", "c"]
    # When p is deleted again and a new message takes over its row id
    store.do(lambda s: s.delete_messages(["p"]))
    store.append("q", None)
    # Then c's path still ends at c: it does not link to the row that now holds q
    assert store.history("c") == ["c"]
    assert store.history("q") == ["q"]


def test_clear_removes_messages_overlays_and_search_rows_of_that_session_only(
    store: Store,
) -> None:
    # Given sessions a and b, a with an overlay
    store.append("a1", session_id="a", text="shared word")
    store.append("a2", session_id="a")
    store.do(lambda s: s.add_compaction("sum", "a1", "a2"), "a")
    store.append("b1", session_id="b", text="shared word")
    # When a is cleared
    store.do(lambda s: s.clear_messages(), "a")
    # Then a is empty everywhere, b is untouched
    assert store.history(session_id="a") == []
    assert store.queries.compactions(NS, "a") == []
    assert store.queries.search(NS, "a", "shared", 20) == []
    assert store.queries.latest_leaf(NS, "a") is None
    assert store.history(session_id="b") == ["b1"]
    assert [h["id"] for h in store.queries.search(NS, None, "shared", 20)] == ["b1"]


def test_sessions_and_namespaces_are_isolated(store: Store) -> None:
    # Given the same id in two sessions and in another namespace
    store.append("m1", session_id="a", text="alpha")
    store.append("m1", session_id="b", text="beta")
    store.do(lambda s: s.append_message(msg("m1", "gamma")), "a", namespace="other")
    # Then each sees its own
    assert store.queries.message(NS, "a", "m1") == msg("m1", "alpha")
    assert store.queries.message(NS, "b", "m1") == msg("m1", "beta")
    assert store.queries.message("other", "a", "m1") == msg("m1", "gamma")
    assert store.queries.search(NS, "a", "beta", 20) == []
    assert store.queries.search(NS, "a", "gamma", 20) == []
    assert {h["session_id"] for h in store.queries.search(NS, None, "alpha OR beta", 20)} == {
        "a",
        "b",
    }
    # And a namespace's search never sees another namespace's messages
    assert store.queries.search(NS, None, "gamma", 20) == []
    assert [h["id"] for h in store.queries.search("other", None, "alpha OR gamma", 20)] == ["m1"]


def test_session_list_and_summary_count_tips_overlays_and_times(store: Store) -> None:
    # Given a with a branch and an overlay, b cleared, and c in another namespace
    store.append("a1", session_id="a")
    store.append("a2", session_id="a")
    store.append("a3", "a1", session_id="a")
    store.do(lambda s: s.add_compaction("sum", "a1", "a2"), "a")
    store.append("b1", session_id="b")
    store.do(lambda s: s.clear_messages(), "b")
    store.do(lambda s: s.append_message(msg("c1")), "c", namespace="other")
    times = [r[0] for r in store.connection.execute("SELECT created_at FROM messages ORDER BY mid")]
    # When the namespace's sessions are listed, Then each once, by id, with counts and times
    assert store.queries.sessions(NS) == [
        {"session_id": "a", "messages": 3, "first_at": times[0], "last_at": times[2]},
        {"session_id": "b", "messages": 0, "first_at": None, "last_at": None},
    ]
    assert [s["session_id"] for s in store.queries.sessions("other")] == ["c"]
    # And a summary counts the branch tips, the latest leaf's raw path and the overlays
    assert store.queries.summary(NS, "a") == {
        "session_id": "a",
        "messages": 3,
        "leaves": 2,
        "latest_leaf": "a3",
        "path_length": 2,
        "compactions": 1,
        "first_at": times[0],
        "last_at": times[2],
    }
    cleared = store.queries.summary(NS, "b")
    assert cleared is not None
    assert (cleared["messages"], cleared["leaves"], cleared["latest_leaf"]) == (0, 0, None)
    assert store.queries.summary(NS, "c") is None
    assert store.queries.summary(NS, "never") is None
    # And a session without messages has the same shape, all zeros and None
    assert store.queries.empty_summary(NS, "never") == {
        "session_id": "never",
        "messages": 0,
        "leaves": 0,
        "latest_leaf": None,
        "path_length": 0,
        "compactions": 0,
        "first_at": None,
        "last_at": None,
    }


def test_checksums_and_first_difference_find_a_tampered_or_missing_row() -> None:
    # Given two builds of the same events (the second a copy of the first)
    store = Store()
    store.append("m1")
    store.append("m2", text="second")
    store.do(lambda s: s.add_compaction("sum", "m1", "m2"))
    live = store.connection
    rebuilt = sqlite3.connect(":memory:", isolation_level=None)
    live.backup(rebuilt)
    try:
        # Then they agree
        assert checksum(live, "sessions") == checksum(rebuilt, "sessions")
        assert first_difference(live, rebuilt, "sessions") is None
        # When one build's message content is changed behind the projector's back
        live.execute("UPDATE messages SET content = '{}' WHERE id = 'm2'")
        # Then the checksums differ and the difference names the part and both rows
        assert checksum(live, "sessions") != checksum(rebuilt, "sessions")
        found = first_difference(live, rebuilt, "sessions")
        assert found is not None
        assert found.part == "messages"
        assert found.live is not None
        assert found.rebuilt is not None
        assert found.live[:3] == found.rebuilt[:3] == (NS, "s", "m2")
        assert (found.live[5], json.loads(found.rebuilt[5])["id"]) == ("{}", "m2")
        # When a search row is missing instead, the difference is found in the search rows
        live.execute("UPDATE messages SET content = ? WHERE id = 'm2'", (found.rebuilt[5],))
        live.execute("INSERT INTO messages_fts (messages_fts, rowid, text) SELECT 'delete', mid, "
                     "'text of m1' FROM messages WHERE id = 'm1'")  # fmt: skip
        found = first_difference(live, rebuilt, "sessions")
        assert found is not None
        assert (found.part, found.live, found.rebuilt) == (
            "message search rows",
            (NS, "s", "m2"),
            (NS, "s", "m1"),
        )
        # When a row is indexed with other terms, the difference is found in the terms
        live.execute("INSERT INTO messages_fts (rowid, text) SELECT mid, 'text of m0' "
                     "FROM messages WHERE id = 'm1'")  # fmt: skip
        found = first_difference(live, rebuilt, "sessions")
        assert found is not None
        assert (found.part, found.live, found.rebuilt) == (
            "message search terms",
            ("m0", 1, 1),
            ("m1", 1, 1),
        )
        live.execute("INSERT INTO messages_fts (messages_fts, rowid, text) SELECT 'delete', mid, "
                     "'text of m0' FROM messages WHERE id = 'm1'")  # fmt: skip
        # When a compaction is missing on one side, that side has no row
        live.execute("INSERT INTO messages_fts (rowid, text) SELECT mid, 'text of m1' "
                     "FROM messages WHERE id = 'm1'")  # fmt: skip
        live.execute("DELETE FROM compactions")
        found = first_difference(live, rebuilt, "sessions")
        assert found is not None
        assert (found.part, found.live) == ("compactions", None)
        assert found.rebuilt is not None
        assert found.rebuilt[3:6] == ("sum", "m1", "m2")
    finally:
        store.connection.close()
        rebuilt.close()


# -- writer idempotency and guards -------------------------------------------------------------


def test_replayed_insert_keeps_the_first_content(store: Store) -> None:
    # Given m1 inserted
    store.append("m1", text="First")
    # When an insert of the same id is applied again (e.g. a replayed write)
    write = InsertMessage(
        NS,
        "s",
        "m1",
        None,
        "user",
        json.dumps(msg("m1", "Second")),
        "Second",
        99 * BATCH_SLOTS,
        "t",
    )
    store.write([write])
    # Then the first content and search row stay
    assert store.queries.message(NS, "s", "m1") == msg("m1", "First")
    assert [h["content"] for h in store.queries.search(NS, "s", "first", 20)] == ["First"]
    assert store.queries.search(NS, "s", "second", 20) == []
    assert fts_rows(store) == 1


def test_update_of_a_missing_row_writes_no_orphan_search_row(store: Store) -> None:
    # Given an empty session
    # When an update write for an unknown id is applied
    store.write([UpdateMessage(NS, "s", "ghost", json.dumps(msg("ghost", "boo")), "boo")])
    # Then there is no message and no search row
    assert store.queries.message(NS, "s", "ghost") is None
    assert fts_rows(store) == 0
    assert store.queries.search(NS, None, "boo", 20) == []


def test_update_reindexes_and_keeps_the_tree(store: Store) -> None:
    # Given m1 → m2 where m2 says "original"
    store.append("m1")
    store.append("m2", text="original words")
    # When m2 is updated to new text
    store.do(lambda s: s.update_message(msg("m2", "replacement words")))
    # Then reads and search see the new text only
    assert store.queries.message(NS, "s", "m2") == msg("m2", "replacement words")
    assert store.queries.search(NS, "s", "original", 20) == []
    assert [h["id"] for h in store.queries.search(NS, "s", "replacement", 20)] == ["m2"]
    assert store.history() == ["m1", "m2"]
    # When it is updated to parts without text, its search row goes away
    store.do(lambda s: s.update_message({"id": "m2", "role": "user", "parts": [{"type": "x"}]}))
    assert store.queries.search(NS, "s", "replacement", 20) == []
    assert fts_rows(store) == 1
    # And row stats bytes follow the new content
    stats = store.queries.row_stats(NS, "s")
    assert stats[1]["bytes"] == len(
        json.dumps({"id": "m2", "role": "user", "parts": [{"type": "x"}]}, separators=(",", ":"))
    )


# -- search ---------------------------------------------------------------------------------------


def test_only_text_parts_are_indexed_joined_by_a_space(store: Store) -> None:
    # Given a message with two text parts, a reasoning part and a tool part
    message = {
        "id": "m1",
        "role": "assistant",
        "parts": [
            {"type": "text", "text": "first part"},
            {"type": "reasoning", "text": "hidden thoughts"},
            {"type": "tool-search", "input": {"q": "toolinput"}, "output": "tooloutput"},
            {"type": "text", "text": "second part"},
        ],
    }
    store.do(lambda s: s.append_message(message))
    # Then search sees the text parts only, and content is the indexed text
    (hit,) = store.queries.search(NS, "s", "first second", 20)
    assert hit["content"] == "first part second part" == searchable_text(message)
    assert hit["role"] == "assistant"
    assert hit["created_at"]
    for hidden in ("hidden", "thoughts", "toolinput", "tooloutput"):
        assert store.queries.search(NS, "s", hidden, 20) == []


def test_message_without_text_gets_no_search_row(store: Store) -> None:
    store.do(lambda s: s.append_message({"id": "m1", "role": "user", "parts": []}))
    store.do(
        lambda s: s.append_message(
            {"id": "m2", "role": "user", "parts": [{"type": "text", "text": ""}]}
        )
    )
    assert fts_rows(store) == 0


def test_search_ranks_by_bm25_and_honours_limit(store: Store) -> None:
    # Given three messages mentioning "deploy" with different density
    store.append("weak", text="deploy " + "filler " * 40)
    store.append("strong", text="deploy deploy deploy now")
    store.append("none", text="unrelated")
    store.append("mid", text="deploy deploy with filler filler filler")
    # Then the densest comes first and limit cuts the tail
    assert [h["id"] for h in store.queries.search(NS, "s", "deploy", 20)] == [
        "strong",
        "mid",
        "weak",
    ]
    assert [h["id"] for h in store.queries.search(NS, "s", "deploy", 1)] == ["strong"]


def test_search_syntax_end_to_end(store: Store) -> None:
    store.append("ts", text="I love TypeScript")
    store.append("fri", text="Remember: deploy to production on Fridays")
    store.append("py", text="We deployed the Python service to production")
    q = store.queries

    def found(query: str) -> set[str]:
        return {h["id"] for h in q.search(NS, "s", query, 20)}

    assert found("TypeScript") == {"ts"}
    assert found("friday") == {"fri"}
    assert found("deploying production") == {"fri", "py"}
    assert found('"deploy to production"') == {"fri"}
    assert found("python OR typescript") == {"py", "ts"}
    assert found("production -python") == {"fri"}
    assert found("") == set()
    assert found('NEAR( "unbalanced text:foo {a b} ^x *') == set()


# -- overlays, budgets, stats ---------------------------------------------------------------------


def test_compactions_are_stored_in_log_order_and_applied(store: Store) -> None:
    # Given m0..m5, an overlay m1..m3, then another from m1 to m4
    for i in range(6):
        store.append(f"m{i}")
    store.do(lambda s: s.add_compaction("first", "m1", "m3"))
    store.do(lambda s: s.add_compaction("second", "m1", "m4"))
    # Then both rows are kept in order and the later applies
    compactions = store.queries.compactions(NS, "s")
    assert [c.summary for c in compactions] == ["first", "second"]
    assert [(c.from_message_id, c.to_message_id) for c in compactions] == [
        ("m1", "m3"),
        ("m1", "m4"),
    ]
    assert all(c.created_at for c in compactions)
    history = store.queries.history(NS, "s")
    assert [m["id"] for m in history] == ["m0", f"compaction_{compactions[1].id}", "m5"]
    assert history[1]["parts"][0]["text"] == "second"
    # And path length still counts raw messages
    assert store.queries.path_length(NS, "s") == 6


def test_recent_history_window_bytes_and_overlays(store: Store) -> None:
    # Given m0..m9 of equal size, and an overlay m7..m8 inside the recent window
    for i in range(10):
        store.append(f"m{i}", text="x" * 1000)
    store.do(lambda s: s.add_compaction("inside", "m7", "m8"))
    store.do(lambda s: s.add_compaction("outside", "m2", "m8"))
    stats = store.queries.row_stats(NS, "s")
    size = stats[0]["bytes"]
    # When three rows fit the budget
    recent = store.queries.recent_history(NS, "s", 3 * size)
    # Then the window is m7..m9, the inside overlay applies, the outside one is ignored
    assert [m["id"] for m in recent.messages][1:] == ["m9"]
    assert recent.messages[0]["parts"][0]["text"] == "inside"
    assert recent.truncated is True
    assert recent.total_content_bytes == sum(s["bytes"] for s in stats) == 10 * size


def test_row_stats_ids_roles_and_bytes(store: Store) -> None:
    # Given a small user message and a big assistant message
    store.append("small", text="hi")
    store.do(lambda s: s.append_message(msg("big", "y" * 10_000, role="assistant")))
    # Then stats list both root→leaf with the stored role and UTF-8 JSON size
    stats = store.queries.row_stats(NS, "s")
    assert [(s["id"], s["role"]) for s in stats] == [("small", "user"), ("big", "assistant")]
    assert stats[0]["bytes"] == len(json.dumps(msg("small", "hi"), separators=(",", ":")))
    assert stats[1]["bytes"] > stats[0]["bytes"] + 9000
    # Multi-byte text counts in UTF-8 bytes, not characters
    store.append("emoji", text="😀" * 10)
    assert store.queries.row_stats(NS, "s")[-1]["bytes"] == len(
        json.dumps(msg("emoji", "😀" * 10), ensure_ascii=False, separators=(",", ":")).encode()
    )


# -- corrupt rows (cannot arise through the API: the domain validates every message) -------------


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[1, 2]",
        '{"id": 1, "role": "user", "parts": []}',
        '{"id": "x", "role": null, "parts": []}',
        '{"id": "x", "role": "user", "parts": {}}',
        '{"id": "x", "role": "user"}',
    ],
)
def test_decode_message_rejects_corrupt_json(content: str) -> None:
    assert decode_message(content) is None


def test_decode_message_accepts_the_reference_shape() -> None:
    text = '{"id":"x","role":"tool","parts":[],"metadata":{"a":1}}'
    assert decode_message(text) == {"id": "x", "role": "tool", "parts": [], "metadata": {"a": 1}}


def _corrupt(store: Store, message_id: str) -> None:
    # Damaged as if it had been stored so: the row's size, and the size of every path through
    # it (these tests damage one chain), are 10 bytes of JSON.
    mid, size, depth = store.connection.execute(
        "SELECT mid, bytes, depth FROM messages WHERE id = ?", (message_id,)
    ).fetchone()
    store.connection.execute(
        "UPDATE messages SET content = 'not json {', bytes = 10 WHERE mid = ?", (mid,)
    )
    store.connection.execute(
        "UPDATE messages SET path_bytes = path_bytes + ? WHERE depth >= ?", (10 - size, depth)
    )


def test_corrupt_row_is_skipped_in_history_and_get_message(store: Store) -> None:
    # Given m0..m9 where m4's stored content was damaged out of band
    store.do(lambda s: s.append_messages([msg(f"m{i}") for i in range(10)]))
    _corrupt(store, "m4")
    # Then history keeps the other 9 in order, and get_message returns None for it
    assert store.history() == [f"m{i}" for i in range(10) if i != 4]
    assert store.queries.message(NS, "s", "m4") is None
    assert store.queries.path_length(NS, "s") == 10


def test_corrupt_leaf_is_dropped_from_recent_history_but_counted(store: Store) -> None:
    # Given m0..m2 with the leaf damaged
    for i in range(3):
        store.append(f"m{i}")
    _corrupt(store, "m2")
    stats = store.queries.row_stats(NS, "s")
    assert stats[-1] == {"id": "m2", "role": "user", "bytes": 10}
    # Then the window drops it but its (stored) bytes still count
    recent = store.queries.recent_history(NS, "s", 10**9)
    assert [m["id"] for m in recent.messages] == ["m0", "m1"]
    assert recent.truncated is False
    assert recent.total_content_bytes == sum(s["bytes"] for s in stats)
    assert store.queries.latest_leaf(NS, "s") is None


# -- paths of any length (issue 10 item 8) ------------------------------------------------------

LONG = 100_000


def chain(store: Store, count: int, session_id: str = "s") -> None:
    """Append m0..m<count-1> as one chain, in atomic batches of 500."""
    for start in range(0, count, 500):
        batch = [msg(f"m{i}") for i in range(start, min(start + 500, count))]
        store.do(lambda s, b=batch: s.append_messages(b), session_id)


@pytest.fixture(scope="module")
def long_chain() -> Iterator[Store]:
    """A 100,000-message chain, projected straight into SQLite (read it; clone it to change)."""
    s = Store()
    chain(s, LONG)
    yield s
    s.connection.close()


def vm_steps(connection: sqlite3.Connection, read: Callable[[], object]) -> int:
    """SQLite virtual-machine instructions that ``read`` runs: the work it does, not its time."""
    steps = 0

    def tick() -> int:
        nonlocal steps
        steps += 1
        return 0

    connection.set_progress_handler(tick, 1)
    try:
        read()
    finally:
        connection.set_progress_handler(None, 1)
    return steps


def test_a_100000_message_chain_is_read_whole(long_chain: Store) -> None:
    q = long_chain.queries
    everything = [f"m{i}" for i in range(LONG)]
    # Then history is every message, root to leaf, each with its own content
    history = q.history(NS, "s")
    assert [m["id"] for m in history] == everything
    assert history[0] == msg("m0")
    assert history[-1] == msg(f"m{LONG - 1}")
    # And the path length, the row stats and a deep leaf's path agree
    assert q.path_length(NS, "s") == LONG
    assert q.path_length(NS, "s", "m99990") == 99_991
    assert [r["id"] for r in q.row_stats(NS, "s")] == everything
    assert long_chain.history("m99990") == everything[:99_991]
    # And a recent window of everything is the whole path, untruncated
    recent = q.recent_history(NS, "s", 10**12)
    assert [m["id"] for m in recent.messages] == everything
    assert recent.truncated is False


def test_recent_history_reads_its_window_whatever_the_path_length(long_chain: Store) -> None:
    # Given the same recent messages at the end of a 1,000- and of a 100,000-message chain
    short = Store()
    try:
        chain(short, 1_000)
        for store, count in ((short, 1_000), (long_chain, LONG)):
            stats = store.queries.row_stats(NS, "s")
            # When the window is 20 messages by count (no byte budget)
            recent = store.queries.recent_history(NS, "s", 0, 20)
            # Then it is the last 20, truncated, and the total is the whole path's bytes
            assert [m["id"] for m in recent.messages] == [f"m{i}" for i in range(count - 20, count)]
            assert recent.truncated is True
            assert recent.total_content_bytes == sum(r["bytes"] for r in stats)
            # And by bytes: a budget of exactly the last 3 rows gives 3 rows, one byte less 2
            last3 = sum(r["bytes"] for r in stats[-3:])
            assert len(store.queries.recent_history(NS, "s", last3).messages) == 3
            assert len(store.queries.recent_history(NS, "s", last3 - 1).messages) == 2

        # And the read does the same work on both paths: it never walks the path above its window
        def recent(store: Store) -> Callable[[], object]:
            return lambda: store.queries.recent_history(NS, "s", 0, 20)

        short_steps = vm_steps(short.connection, recent(short))
        long_steps = vm_steps(long_chain.connection, recent(long_chain))
        assert long_steps <= short_steps * 1.1, (short_steps, long_steps)
        # (the counter does measure walks: the whole history of the long path is 100x the work)
        history_steps = vm_steps(long_chain.connection, lambda: long_chain.queries.history(NS, "s"))
        assert history_steps > 100 * long_steps
    finally:
        short.connection.close()


def test_branches_and_overlays_at_the_deep_end_of_a_100000_message_chain(
    long_chain: Store,
) -> None:
    store = long_chain.clone()
    try:
        q = store.queries
        # Given a branch off m99990, appended after the chain
        store.append("b", "m99990")
        # Then m99990 has two children in log order, and b is the latest leaf with its path
        assert [m["id"] for m in q.branches(NS, "s", "m99990")] == ["m99991", "b"]
        assert q.latest_leaf(NS, "s") == msg("b")
        assert store.history() == [f"m{i}" for i in range(99_991)] + ["b"]
        assert q.path_length(NS, "s") == 99_992
        assert store.history(f"m{LONG - 1}") == [f"m{i}" for i in range(LONG)]
        # When an overlay spans from m5 to m99990, deep in the path
        store.do(lambda s: s.add_compaction("almost all of it", "m5", "m99990"))
        (overlay,) = q.compactions(NS, "s")
        # Then both branches read it in place of the 99,986 messages it covers
        summary = f"compaction_{overlay.id}"
        assert store.history() == ["m0", "m1", "m2", "m3", "m4", summary, "b"]
        old_branch = store.history(f"m{LONG - 1}")
        assert old_branch == ["m0", "m1", "m2", "m3", "m4", summary] + [
            f"m{i}" for i in range(99_991, LONG)
        ]
        # And path lengths still count raw messages
        assert q.path_length(NS, "s", f"m{LONG - 1}") == LONG
        # And a recent window reaching into the overlay shows raw messages (its start is outside)
        recent = q.recent_history(NS, "s", 0, 3)
        assert [m["id"] for m in recent.messages] == ["m99989", "m99990", "b"]
        # When another overlay lies inside the window, the window applies it
        store.do(lambda s: s.add_compaction("inside", "m99989", "m99990"))
        inside = q.compactions(NS, "s")[-1]
        recent = q.recent_history(NS, "s", 0, 3)
        assert [m["id"] for m in recent.messages] == [f"compaction_{inside.id}", "b"]
        assert recent.truncated is True
    finally:
        store.connection.close()


def test_update_and_delete_deep_in_a_long_chain_keep_path_totals(long_chain: Store) -> None:
    store = long_chain.clone()
    try:
        q = store.queries
        # When the root grows by 1,000 bytes and m1 is deleted
        store.do(lambda s: s.update_message(msg("m0", "x" * 1_000)))
        store.do(lambda s: s.delete_messages(["m1"]))
        # Then the latest path starts at m2 (its parent is gone), and its length and total bytes
        # (read from the leaf alone) equal those of the rows walked
        stats = q.row_stats(NS, "s")
        assert stats[0]["id"] == "m2"
        assert len(stats) == q.path_length(NS, "s") == LONG - 2
        recent = q.recent_history(NS, "s", 0)
        assert recent.total_content_bytes == sum(r["bytes"] for r in stats)
        # And m0 is a path of its own, with its new size
        assert q.path_length(NS, "s", "m0") == 1
    finally:
        store.connection.close()


def test_walks_end_on_a_damaged_read_model_whose_links_form_a_loop(store: Store) -> None:
    # Given m0..m4, then damaged out of band: the root links to the leaf (the domain refuses
    # loops, so only damage makes one)
    chain(store, 5)
    store.connection.execute(
        "UPDATE messages SET parent_id = 'm4', "
        "parent_mid = (SELECT mid FROM messages WHERE id = 'm4') WHERE id = 'm0'"
    )
    q = store.queries
    # Then every walk ends, after at most the session's 5 messages
    assert store.history() == ["m0", "m1", "m2", "m3", "m4"]
    assert len(q.row_stats(NS, "s")) == 5
    recent = q.recent_history(NS, "s", 10**9, 10**6)
    assert [m["id"] for m in recent.messages] == ["m0", "m1", "m2", "m3", "m4"]
    assert len(q.path_messages_containing(NS, "s", "user", "text")) == 5
    # And so do writes that move the aggregates of a subtree around the loop
    store.do(lambda s: s.update_message(msg("m2", "longer text than before")))
    store.do(lambda s: s.delete_messages(["m3"]))
    assert store.history() == ["m4"]


def test_version_7_gives_existing_messages_their_path_totals_and_sessions_their_counts() -> None:
    # Given a version-6 database (before path totals) with a branch and an orphan (its parent
    # deleted)
    connection = sqlite3.connect(":memory:", isolation_level=None)
    migrate(connection, target=6)
    connection.execute(
        "INSERT INTO session_keys (sid, namespace, session_id) VALUES (1, 'ns', 's')"
    )
    rows = [("r", None, 10), ("a", "r", 20), ("b", "r", 30), ("c", "b", 40), ("o", "gone", 50)]
    for position, (message_id, parent_id, size) in enumerate(rows):
        connection.execute(
            "INSERT INTO messages (sid, id, parent_id, parent_mid, role, content, bytes, "
            "position, created_at) VALUES (1, ?, ?, "
            "(SELECT mid FROM messages WHERE sid = 1 AND id = ?), 'user', ?, ?, ?, '')",
            (message_id, parent_id, parent_id, json.dumps(msg(message_id)), size, position),
        )
    # When it is migrated to version 7 (version 8 re-projects the sessions from the log)
    migrate(connection, target=7)
    # Then each message has its depth and the bytes of its path, and the session its count
    totals = {
        r[0]: (r[1], r[2]) for r in connection.execute("SELECT id, depth, path_bytes FROM messages")
    }
    assert totals == {"r": (0, 10), "a": (1, 30), "b": (1, 40), "c": (2, 80), "o": (0, 50)}
    assert connection.execute("SELECT messages FROM session_keys").fetchone()[0] == 5
    queries = SqliteSessionQueries(connection)
    assert queries.path_length("ns", "s", "c") == 3
    assert [m["id"] for m in queries.history("ns", "s", "c")] == ["r", "b", "c"]


def _walked(connection: sqlite3.Connection, mid: int) -> tuple[int, int]:
    """(rows, bytes) of the path from row ``mid`` to its root, walked in Python."""
    rows = size = 0
    current: int | None = mid
    while current is not None:
        parent, row_bytes = connection.execute(
            "SELECT parent_mid, bytes FROM messages WHERE mid = ?", (current,)
        ).fetchone()
        rows, size, current = rows + 1, size + row_bytes, parent
    return rows, size


IDS = [f"m{i}" for i in range(8)]
tree_commands = st.lists(
    st.one_of(
        st.tuples(
            st.just("append"),
            st.sampled_from(IDS),
            st.one_of(st.just("omit"), st.none(), st.sampled_from(IDS)),
            st.integers(0, 300),
        ),
        st.tuples(st.just("update"), st.sampled_from(IDS), st.integers(0, 300)),
        st.tuples(st.just("delete"), st.lists(st.sampled_from(IDS), max_size=3)),
        st.tuples(st.just("clear")),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(program=tree_commands)
def test_path_totals_equal_the_walked_paths_after_any_commands(
    program: list[tuple[Any, ...]],
) -> None:
    store = Store()
    try:
        # Given any appends (new roots, branches, re-appends that adopt orphans), updates that
        # change sizes, deletes of tips and interiors, and clears
        for command in program:
            kind = command[0]
            decide: Callable[[SessionAggregate], Sequence[SessionAggregate.Event]]
            if kind == "append":
                _, message_id, parent, size = command
                message = msg(message_id, "x" * size)
                target = OMITTED if parent == "omit" else parent
                decide = lambda s, m=message, t=target: s.append_message(m, t)  # noqa: E731
            elif kind == "update":
                message = msg(command[1], "y" * command[2])
                decide = lambda s, m=message: s.update_message(m)  # noqa: E731
            elif kind == "delete":
                decide = lambda s, d=command[1]: s.delete_messages(d)  # noqa: E731
            else:
                decide = lambda s: s.clear_messages()  # noqa: E731
            # A command the domain refuses writes nothing.
            with contextlib.suppress(MessageNotFoundError, InvalidInputError):
                store.do(decide)
        # Then every row's depth and path bytes are those of its walked path
        rows = store.connection.execute("SELECT mid, id, depth, path_bytes FROM messages")
        for mid, message_id, depth, path_bytes in rows.fetchall():
            assert (depth + 1, path_bytes) == _walked(store.connection, mid), message_id
            assert store.queries.path_length(NS, "s", message_id) == depth + 1
        # And the session counts its messages, and recent history totals the active path
        count = store.connection.execute("SELECT count(*) FROM messages").fetchone()[0]
        counted = store.connection.execute("SELECT coalesce(sum(messages), 0) FROM session_keys")
        assert counted.fetchone()[0] == count
        stats = store.queries.row_stats(NS, "s")
        recent = store.queries.recent_history(NS, "s", 0)
        assert recent.total_content_bytes == sum(r["bytes"] for r in stats)
        assert recent.truncated is (len(stats) > 1)
    finally:
        store.connection.close()


@settings(max_examples=100, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=25),
    budget=st.integers(0, 6_000),
    minimum=st.one_of(st.integers(-2, 30), st.floats(-2, 30)),
)
def test_the_walked_recent_window_is_the_window_of_spec_3_10(
    sizes: list[int], budget: int, minimum: float
) -> None:
    # Given a chain of messages of random sizes
    store = Store()
    try:
        for i, size in enumerate(sizes):
            store.append(f"m{i}", text="x" * size)
        stats = [r["bytes"] for r in store.queries.row_stats(NS, "s")]
        # When a recent window is read, Then it is the suffix the spec's rule selects
        start = recent_window(stats, budget, minimum)
        recent = store.queries.recent_history(NS, "s", budget, minimum)
        assert [m["id"] for m in recent.messages] == [f"m{i}" for i in range(start, len(sizes))]
        assert recent.truncated is (start > 0)
        assert recent.total_content_bytes == sum(stats)
    finally:
        store.connection.close()
