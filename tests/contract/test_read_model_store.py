"""The read-model ports' contract: what every backend's store and read side must do, through
plain values only (log records in; dicts, messages and positions out).

:class:`ReadModelStoreContract` is not collected itself (no ``Test`` prefix): each backend
subclasses it and says how to make a fresh copy (:meth:`ReadModelStoreContract.new_copy`).
SQLite's subclass is here; PostgreSQL's comes with its adapter.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from support.events import RecordedLog, every_event
from support.messages import ids, msg

from memstream.domain.errors import InvalidInputError, ReadModelDamagedError
from memstream.projections.ports import (
    MAX_ATTEMPTS,
    ProjectorStats,
    ReadModelCopy,
    ReadModelRewound,
    ReadModels,
    ReadModelStore,
)
from memstream.projections.postgres.copy import PostgresCopy
from memstream.projections.read_models import open_read_models, read_models_at
from memstream.projections.registry import PROJECTOR_PROJECTIONS, VERSIONS
from memstream.projections.sqlite.store import SqliteCopy
from memstream.settings import Settings
from memstream.workers.log.event_log import LogEntry

NS = "default"


def _raise(error: ReadModelDamagedError) -> NoReturn:
    raise error


class _Unappliable(LogEntry):
    """A record that decodes, but whose application fails (its namespace cannot be read)."""

    def namespace(self) -> str:
        raise RuntimeError("no namespace for this record")


class _Undecodable(LogEntry):
    """A record whose payload cannot be decoded."""

    def decode(self) -> object:
        raise ValueError("not an event")


def _conversation(log: RecordedLog, session_id: str = "s", count: int = 3) -> list[LogEntry]:
    entries: list[LogEntry] = []
    for i in range(1, count + 1):
        entries += log.session(session_id, lambda s, i=i: s.append_message(msg(f"m{i}")))
    return entries


def _failing_third() -> list[LogEntry]:
    """Four appends to session "s" whose third (m3) cannot be applied."""
    entries = _conversation(RecordedLog(), count=4)
    return [*entries[:2], _Unappliable(*_fields(entries[2:3])), entries[3]]


class ReadModelStoreContract:
    """The contract of :class:`ReadModelStore`, :class:`ReadModels` and :class:`ReadModelCopy`."""

    def new_copy(self, tmp_path: Path) -> ReadModelCopy:
        """A new, empty read-model copy of the backend under test."""
        raise NotImplementedError

    @pytest.fixture
    def copy(self, tmp_path: Path) -> ReadModelCopy:
        return self.new_copy(tmp_path)

    @pytest.fixture
    def store(self, copy: ReadModelCopy) -> Iterator[ReadModelStore]:
        store = copy.store()
        try:
            yield store
        finally:
            store.close()

    @pytest.fixture
    def reader(self, copy: ReadModelCopy, store: ReadModelStore) -> Iterator[ReadModels]:
        reader = copy.reader(on_damage=_raise)
        try:
            yield reader
        finally:
            reader.close()

    # -- batches and positions -------------------------------------------------------------

    def test_a_new_store_is_at_zero_for_every_projection(self, store: ReadModelStore) -> None:
        assert list(store.projections) == list(PROJECTOR_PROJECTIONS)
        assert store.positions() == dict.fromkeys(PROJECTOR_PROJECTIONS, 0)
        assert not store.fresh

    def test_a_batch_is_applied_with_its_positions_in_one_commit(
        self, store: ReadModelStore, reader: ReadModels
    ) -> None:
        log = RecordedLog()
        entries = _conversation(log)
        stats = ProjectorStats()
        assert store.apply(entries, stats) == 3
        assert store.positions() == dict.fromkeys(PROJECTOR_PROJECTIONS, 3)
        assert (stats.batches, stats.applied, stats.skipped) == (1, 3, 0)
        assert ids(reader.sessions.history(NS, "s")) == ["m1", "m2", "m3"]
        assert [reader.tracked_seq(p) for p in PROJECTOR_PROJECTIONS] == [3] * len(
            PROJECTOR_PROJECTIONS
        )

    def test_each_position_is_recorded_with_the_identity_of_the_event_there(
        self, store: ReadModelStore, reader: ReadModels
    ) -> None:
        # Given three events applied, then two more of which "sessions" alone is dropped
        log = RecordedLog()
        entries = _conversation(log, count=5)
        store.apply(entries[:3], ProjectorStats())
        third = entries[2].identity()
        assert reader.marks() == [(p, 3, third) for p in sorted(PROJECTOR_PROJECTIONS)]
        # When a batch skips what it has seen and applies the rest
        store.apply(entries[1:], ProjectorStats())
        # Then each row records the event it ends on, the reader and the store alike
        fifth = entries[4].identity()
        assert store.marks() == [(p, 5, fifth) for p in sorted(PROJECTOR_PROJECTIONS)]
        # and a dropped projection records none until it applies again
        store.drop("sessions")
        assert ("sessions", 5, fifth) not in store.marks()
        store.apply(entries[:2], ProjectorStats())
        assert ("sessions", 2, entries[1].identity()) in reader.marks()

    def test_every_event_type_is_applied(self, store: ReadModelStore, reader: ReadModels) -> None:
        log = RecordedLog()
        entries = log.record(every_event())
        assert store.apply(entries, ProjectorStats()) == len(entries)
        assert reader.sessions.history(NS, "s") == []  # the last session event clears it
        assert reader.context.cached_prompt(NS, "s") == "the prompt"
        assert reader.context.loaded_skills(NS, "s") == []  # loaded, then unloaded
        assert reader.context.block_content(NS, "notes", "s") == "some notes"
        assert reader.context.entry_count(NS, "kb") == 1
        assert reader.context.search_entries(NS, "kb", "entry", 5) == [("k1", "an entry")]
        assert store.dead_letters() == []

    def test_reapplying_seen_sequences_is_idempotent(
        self, copy: ReadModelCopy, store: ReadModelStore
    ) -> None:
        log = RecordedLog()
        entries = _conversation(log, count=6)
        stats = ProjectorStats()
        assert store.apply(entries[:4], stats) == 4
        committed = {p: store.checksum(p) for p in PROJECTOR_PROJECTIONS}
        # a redelivery of the same batch is skipped whole
        assert store.apply(entries[:4], stats) == 4
        assert {p: store.checksum(p) for p in PROJECTOR_PROJECTIONS} == committed
        assert (stats.applied, stats.skipped) == (4, 4)
        # a batch overlapping what is committed applies only what is new
        assert store.apply(entries[2:], stats) == 6
        assert (stats.applied, stats.skipped) == (6, 6)
        # and the result is what applying every record once builds
        once = copy.scratch()
        try:
            assert once.apply(entries, ProjectorStats()) == 6
            for projection in PROJECTOR_PROJECTIONS:
                assert store.checksum(projection) == once.checksum(projection)
                assert store.first_difference(once, projection) is None
        finally:
            once.close()

    def test_a_failing_batch_leaves_no_rows_and_no_position(
        self, store: ReadModelStore, reader: ReadModels
    ) -> None:
        batch = _failing_third()
        stats = ProjectorStats()
        with pytest.raises(RuntimeError):
            store.apply(batch, stats)
        assert store.positions() == dict.fromkeys(PROJECTOR_PROJECTIONS, 0)
        assert reader.sessions.history(NS, "s") == []
        assert stats.batches == 0
        assert stats.attempts == {3: 1}

    def test_an_event_failing_every_attempt_becomes_a_dead_letter(
        self, store: ReadModelStore, reader: ReadModels
    ) -> None:
        batch = _failing_third()
        stats = ProjectorStats()
        for _ in range(MAX_ATTEMPTS - 1):
            with pytest.raises(RuntimeError):
                store.apply(batch, stats)
        assert store.apply(batch, stats) == 4
        assert store.positions() == dict.fromkeys(PROJECTOR_PROJECTIONS, 4)
        assert ids(reader.sessions.history(NS, "s", "m4")) == ["m4"]  # its parent was m3
        letters = store.dead_letters()
        assert [(d["projection"], d["seq"]) for d in letters] == [
            (name, 3) for name in sorted(PROJECTOR_PROJECTIONS)
        ]
        assert {d["topic"] for d in letters} == {"session.message_appended"}
        assert reader.dead_letters() == letters
        assert stats.dead_lettered == len(PROJECTOR_PROJECTIONS)

    def test_an_undecodable_record_is_a_dead_letter_at_once(
        self, store: ReadModelStore, reader: ReadModels
    ) -> None:
        log = RecordedLog()
        entries = _conversation(log, count=3)
        broken = _Undecodable(*_fields(entries[1:2]))
        stats = ProjectorStats()
        assert store.apply([entries[0], broken, entries[2]], stats) == 3
        assert reader.sessions.message(NS, "s", "m2") is None
        assert reader.sessions.message(NS, "s", "m3") == msg("m3")
        assert [d["seq"] for d in store.dead_letters()] == [2] * len(PROJECTOR_PROJECTIONS)
        assert (stats.applied, stats.dead_lettered) == (2, len(PROJECTOR_PROJECTIONS))

    def test_named_dead_letters_are_forgotten_and_the_others_kept(
        self, store: ReadModelStore, reader: ReadModels
    ) -> None:
        # Given dead letters of two events (m2 and m4) for every projection
        log = RecordedLog()
        entries = _conversation(log, count=4)
        broken = [_Undecodable(*_fields(entries[i : i + 1])) for i in (1, 3)]
        store.apply([entries[0], broken[0], entries[2], broken[1]], ProjectorStats())
        count = len(PROJECTOR_PROJECTIONS)
        assert sorted(d["seq"] for d in store.dead_letters()) == [2] * count + [4] * count
        # When those of m2 are forgotten (with a projection it has no letter of, and an unknown
        # sequence, which are no error)
        named = [(name, 2) for name in PROJECTOR_PROJECTIONS]
        assert store.forget_dead_letters([*named, ("sessions", 99)]) == len(named)
        # Then only m4's are left, for the store and its readers; nothing more to forget
        assert [d["seq"] for d in store.dead_letters()] == [4] * count
        assert reader.dead_letters() == store.dead_letters()
        assert store.forget_dead_letters(named) == 0
        assert store.forget_dead_letters([]) == 0
        assert store.positions() == dict.fromkeys(PROJECTOR_PROJECTIONS, 4)

    def test_closing_the_steps_of_a_batch_rolls_it_back(
        self, store: ReadModelStore, reader: ReadModels
    ) -> None:
        log = RecordedLog()
        entries = _conversation(log, count=3)
        steps = store.steps(entries, ProjectorStats())
        next(steps)
        next(steps)
        steps.close()
        assert store.positions() == dict.fromkeys(PROJECTOR_PROJECTIONS, 0)
        assert reader.sessions.history(NS, "s") == []
        assert store.apply(entries, ProjectorStats()) == 3  # and the store is usable again

    def test_a_batch_after_the_read_model_was_dropped_writes_nothing(
        self, store: ReadModelStore
    ) -> None:
        log = RecordedLog()
        entries = _conversation(log, count=5)
        stats = ProjectorStats()
        assert store.apply(entries[:3], stats) == 3
        store.drop("sessions")
        emptied = store.checksum("sessions")
        with pytest.raises(ReadModelRewound):
            store.apply(entries[3:], stats, committed=3)
        assert store.positions() == {"sessions": 0, "context": 3, "registry": 3, "memory": 3}
        assert store.checksum("sessions") == emptied
        assert store.apply(entries, stats) == 5

    def test_checksums_tell_different_content_apart(self, copy: ReadModelCopy) -> None:
        log = RecordedLog()
        entries = _conversation(log, count=3)
        live, other = copy.scratch(), copy.scratch()
        try:
            live.apply(entries, ProjectorStats())
            other.apply(entries[:2], ProjectorStats())
            assert live.checksum("sessions") != other.checksum("sessions")
            difference = live.first_difference(other, "sessions")
            assert difference is not None
            assert difference.live != difference.rebuilt
        finally:
            live.close()
            other.close()

    def test_renewing_a_damaged_copy_starts_an_empty_one_that_readers_notice(
        self, store: ReadModelStore, reader: ReadModels
    ) -> None:
        log = RecordedLog()
        store.apply(_conversation(log), ProjectorStats())
        old = store.copy_id()
        assert store.renewable
        store.renew("damaged, says the test")
        assert store.positions() == dict.fromkeys(PROJECTOR_PROJECTIONS, 0)
        assert store.copy_id() != old
        assert reader.replaced()
        assert store.apply(log.entries, ProjectorStats()) == 3

    # -- the registry: one projector per projection, versions -------------------------------

    def test_stores_of_disjoint_projections_each_keep_their_own_position(
        self, copy: ReadModelCopy, reader: ReadModels
    ) -> None:
        log = RecordedLog()
        entries = [*_conversation(log), *log.block("notes", "s", "hi")]
        sessions, context = copy.store(["sessions"]), copy.store(["context"])
        try:
            assert list(sessions.projections) == ["sessions"]
            assert sessions.apply(entries, ProjectorStats()) == 4
            assert (reader.tracked_seq("sessions"), reader.tracked_seq("context")) == (4, 0)
            assert ids(reader.sessions.history(NS, "s")) == ["m1", "m2", "m3"]
            assert reader.context.block_content(NS, "notes", "s") is None
            assert context.apply(entries[:2], ProjectorStats()) == 2
            assert context.apply(entries[2:], ProjectorStats()) == 4
            assert (reader.tracked_seq("sessions"), reader.tracked_seq("context")) == (4, 4)
            assert reader.context.block_content(NS, "notes", "s") == "hi"
        finally:
            sessions.close()
            context.close()

    def test_a_projection_of_another_version_starts_over_alone(
        self, copy: ReadModelCopy, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Given both projections at the end of a log, written by version 1 of each
        log = RecordedLog()
        entries = [*_conversation(log), *log.block("notes", "s", "hi")]
        store = copy.store(long_lived=True)
        try:
            assert store.apply(entries, ProjectorStats()) == 4
            context = store.checksum("context")
        finally:
            store.close()
        # When a projector whose sessions projection is of version 2 opens the copy
        monkeypatch.setitem(VERSIONS, "sessions", 2)
        store = copy.store(long_lived=True)
        reader = copy.reader(on_damage=_raise)
        try:
            # Then the sessions projection is empty and starts again from the log, alone
            assert store.positions() == {"sessions": 0, "context": 4, "registry": 4, "memory": 4}
            assert reader.sessions.history(NS, "s") == []
            assert store.checksum("context") == context
            assert store.apply(entries, ProjectorStats()) == 4
            assert ids(reader.sessions.history(NS, "s")) == ["m1", "m2", "m3"]
        finally:
            reader.close()
            store.close()
        # And the next projector of that version carries on where it is
        store = copy.store(long_lived=True)
        try:
            assert store.positions() == {"sessions": 4, "context": 4, "registry": 4, "memory": 4}
        finally:
            store.close()
        # And a store that is no projector's (a reader's, a rebuild's) never empties one
        monkeypatch.setitem(VERSIONS, "sessions", 3)
        store = copy.store()
        try:
            assert store.positions() == {"sessions": 4, "context": 4, "registry": 4, "memory": 4}
        finally:
            store.close()

    # -- reads -----------------------------------------------------------------------------

    def test_activity_is_recorded_for_sessions_registered_after_they_were_used(
        self, store: ReadModelStore, reader: ReadModels
    ) -> None:
        # (PostgreSQL's registry projection remembers which sessions have no row, to touch
        # only registered ones: each batch here is its own transaction on one store)
        log = RecordedLog()

        def append(session_id: str, message_id: str) -> list[LogEntry]:
            return log.session(session_id, lambda s: s.append_message(msg(message_id)))

        def active() -> list[str]:
            page, _ = reader.registry.page(NS, 10)
            return [s["id"] for s in page]

        store.apply(log.registry("a", lambda r: r.create("A")), ProjectorStats())
        store.apply(append("z", "m1"), ProjectorStats())  # z has no row yet
        assert active() == ["a"]
        # A registration, then activity in the same batch
        store.apply(
            [*log.registry("z", lambda r: r.create("Z")), *append("z", "m2")], ProjectorStats()
        )
        assert active() == ["z", "a"]
        store.apply(append("a", "m1"), ProjectorStats())
        assert active() == ["a", "z"]
        store.apply(append("z", "m3"), ProjectorStats())
        assert active() == ["z", "a"]
        # Deleted (no row again), used, registered again and used in later batches
        store.apply(log.registry("z", lambda r: r.delete()), ProjectorStats())
        store.apply(append("z", "m4"), ProjectorStats())
        store.apply(append("a", "m2"), ProjectorStats())
        assert active() == ["a"]
        store.apply(log.registry("z", lambda r: r.create("Z again")), ProjectorStats())
        store.apply(append("a", "m3"), ProjectorStats())
        store.apply(append("z", "m5"), ProjectorStats())
        assert active() == ["z", "a"]

    def test_the_registry_lists_registered_sessions_most_recently_active_first(
        self, store: ReadModelStore, reader: ReadModels
    ) -> None:
        log = RecordedLog()
        entries = [
            *log.registry("a", lambda r: r.create("Alpha", model="m1", source="cli")),
            *log.registry("b", lambda r: r.create("Beta", parent_session_id="a")),
            *log.registry("c", lambda r: r.create("Gamma")),
            *_conversation(log, "a", count=2),  # touches a (registered)
            *_conversation(log, "z", count=1),  # z is not registered: no row
            *log.registry("b", lambda r: r.add_usage(100, 20, 0.5)),
            *log.registry("b", lambda r: r.add_usage(1, 2, 0.25)),
            *log.registry("c", lambda r: r.rename("Gamma 2")),
            *log.registry("c", lambda r: r.end("compaction")),
            *log.registry("c", lambda r: r.delete()),
        ]
        assert store.apply(entries, ProjectorStats()) == len(entries)
        registry = reader.registry
        assert registry.session(NS, "c") is None  # deleted
        assert registry.session(NS, "z") is None  # never registered
        b = registry.session(NS, "b")
        assert b is not None
        assert (b["id"], b["name"], b["parent_session_id"], b["model"], b["source"]) == (
            "b",
            "Beta",
            "a",
            None,
            None,
        )
        assert (b["input_tokens"], b["output_tokens"], b["estimated_cost"]) == (101, 22, 0.75)
        assert b["end_reason"] is None
        assert b["updated_at"] >= b["created_at"]
        a = registry.session(NS, "a")
        assert a is not None
        assert (a["model"], a["source"]) == ("m1", "cli")
        # Most recently active first (b's usage came after a's messages), a page at a time
        first, cursor = registry.page(NS, 1)
        assert [s["id"] for s in first] == ["b"]
        assert cursor is not None
        second, cursor = registry.page(NS, 1, cursor)
        assert [s["id"] for s in second] == ["a"]
        assert cursor is None
        assert registry.count(NS) == 2
        assert registry.page("other", 10) == ([], None)

    def test_history_paths_branches_and_leaves(
        self, store: ReadModelStore, reader: ReadModels
    ) -> None:
        log = RecordedLog()
        entries = _conversation(log, count=3)
        entries += log.session("s", lambda s: s.append_message(msg("b1"), "m1"))
        entries += log.session("s", lambda s: s.add_compaction("early part", "m1", "m2"))
        store.apply(entries, ProjectorStats())
        queries = reader.sessions
        assert ids(queries.history(NS, "s", "m3")) == [
            "compaction_" + _only_compaction(reader),
            "m3",
        ]
        assert ids(queries.history(NS, "s", "b1")) == ["m1", "b1"]
        assert ids(queries.branches(NS, "s", "m1")) == ["m2", "b1"]
        assert queries.path_length(NS, "s", "m3") == 3
        assert queries.path_length(NS, "s") == 2  # the latest leaf is b1
        latest = queries.latest_leaf(NS, "s")
        assert latest is not None
        assert latest["id"] == "b1"
        message = queries.message(NS, "s", "m2")
        assert message == msg("m2")
        assert queries.message(NS, "s", "nope") is None
        assert queries.message_count(NS, "s") == 4
        assert queries.history(NS, "other") == []

    def test_search_finds_words_in_one_session_or_all(
        self, store: ReadModelStore, reader: ReadModels
    ) -> None:
        log = RecordedLog()
        entries = log.session("a", lambda s: s.append_message(msg("a1", "cats purr happily")))
        entries += log.session("b", lambda s: s.append_message(msg("b1", "the cat sleeps")))
        entries += log.session("b", lambda s: s.append_message(msg("b2", "dogs bark")))
        store.apply(entries, ProjectorStats())
        hits = reader.sessions.search(NS, "b", "cat", 10)
        assert [h["id"] for h in hits] == ["b1"]
        assert {h["id"] for h in reader.sessions.search(NS, None, "cat", 10)} == {"a1", "b1"}
        assert reader.sessions.search(NS, "b", "elephant", 10) == []
        assert reader.sessions.search("elsewhere", None, "cat", 10) == []

    def test_context_reads(self, store: ReadModelStore, reader: ReadModels) -> None:
        log = RecordedLog()
        entries = log.block("memory", "s", "likes tea")
        entries += log.block("soul", None, "be kind")
        entries += log.session("s", lambda s: s.freeze_system_prompt("frozen"))
        entries += log.session("s", lambda s: s.load_skill("docs", "pirate"))
        entries += log.entry("kb", "k1", "Cats are independent animals")
        entries += log.entry("kb", "k2", "Dogs are loyal animals")
        store.apply(entries, ProjectorStats())
        context = reader.context
        assert context.block_content(NS, "memory", "s") == "likes tea"
        assert context.block_content(NS, "memory", "t") is None
        assert [b["label"] for b in context.blocks(NS)] == ["soul", "memory"]
        assert [b["label"] for b in context.blocks(NS, "s")] == ["memory"]
        assert context.cached_prompt(NS, "s") == "frozen"
        assert context.loaded_skills(NS, "s") == ["docs:pirate"]
        assert context.entry_count(NS, "kb") == 2
        assert [k for k, _ in context.search_entries(NS, "kb", "loyal", 5)] == ["k2"]

    def test_analytics_count_in_log_order_whatever_the_batching(
        self, copy: ReadModelCopy, reader: ReadModels
    ) -> None:
        """Daily volumes: a count is for the model and source its session had at that point
        of the log (a registration after messages re-attributes only what follows), and one
        batch or one event per batch gives the same rows and checksum."""
        log = RecordedLog()
        entries = log.record(every_event())
        entries += log.registry("r", lambda r: r.create("R", model="m1", source="web"))
        entries += log.session("r", lambda s: s.append_messages([msg("r1"), msg("r2")]))
        entries += log.registry("r", lambda r: r.add_usage(100, 20, 0.25))
        entries += log.session("late", lambda s: s.append_message(msg("l1")))
        entries += log.registry("late", lambda r: r.create("L", model="m2"))
        entries += log.session("late", lambda s: s.append_message(msg("l2")))
        entries += log.registry("late", lambda r: r.add_usage(7, 3, 0.1))
        store = copy.store(["analytics"])
        try:
            store.apply(entries, ProjectorStats())
            whole = reader.analytics.daily(None)
            summed = store.checksum("analytics")
            store.drop("analytics")
            for entry in entries:
                store.apply([entry], ProjectorStats())
            one_by_one = reader.analytics.daily(None)
            assert store.checksum("analytics") == summed
        finally:
            store.close()
        assert one_by_one == whole
        by_model = {(row["model"], row["source"]): row for row in whole}
        assert set(by_model) == {("", ""), ("gpt-x", "cli"), ("m1", "web"), ("m2", "")}
        plain, trip, r, late = (
            by_model[("", "")],
            by_model[("gpt-x", "cli")],
            by_model[("m1", "web")],
            by_model[("m2", "")],
        )
        # every_event(): session s (3 messages, then registered as gpt-x/cli with usage), an
        # ingest of one message, two memories (facts) and one remembered text, in session s1.
        # A session counts on its first day under the model and source it has now; a message
        # under those its session had then.
        assert (plain["sessions"], plain["messages"]) == (0, 3 + 1)  # s's, and late's l1
        assert (trip["sessions"], trip["messages"], trip["input_tokens"]) == (1, 0, 120)
        assert (trip["output_tokens"], trip["cost"]) == (30, 0.0042)
        assert (plain["ingested_messages"], plain["remembered"]) == (1, 1)
        assert plain["ingested_bytes"] == len(b"I live in Lisbon")
        assert plain["memories"] == {"fact": 2, "event": 0, "instruction": 0, "task": 0, "other": 0}
        assert (r["sessions"], r["messages"], r["input_tokens"], r["cost"]) == (1, 2, 100, 0.25)
        assert (late["sessions"], late["messages"], late["output_tokens"]) == (1, 1, 3)
        assert reader.analytics.daily("other") == []

    def test_the_reader_and_the_store_see_one_copy(
        self, copy: ReadModelCopy, store: ReadModelStore, reader: ReadModels
    ) -> None:
        assert reader.copy_id() == store.copy_id()
        assert reader.identity == store.identity
        assert not reader.replaced()
        assert not store.replaced()
        assert copy.exists()


def _fields(entries: list[LogEntry]) -> tuple[Any, ...]:
    """The fields of the one record in ``entries``, to build a record of another kind from."""
    (entry,) = entries
    return (entry.seq, entry.subject, entry.payload, entry.headers)


def _only_compaction(reader: ReadModels) -> str:
    (compaction,) = reader.sessions.compactions(NS, "s")
    return compaction.id


class TestSqliteReadModelStore(ReadModelStoreContract):
    """The contract, on a SQLite file."""

    def new_copy(self, tmp_path: Path) -> ReadModelCopy:
        return SqliteCopy(tmp_path / "memstream.db")


@pytest.mark.postgres
class TestPostgresReadModelStore(ReadModelStoreContract):
    """The contract, on a PostgreSQL database (a fresh one per test)."""

    @pytest.fixture
    def copy(self, postgres_url: str) -> ReadModelCopy:
        return PostgresCopy(postgres_url)


def test_the_factory_picks_sqlite_in_the_data_dir_unless_a_database_url_is_given(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path)
    copy = open_read_models(settings)
    assert isinstance(copy, SqliteCopy)
    assert copy.location == str(settings.database_path)
    assert not copy.exists()  # nothing is opened yet
    # A database URL picks PostgreSQL (nothing is opened: host "db" need not exist)
    chosen = open_read_models(settings.with_(database_url="postgresql://bob:pw@db/ms"))
    assert isinstance(chosen, PostgresCopy)
    assert chosen.location == "postgresql://bob:***@db/ms"
    with pytest.raises(InvalidInputError, match="is not a postgresql:// URL"):
        open_read_models(settings.with_(database_url="mysql://db/ms"))


def test_a_rebuild_target_is_a_database_url_a_file_or_a_directory(tmp_path: Path) -> None:
    for url in ("postgresql://bob:pw@db/ms", "host=db dbname=ms user=bob password=pw"):
        target = read_models_at(url)
        assert isinstance(target, PostgresCopy)
        assert "pw" not in target.location
    # A directory names its memstream.db; a symlink is resolved to the real file
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    in_dir = read_models_at(str(tmp_path / "link"))
    assert isinstance(in_dir, SqliteCopy)
    assert in_dir.location == str((tmp_path / "real" / "memstream.db").resolve())
    assert read_models_at(str(tmp_path / "real" / "x.db")).location.endswith("real/x.db")
    with pytest.raises(InvalidInputError, match="does not exist"):
        read_models_at(str(tmp_path / "nowhere" / "x.db"))
    for wrong in ("nats://db:4222", "", "   "):
        with pytest.raises(InvalidInputError):
            read_models_at(wrong)
