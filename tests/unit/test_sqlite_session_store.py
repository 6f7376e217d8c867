"""The session projector and the SQLite read model against ``sqlite3.connect(":memory:")``.

Events are decided by the domain aggregate, projected by ``project_session_event`` at increasing
stream sequences and written by ``apply_session_writes``; reads go through
``SqliteSessionQueries``. No NATS.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from memstream.domain.messages import decode_message, searchable_text
from memstream.domain.session import OMITTED, Session
from memstream.projections.session_writes import (
    BATCH_SLOTS,
    InsertMessage,
    UpdateMessage,
    project_session_event,
)
from memstream.projections.sqlite.checksum import checksum, first_difference
from memstream.projections.sqlite.database import migrate
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
        self.sessions: dict[tuple[str, str], Session] = {}
        self.seq = 0

    def session(self, session_id: str, namespace: str = NS) -> Session:
        key = (namespace, session_id)
        if key not in self.sessions:
            self.sessions[key] = Session.empty(namespace, session_id)
        return self.sessions[key]

    def do(
        self,
        decide: Callable[[Session], Sequence[Session.Event]],
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
    # When it is migrated to the current version
    migrate(connection)
    # Then its sessions have a decision-state table, and the sessions projection starts over
    # (rows projected before have no state row), while the context projection is kept
    assert connection.execute("SELECT count(*) FROM messages").fetchone()[0] == 0
    assert connection.execute("SELECT count(*) FROM session_keys").fetchone()[0] == 0
    assert connection.execute("SELECT count(*) FROM session_state").fetchone()[0] == 0
    assert connection.execute("SELECT * FROM tracking").fetchall() == [("context", 7)]


def test_migrate_is_idempotent(store: Store) -> None:
    # Given a migrated database, when migrated again, nothing changes
    version = store.connection.execute("PRAGMA user_version").fetchone()[0]
    migrate(store.connection)
    assert store.connection.execute("PRAGMA user_version").fetchone()[0] == version >= 1


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


def test_walks_longer_than_the_depth_limit_stop_at_the_same_row(store: Store) -> None:
    # Given a chain of 10,003 messages (§1.3: paths are walked at most 10,000 rows deep)
    for start in range(0, 10_003, 500):
        end = min(start + 500, 10_003)
        store.do(lambda s, a=start, b=end: s.append_messages([msg(f"m{i}") for i in range(a, b)]))
    # Then history, path length and the row stats all end at the leaf and stop 10,000 rows up
    expected = [f"m{i}" for i in range(3, 10_003)]
    assert store.history() == expected
    assert store.queries.path_length(NS, "s") == 10_000
    assert [r["id"] for r in store.queries.row_stats(NS, "s")] == expected
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
        # When a search row is missing instead, the difference is found in the search text
        live.execute("UPDATE messages SET content = ? WHERE id = 'm2'", (found.rebuilt[5],))
        live.execute("DELETE FROM messages_fts WHERE rowid = (SELECT mid FROM messages "
                     "WHERE id = 'm1')")  # fmt: skip
        found = first_difference(live, rebuilt, "sessions")
        assert found is not None
        assert (found.part, found.live, found.rebuilt) == (
            "message search text",
            (NS, "s", "m2", "second"),
            (NS, "s", "m1", "text of m1"),
        )
        # When a compaction is missing on one side, that side has no row
        live.execute("INSERT INTO messages_fts (rowid, text, scope) SELECT mid, 'text of m1', sid "
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
    store.connection.execute(
        "UPDATE messages SET content = 'not json {', bytes = 10 WHERE id = ?", (message_id,)
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
