"""Sessions decided on the read model plus the events after it decide exactly as a full replay.

The store under test restores sessions from the real sessions projection (SQLite, applied by the
projector's own batch function) while the log is an in-memory fake with JetStream's publish rules.
Random programs interleave commands of this writer, commands of another writer (published
behind its back), a projector that lags by a random amount, rebuilds of the read model, and
restarts of the writer (an empty cache), and compare every decision with the decision of a
Session replayed from the subject's first event.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.memory_log import MemoryLog
from support.messages import msg

from memstream.domain.errors import MemstreamError
from memstream.domain.session import OMITTED, SessionAggregate
from memstream.projections.ports import ProjectorStats
from memstream.projections.sql.batches import SqlSessionProjection
from memstream.projections.sqlite.batches import WRITES, apply_batch
from memstream.projections.sqlite.database import drop_projection, open_database
from memstream.projections.sqlite.session_snapshots import SqliteSessionSnapshots
from memstream.workers.log.aggregate_store import AggregateStore
from memstream.workers.log.subjects import subject_for

NAMESPACE = "default"
SESSIONS = ("s1", "s2")
IDS = tuple(f"m{i}" for i in range(8))
SKILLS = (("docs", "a"), ("docs", "b"), ("notes", "a"))
Decide = Callable[[SessionAggregate], Sequence[SessionAggregate.Event]]


def _subject(name: str) -> str:
    return subject_for("ms", NAMESPACE, "session", name)


# -- commands ------------------------------------------------------------------------------------

parents = st.one_of(
    st.just(("omit",)), st.just(("none",)), st.tuples(st.just("id"), st.sampled_from(IDS))
)
ids = st.sampled_from(IDS)
commands = st.one_of(
    st.tuples(st.just("append"), ids, parents),
    st.tuples(st.just("append"), ids, st.just(("omit",))),
    st.tuples(st.just("batch"), st.lists(ids, min_size=1, max_size=4), parents),
    st.tuples(st.just("update"), ids),
    st.tuples(st.just("delete"), st.lists(ids, max_size=3)),
    st.tuples(st.just("clear")),
    st.tuples(st.just("freeze"), st.sampled_from(["p1", "p2"])),
    st.tuples(st.just("refresh"), st.sampled_from(["p1", "p2"])),
    st.tuples(st.just("load"), st.sampled_from(SKILLS)),
    st.tuples(st.just("unload"), st.sampled_from(SKILLS)),
)
session = st.integers(0, len(SESSIONS) - 1)
steps = st.one_of(
    st.tuples(st.just("ours"), session, commands),
    st.tuples(st.just("ours"), session, commands),
    st.tuples(st.just("ours"), session, commands),
    st.tuples(st.just("other"), session, commands),
    st.tuples(st.just("project"), st.integers(0, 6)),
    st.tuples(st.just("rebuild"), st.integers(0, 60)),
    st.tuples(st.just("restart")),
    st.tuples(st.just("check"), session),
)


def _parent(spec: tuple[Any, ...]) -> object:
    return {"omit": OMITTED, "none": None}.get(spec[0], spec[-1])


def decision(command: tuple[Any, ...], step: int) -> Decide:
    """The domain call a command stands for (message texts differ per step)."""
    kind = command[0]
    if kind == "append":
        message = msg(command[1], f"text {step}")
        return lambda s: s.append_message(message, _parent(command[2]))
    if kind == "batch":
        chain = [msg(i, f"text {step}") for i in command[1]]
        return lambda s: s.append_messages(chain, _parent(command[2]))
    if kind == "update":
        updated = msg(command[1], f"updated {step}")
        return lambda s: s.update_message(updated)
    if kind == "delete":
        return lambda s: s.delete_messages(command[1])
    if kind == "clear":
        return lambda s: s.clear_messages()
    if kind == "freeze":
        return lambda s: s.freeze_system_prompt(command[1])
    if kind == "refresh":
        return lambda s: s.refresh_system_prompt(command[1])
    if kind == "load":
        return lambda s: s.load_skill(*command[1])
    return lambda s: s.unload_skill(*command[1])


def outcome(events: Sequence[Any]) -> list[tuple[str, dict[str, Any]]]:
    """Decided events without their timestamps (the only field that differs per decision)."""
    return [
        (type(e).__name__, {k: v for k, v in vars(e).items() if k != "timestamp"}) for e in events
    ]


# -- the world -----------------------------------------------------------------------------------


class World:
    """A log, a read model that a projector feeds on demand, and a writer that decides on it."""

    def __init__(self, database: Path) -> None:
        self.log = MemoryLog()
        self.projector = open_database(database)
        self.reader = open_database(database)
        self.projected = 0
        self.store = self._store()

    def _store(self) -> AggregateStore[SessionAggregate]:
        return AggregateStore(
            self.log,
            lambda key: SessionAggregate.empty(NAMESPACE, key),
            snapshots=SqliteSessionSnapshots(self.reader, NAMESPACE),
            cache_size=1,  # two sessions: every switch evicts
        )

    def replay(self, name: str) -> SessionAggregate:
        """The session replayed from its subject's first event (the reference)."""
        return self.log.replay(_subject(name), SessionAggregate.empty(NAMESPACE, name))

    def project(self, count: int) -> None:
        entries = self.log.entries[self.projected : self.projected + count]
        if entries:
            apply_batch(self.projector, [SqlSessionProjection(WRITES)], entries, ProjectorStats())
            self.projected += len(entries)

    def rebuild(self, upto: int) -> None:
        drop_projection(self.projector, "sessions")
        self.projected = 0
        self.project(min(upto, len(self.log.entries)))

    def restart(self) -> None:
        self.store = self._store()

    async def ours(self, name: str, decide: Decide) -> Any:
        try:
            result = await self.store.execute(_subject(name), name, decide)
        except MemstreamError as error:
            return (type(error).__name__, str(error))
        return outcome(result.events)

    async def other(self, name: str, decide: Decide) -> None:
        """Another process's command, decided on a full replay and published behind our back."""
        try:
            events = list(decide(self.replay(name)))
        except MemstreamError:
            return
        await self.log.publish_behind(_subject(name), events)

    async def check(self, name: str) -> None:
        """The restored state answers every lookup as the replayed one does."""
        expected = _state(self.replay(name))
        actual = await self.store.inspect(_subject(name), name, _state)
        assert actual == expected, name

    def close(self) -> None:
        self.projector.close()
        self.reader.close()


def _state(s: SessionAggregate) -> tuple[Any, ...]:
    probe = (*IDS, "absent")
    return (
        s.version,
        [s.messages.find(i) for i in probe],
        [s.messages.child_count(i) for i in probe],
        s.latest_leaf,
        s.frozen_prompt,
        list(s.loaded_skills),
    )


def expected_outcome(world: World, name: str, decide: Decide) -> Any:
    try:
        return outcome(decide(world.replay(name)))
    except MemstreamError as error:
        return (type(error).__name__, str(error))


async def run(program: list[tuple[Any, ...]], project_on_read: int = 0) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        world = World(Path(tmp) / "memstream.db")
        # The projector may move while the writer reads the log (it runs concurrently).
        world.log.on_read = lambda: world.project(project_on_read)
        try:
            for step, action in enumerate(program):
                kind = action[0]
                if kind in ("ours", "other"):
                    name, decide = SESSIONS[action[1]], decision(action[2], step)
                    if kind == "other":
                        await world.other(name, decide)
                        continue
                    expected = expected_outcome(world, name, decide)
                    actual = await world.ours(name, decide)
                    assert actual == expected, f"step {step}: {action}"
                elif kind == "project":
                    world.project(action[1])
                elif kind == "rebuild":
                    world.rebuild(action[1])
                elif kind == "restart":
                    world.restart()
                else:
                    await world.check(SESSIONS[action[1]])
            for name in SESSIONS:
                await world.check(name)
            world.project(len(world.log.entries))
            world.restart()
            for name in SESSIONS:
                await world.check(name)
        finally:
            world.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=st.lists(steps, min_size=5, max_size=60), project_on_read=st.integers(0, 2))
@example(  # orphans of a deleted message, adopted again when its id is re-appended
    program=[
        ("ours", 0, ("batch", ["m0", "m1", "m2"], ("omit",))),
        ("project", 6),
        ("ours", 0, ("delete", ["m1"])),
        ("ours", 0, ("append", "m3", ("omit",))),
        ("project", 6),
        ("ours", 0, ("append", "m1", ("id", "m2"))),  # would close a loop: refused
        ("ours", 0, ("append", "m1", ("id", "m0"))),
        ("restart",),
        ("ours", 0, ("append", "m4", ("omit",))),
        ("check", 0),
    ],
    project_on_read=0,
)
@example(  # a chain that re-appends a deleted message its children still point at
    program=[
        ("ours", 0, ("batch", ["m0", "m1", "m2"], ("omit",))),
        ("project", 6),
        ("ours", 0, ("delete", ["m1"])),
        ("project", 6),
        ("restart",),
        ("ours", 0, ("batch", ["m1", "m5"], ("none",))),
        ("check", 0),
    ],
    project_on_read=0,
)
@example(  # a chain looked up at once, guarded, on a read model dropped for a rebuild
    program=[
        ("ours", 0, ("batch", ["m0", "m1", "m2"], ("omit",))),
        ("project", 6),
        ("restart",),
        ("ours", 0, ("batch", ["m0", "m1"], ("omit",))),  # a no-op, decided in a reading
        ("rebuild", 0),
        ("ours", 0, ("batch", ["m2", "m5"], ("omit",))),  # m2 exists: only m5 is new
        ("check", 0),
    ],
    project_on_read=0,
)
@example(  # a read model rebuilt behind the writer's back, and another writer's events
    program=[
        ("ours", 0, ("append", "m0", ("omit",))),
        ("ours", 0, ("load", ("docs", "a"))),
        ("ours", 0, ("freeze", "p1")),
        ("project", 6),
        ("other", 0, ("append", "m1", ("omit",))),
        ("rebuild", 1),
        ("ours", 0, ("append", "m2", ("omit",))),
        ("ours", 0, ("clear",)),
        ("ours", 0, ("append", "m2", ("omit",))),
        ("project", 2),
        ("ours", 0, ("unload", ("docs", "a"))),
        ("ours", 0, ("freeze", "p2")),
        ("check", 0),
    ],
    project_on_read=1,
)
@example(  # the projector passes part of what a fast-forward read, during the read
    program=[
        ("ours", 0, ("append", "m0", ("omit",))),
        ("project", 6),
        ("ours", 1, ("append", "m0", ("omit",))),
        ("other", 0, ("append", "m1", ("omit",))),
        ("other", 0, ("append", "m2", ("omit",))),
        ("ours", 0, ("append", "m3", ("omit",))),
    ],
    project_on_read=1,
)
@example(  # the read model is rebuilt to a point behind what the writer restored from
    program=[
        ("ours", 0, ("append", "m0", ("omit",))),
        ("ours", 0, ("append", "m1", ("omit",))),
        ("project", 6),
        ("ours", 0, ("append", "m2", ("omit",))),
        ("rebuild", 1),
        ("ours", 0, ("append", "m4", ("id", "m1"))),
    ],
    project_on_read=0,
)
@example(  # a stored message whose children the overlay deleted is the latest leaf again
    program=[
        ("ours", 0, ("batch", ["m0", "m1", "m2"], ("omit",))),
        ("project", 6),
        ("ours", 0, ("delete", ["m2"])),
        ("ours", 0, ("append", "m3", ("omit",))),
    ],
    project_on_read=0,
)
@example(  # the newest stored leaf got a child in the overlay (a re-appended id with orphans)
    program=[
        ("ours", 0, ("append", "m0", ("omit",))),
        ("ours", 0, ("append", "m1", ("omit",))),
        ("ours", 0, ("append", "m2", ("omit",))),
        ("ours", 0, ("delete", ["m1"])),
        ("ours", 0, ("append", "m3", ("none",))),
        ("project", 6),
        ("ours", 0, ("append", "m1", ("id", "m3"))),
        ("ours", 0, ("append", "m4", ("omit",))),
    ],
    project_on_read=0,
)
@example(  # the projector passed this writer's own event before it was applied here
    program=[
        ("ours", 0, ("append", "m0", ("omit",))),
        ("project", 6),
        ("ours", 0, ("append", "m1", ("omit",))),
        ("other", 0, ("append", "m2", ("omit",))),
        ("project", 6),
        ("ours", 0, ("append", "m3", ("omit",))),
        ("check", 0),
    ],
    project_on_read=0,
)
def test_decisions_on_a_snapshot_equal_decisions_on_a_full_replay(
    program: list[tuple[Any, ...]], project_on_read: int
) -> None:
    asyncio.run(run(program, project_on_read))


def test_a_restored_session_reads_only_the_events_after_its_snapshot() -> None:
    async def scenario() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            world = World(Path(tmp) / "memstream.db")
            try:
                # Given 200 messages of a session in chains of 50, all projected, then 3 more
                # that the read model has not seen yet
                for start in range(0, 200, 50):
                    chain = [msg(f"c{i}") for i in range(start, start + 50)]
                    assert await world.ours("s1", lambda s, c=chain: s.append_messages(c))
                for i in range(200, 203):
                    await world.ours("s1", lambda s, i=i: s.append_message(msg(f"c{i}")))
                world.project(4)
                world.restart()
                world.log.entries_read = 0
                # When a new writer appends (parent omitted)
                result = await world.ours("s1", lambda s: s.append_message(msg("new")))
                # Then it attached the message to the latest leaf, having read only the 3
                # events after the snapshot from the log
                assert result[0][1]["parent_id"] == "c202"
                assert world.log.entries_read == 3
            finally:
                world.close()

    asyncio.run(scenario())


def test_an_unknown_parent_is_refused_on_a_snapshot() -> None:
    async def scenario() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            world = World(Path(tmp) / "memstream.db")
            try:
                await world.ours("s1", lambda s: s.append_message(msg("a")))
                world.project(1)
                world.restart()
                refused = await world.ours("s1", lambda s: s.append_message(msg("b"), "zz"))
                assert refused[0] == "MessageNotFoundError"
                assert world.log.entries_read == 0
            finally:
                world.close()

    asyncio.run(scenario())


def test_reading_is_one_transaction_on_its_own_connection() -> None:
    # Given a snapshot source on a connection
    connection = sqlite3.connect(":memory:", isolation_level=None)
    snapshots = SqliteSessionSnapshots(connection, NAMESPACE)
    # When a reading runs, Then the connection is inside a transaction only during it
    with snapshots.reading():
        assert connection.in_transaction
    assert not connection.in_transaction
