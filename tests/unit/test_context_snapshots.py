"""Blocks and search blocks decided on the read model plus the events after it decide exactly as
a full replay.

The stores under test restore built-in blocks and search blocks from the real context projection
(SQLite, applied by the projector's batch function) while the log is an in-memory fake with
JetStream's publish rules. Random programs interleave this writer's commands, another writer's
(published behind its back), a projector that lags by a random amount, rebuilds of the read model
and restarts of the writer, and compare every decision with one on an aggregate replayed from the
subject's first event. A new writer's first decision on a long-written block reads no event.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.memory_log import MemoryLog

from memstream.domain.context import ContextDocument, SearchIndex, document_id
from memstream.domain.errors import MemstreamError
from memstream.projections.ports import ProjectorStats
from memstream.projections.sql.batches import SqlContextProjection
from memstream.projections.sqlite.batches import WRITES, apply_batch
from memstream.projections.sqlite.context_snapshots import (
    SqliteDocumentSnapshots,
    SqliteSearchSnapshots,
)
from memstream.projections.sqlite.database import drop_projection, open_database
from memstream.workers.log.aggregate_store import AggregateStore
from memstream.workers.log.subjects import subject_for

NAMESPACE = "default"
DOCUMENTS = (document_id("notes", "s1"), document_id("notes", None))
INDEXES = ("kb", "kb2")
TEXTS = ("a", "b", "a b", "")
ENTRY_KEYS = ("k1", "k2", "k3")


def _document_subject(identity: str) -> str:
    return subject_for("ms", NAMESPACE, "block", identity)


def _index_subject(key: str) -> str:
    return subject_for("ms", NAMESPACE, "search", key)


commands = st.one_of(
    st.tuples(st.just("replace"), st.integers(0, 1), st.sampled_from(TEXTS)),
    st.tuples(st.just("append"), st.integers(0, 1), st.sampled_from(TEXTS[:3])),
    st.tuples(
        st.just("index"),
        st.sampled_from(ENTRY_KEYS),
        st.sampled_from(TEXTS[:3]),
        st.integers(0, 1),
    ),
)
steps = st.one_of(
    st.tuples(st.just("ours"), commands),
    st.tuples(st.just("ours"), commands),
    st.tuples(st.just("other"), commands),
    st.tuples(st.just("project"), st.integers(0, 5)),
    st.tuples(st.just("project"), st.integers(0, 5)),
    st.tuples(st.just("rebuild"), st.integers(0, 40)),
    st.tuples(st.just("restart")),
)

Decide = Callable[[Any], Sequence[Any]]


def target(command: tuple[Any, ...]) -> tuple[str, str, str]:
    """(store kind, aggregate key, subject) of a command."""
    if command[0] == "index":
        key = INDEXES[command[3]]
        return "search", key, _index_subject(key)
    identity = DOCUMENTS[command[1]]
    return "block", identity, _document_subject(identity)


def decision(command: tuple[Any, ...]) -> Decide:
    kind = command[0]
    if kind == "replace":
        return lambda d: d.replace(command[2])
    if kind == "append":
        return lambda d: d.append(command[2])
    return lambda i: i.index(command[1], command[2])


def outcome(events: Sequence[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (type(e).__name__, {k: v for k, v in vars(e).items() if k != "timestamp"}) for e in events
    ]


class World:
    def __init__(self, database: Path) -> None:
        self.log = MemoryLog()
        self.projector = open_database(database)
        self.reader = open_database(database)
        self.projected = 0
        self.restart()

    def restart(self) -> None:
        self.blocks: AggregateStore[ContextDocument] = AggregateStore(
            self.log,
            lambda key: ContextDocument.empty(NAMESPACE, key),
            snapshots=SqliteDocumentSnapshots(self.reader, NAMESPACE),
            cache_size=1,
        )
        self.indexes: AggregateStore[SearchIndex] = AggregateStore(
            self.log,
            lambda key: SearchIndex.empty(NAMESPACE, key),
            snapshots=SqliteSearchSnapshots(self.reader, NAMESPACE),
            cache_size=1,
        )

    def replay(self, kind: str, key: str, subject: str) -> Any:
        aggregate: Any = (
            SearchIndex.empty(NAMESPACE, key)
            if kind == "search"
            else ContextDocument.empty(NAMESPACE, key)
        )
        return self.log.replay(subject, aggregate)

    def project(self, count: int) -> None:
        entries = self.log.entries[self.projected : self.projected + count]
        if entries:
            apply_batch(self.projector, [SqlContextProjection(WRITES)], entries, ProjectorStats())
            self.projected += len(entries)

    def rebuild(self, upto: int) -> None:
        drop_projection(self.projector, "context")
        self.projected = 0
        self.project(min(upto, len(self.log.entries)))

    async def ours(self, command: tuple[Any, ...]) -> Any:
        kind, key, subject = target(command)
        store: AggregateStore[Any] = self.indexes if kind == "search" else self.blocks
        try:
            result = await store.execute(subject, key, decision(command))
        except MemstreamError as error:
            return (type(error).__name__, str(error))
        return outcome(result.events)

    def expected(self, command: tuple[Any, ...]) -> Any:
        try:
            return outcome(decision(command)(self.replay(*target(command))))
        except MemstreamError as error:
            return (type(error).__name__, str(error))

    async def other(self, command: tuple[Any, ...]) -> None:
        kind, key, subject = target(command)
        try:
            events = list(decision(command)(self.replay(kind, key, subject)))
        except MemstreamError:
            return
        await self.log.publish_behind(subject, events)

    def close(self) -> None:
        self.projector.close()
        self.reader.close()


async def run(program: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        world = World(Path(tmp) / "memstream.db")
        try:
            for step, action in enumerate(program):
                kind = action[0]
                if kind == "ours":
                    expected = world.expected(action[1])
                    assert await world.ours(action[1]) == expected, f"step {step}: {action}"
                elif kind == "other":
                    await world.other(action[1])
                elif kind == "project":
                    world.project(action[1])
                elif kind == "rebuild":
                    world.rebuild(action[1])
                else:
                    world.restart()
        finally:
            world.close()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=st.lists(steps, min_size=5, max_size=50))
@example(  # an entry written again unchanged, by a writer restored from the read model
    program=[
        ("ours", ("index", "k1", "a", 0)),
        ("project", 5),
        ("restart",),
        ("ours", ("index", "k1", "a", 0)),
        ("ours", ("index", "k1", "b", 0)),
    ]
)
@example(  # a read model dropped for a rebuild under a writer that looks entries up guarded
    program=[
        ("ours", ("index", "k1", "a", 0)),
        ("ours", ("index", "k2", "a", 0)),
        ("project", 5),
        ("restart",),
        ("ours", ("index", "k3", "b", 0)),
        ("rebuild", 0),
        ("ours", ("index", "k1", "a", 0)),
    ]
)
def test_blocks_restored_from_the_read_model_decide_as_a_replay(
    program: list[tuple[Any, ...]],
) -> None:
    asyncio.run(run(program))


async def test_a_new_writer_decides_on_a_long_written_block_without_reading_it(
    tmp_path: Path,
) -> None:
    world = World(tmp_path / "memstream.db")
    try:
        for n in range(300):
            await world.ours(("append", 0, f"line {n}"))
            await world.ours(("index", f"k{n % 50}", f"entry {n}", 0))
        world.project(len(world.log.entries))
        world.restart()
        read_before = world.log.entries_read
        # A new writer's first decisions: an append, a no-op rewrite, an entry unchanged, a new one
        expected = world.expected(("append", 0, "last line"))
        assert await world.ours(("append", 0, "last line")) == expected
        replayed = world.replay("block", DOCUMENTS[0], _document_subject(DOCUMENTS[0]))
        assert replayed.content.endswith("last line")
        assert await world.ours(("replace", 0, replayed.content)) == []
        assert await world.ours(("index", "k7", "entry 257", 0)) == []
        assert len(await world.ours(("index", "k7", "changed", 0))) == 1
        assert world.log.entries_read == read_before  # nothing of either subject was read
    finally:
        world.close()
