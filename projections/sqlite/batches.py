"""The projector's transactions on SQLite: a batch of log records applied by the SQLite
projections, with their tracking rows, in one transaction (the contract:
:mod:`memstream.projections.sql.batches`).

What a batch keeps between transactions (:class:`BatchMemo`) stays valid while no other
connection writes to the file. A damaged file's error is raised as
:class:`~memstream.domain.errors.ReadModelDamagedError`, never recorded as an event's.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass

from memstream.projections.ports import (
    LogRecord,
    ProjectorStats,
    StoreBusy,
    TextEncoder,
    run_steps,
)
from memstream.projections.registry_projector import (
    Touches,
    TouchSession,
    project_registry_event,
)
from memstream.projections.sql.batches import (
    EngineProjections,
    EngineWrites,
    Projection,
    SqlBatchTransaction,
    prepare,
    steps,
)
from memstream.projections.sqlite.analytics import purge_analytics, write_analytics
from memstream.projections.sqlite.checkpointer import Checkpointer
from memstream.projections.sqlite.context_writer import apply_context_writes
from memstream.projections.sqlite.damage import damaged, is_damage
from memstream.projections.sqlite.database import (
    record_dead_letter,
    set_tracked_seqs,
    tracked_seqs,
)
from memstream.projections.sqlite.memory_writer import apply_memory_writes
from memstream.projections.sqlite.registry_writer import apply_registry_writes, touch_sessions
from memstream.projections.sqlite.session_writer import SessionRows, apply_session_writes
from memstream.projections.sqlite.vector_writer import drop_vectors, store_vectors
from memstream.projections.tracking import UNPARTITIONED, TrackingRows
from memstream.projections.vector_projector import (
    DropVectors,
    PreparedVectors,
    project_vector_event,
)

__all__ = ["BatchMemo", "BatchTransaction", "Projection", "apply_batch", "batch_steps"]


WRITES = EngineWrites(
    session_rows=SessionRows,
    sessions=apply_session_writes,
    context=apply_context_writes,
    memory=apply_memory_writes,
    analytics=write_analytics,
    purge_analytics=purge_analytics,
)


class RegistryProjection:
    """Registered sessions (SessionManager): names, models, usage, last activity.

    Every event of a session touches its row (``updated_at``): the touches of a batch wait here
    and are written once per session before the transaction commits (or before a registry
    write), one statement for the batch instead of one per event.
    """

    name = "registry"

    def __init__(self) -> None:
        self.touches = Touches()

    def apply(
        self, connection: sqlite3.Connection, namespace: str, seq: int, event: object
    ) -> None:
        for write in project_registry_event(namespace, seq, event):
            if isinstance(write, TouchSession):
                self.touches.add(namespace, write)
            else:
                self.before_commit(connection)  # a later write must not be overtaken by a touch
                apply_registry_writes(connection, [write])

    def forget(self) -> None:
        self.touches.pending.clear()

    def before_commit(self, connection: sqlite3.Connection) -> None:
        if self.touches.pending:
            touch_sessions(connection, self.touches.take())


class VectorProjection:
    """Embeddings of memories and raw messages. The texts of a batch are embedded together in
    :meth:`prepare`, before its transaction begins (a model takes seconds; the file's write
    lock is held only while the vectors are written)."""

    name = "vectors"

    def __init__(self, encoder: TextEncoder) -> None:
        self.encoder = encoder
        self.prepared = PreparedVectors(encoder)

    def prepare(self, events: Sequence[tuple[str, int, object]]) -> None:
        """Embed the texts of a batch's events at once."""
        self.prepared.prepare(events)

    def apply(
        self, connection: sqlite3.Connection, namespace: str, seq: int, event: object
    ) -> None:
        for write in project_vector_event(namespace, seq, event):
            if isinstance(write, DropVectors):
                drop_vectors(connection, write)
            else:
                vectors = self.prepared.vectors(seq, write)
                store_vectors(connection, write, self.encoder.model_name, vectors)

    def forget(self) -> None:
        pass  # what it prepared is keyed by the events: still right for a retried batch

    def before_commit(self, connection: sqlite3.Connection) -> None:
        pass


# The SQLite projections named (``vectors`` embeds with an encoder).
default_projections = EngineProjections(WRITES, RegistryProjection, VectorProjection)


@dataclass
class BatchMemo:
    """What a projector keeps between its transactions: the positions it committed last. They
    (and what its projections remember, see :meth:`Projection.forget`) stay valid while no other
    connection writes to the file, which ``PRAGMA data_version`` tells: it changes on a
    connection when another one has committed since (a rebuild, a second writer)."""

    connection: sqlite3.Connection | None = None
    version: int = -1
    positions: dict[str, int] | None = None


def _begin_positions(
    connection: sqlite3.Connection,
    projections: Sequence[Projection],
    memo: BatchMemo | None,
    rows: TrackingRows,
) -> dict[str, int]:
    """The projections' positions at the start of a batch (inside its transaction)."""
    if memo is not None:
        version = int(connection.execute("PRAGMA data_version").fetchone()[0])
        if memo.connection is connection and memo.version == version and memo.positions:
            return dict(memo.positions)
        memo.connection, memo.version, memo.positions = connection, version, None
    for projection in projections:
        projection.forget()
    return tracked_seqs(connection, [row for p in projections for row in rows.names(p.name)])


def apply_batch(
    connection: sqlite3.Connection,
    projections: Sequence[Projection],
    entries: Sequence[LogRecord],
    stats: ProjectorStats,
    *,
    committed: int | None = None,
    memo: BatchMemo | None = None,
) -> int:
    """Apply entries in one transaction; return the highest sequence now tracked.

    :func:`batch_steps` driven to its end, without pausing; see there.
    """
    steps = batch_steps(connection, projections, entries, stats, committed=committed, memo=memo)
    return run_steps(steps)


def batch_steps(
    connection: sqlite3.Connection,
    projections: Sequence[Projection],
    entries: Sequence[LogRecord],
    stats: ProjectorStats,
    *,
    committed: int | None = None,
    memo: BatchMemo | None = None,
    checkpointer: Checkpointer | None = None,
    wait: bool = True,
    rows: TrackingRows = UNPARTITIONED,
) -> Generator[None, None, int]:
    """Apply entries in one transaction (:class:`BatchTransaction`), pausing (``yield``) after
    each event, and commit; the generator returns the highest sequence now tracked. Closing it
    before its end rolls the transaction back. ``committed``, retries and dead letters: see
    :mod:`memstream.projections.sql.batches`; ``stats`` counts only what a committed
    transaction did (``attempts`` survives rollbacks: it is the retry count).

    Raises :class:`~memstream.domain.errors.ReadModelDamagedError` when the file is damaged.
    ``memo`` (the projector's own, across its batches): see :class:`BatchMemo`.
    ``checkpointer`` hears of the commit. ``wait=False``: :class:`StoreBusy` at the first step
    when another connection holds the write lock, instead of waiting for it.
    """
    # Projections that prepare a batch (embeddings: seconds while a model loads) do it before
    # the transaction takes the file's write lock, which every other writer (a projector's
    # event loop among them) would wait for meanwhile.
    decoded = prepare(projections, entries)
    transaction = BatchTransaction(
        connection,
        projections,
        committed=committed,
        memo=memo,
        checkpointer=checkpointer,
        wait=wait,
        rows=rows,
    )
    return (yield from steps(transaction, entries, stats, decoded))


class BatchTransaction(SqlBatchTransaction):
    """A batch's transaction on SQLite: the file's write lock taken when it begins."""

    __slots__ = ("_checkpointer",)

    transient = sqlite3.OperationalError  # locked, busy, disk
    _damage = staticmethod(is_damage)

    def __init__(
        self,
        connection: sqlite3.Connection,
        projections: Sequence[Projection],
        *,
        committed: int | None = None,
        memo: BatchMemo | None = None,
        checkpointer: Checkpointer | None = None,
        wait: bool = True,
        rows: TrackingRows = UNPARTITIONED,
    ) -> None:
        super().__init__(connection, projections, rows, memo)
        self._checkpointer = checkpointer
        with _translated():
            _begin_immediate(connection, wait)
            self._open = True
            try:
                self._began(_begin_positions(connection, projections, memo, rows), committed)
            except BaseException:
                self.rollback()
                raise

    def apply(
        self,
        entries: Sequence[LogRecord],
        stats: ProjectorStats,
        decoded: dict[int, object] | None = None,
    ) -> Generator[None, None, None]:
        with _translated():
            yield from super().apply(entries, stats, decoded)

    def expose(self) -> None:
        with _translated():
            super().expose()

    def _write_positions(self, positions: dict[str, int], events: dict[int, str]) -> None:
        with _translated():
            set_tracked_seqs(self._connection, positions, events)
            self._connection.execute("COMMIT")

    def _committed(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.committed()

    def _roll_back(self) -> None:
        with contextlib.suppress(sqlite3.Error):  # a failed COMMIT may have ended it already
            if self._connection.in_transaction:
                self._connection.execute("ROLLBACK")

    def _dead_letter(
        self, projection: str, entry: LogRecord, error: BaseException, attempts: int
    ) -> None:
        record_dead_letter(
            self._connection,
            projection,
            entry.seq,
            entry.subject,
            entry.event_type(),
            repr(error),
            attempts,
        )


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """A damaged file's error as :class:`ReadModelDamagedError`, any other unchanged."""
    try:
        yield
    except sqlite3.DatabaseError as error:
        if is_damage(error):
            raise damaged(error) from error
        raise


def _begin_immediate(connection: sqlite3.Connection, wait: bool) -> None:
    """Take the file's write lock; without ``wait``, fail at once with :class:`StoreBusy`
    when another connection holds it (an event loop must not sleep in SQLite's busy handler,
    up to its busy timeout, while another process or thread writes)."""
    if wait:
        connection.execute("BEGIN IMMEDIATE")
        return
    timeout = int(connection.execute("PRAGMA busy_timeout").fetchone()[0])
    connection.execute("PRAGMA busy_timeout = 0")
    try:
        connection.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as error:
        if error.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
            raise StoreBusy(str(error)) from error
        raise
    finally:
        connection.execute(f"PRAGMA busy_timeout = {timeout}")
