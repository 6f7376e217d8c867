"""The projector's transactions on SQLite: a batch of log records applied by the SQLite
projections, with their tracking rows, in one transaction.

A redelivered sequence at or below a projection's tracking row is skipped for it. What a batch
keeps between transactions (:class:`BatchMemo`) stays valid while no other connection writes to
the file. A failing event is retried with its batch; its last attempt gets a savepoint of its
own, so that it alone is rolled back and recorded as a dead letter.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memstream.domain.errors import InvalidInputError
from memstream.projections.analytics_projector import (
    AnalyticsBatch,
    Purge,
    project_analytics_event,
)
from memstream.projections.context_projector import project_context_event
from memstream.projections.memory_projector import project_memory_event
from memstream.projections.ports import (
    MAX_ATTEMPTS,
    LogRecord,
    ProjectorStats,
    ReadModelRewound,
    StoreBusy,
    TextEncoder,
    run_steps,
)
from memstream.projections.registry import PROJECTOR_PROJECTIONS
from memstream.projections.registry_projector import (
    Touches,
    TouchSession,
    project_registry_event,
)
from memstream.projections.session_projector import project_session_event
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
from memstream.projections.tracking import (
    UNPARTITIONED,
    TrackingRows,
    advance,
    pending_for,
    position_events,
)
from memstream.projections.vector_projector import (
    DropVectors,
    PreparedVectors,
    project_vector_event,
)

logger = logging.getLogger(__name__)


class Projection(Protocol):
    """One read model fed by the projector, as SQLite writes it."""

    name: str

    def apply(
        self, connection: sqlite3.Connection, namespace: str, seq: int, event: object
    ) -> None:
        """Write the effects of one event (inside the projector's transaction)."""

    def forget(self) -> None:
        """Drop what it remembers of the read model from earlier writes (after a rollback, or
        when another connection may have written to the file)."""

    def before_commit(self, connection: sqlite3.Connection) -> None:
        """Write what it held back during the transaction (called before it commits, and before
        an event that gets a savepoint of its own)."""


class SessionProjection:
    """Messages tree, message FTS and compaction overlays."""

    name = "sessions"

    def __init__(self) -> None:
        self.rows = SessionRows()

    def apply(
        self, connection: sqlite3.Connection, namespace: str, seq: int, event: object
    ) -> None:
        apply_session_writes(connection, project_session_event(namespace, seq, event), self.rows)

    def forget(self) -> None:
        self.rows.forget()

    def before_commit(self, connection: sqlite3.Connection) -> None:
        self.rows.flush(connection)  # see SessionRows: e.g. one FTS5 segment per batch


class _WritesAtOnce:
    """A projection whose writes for an event (a pure function of it) are applied at once: it
    remembers nothing between events and holds nothing back."""

    name: str

    def writes(self, namespace: str, seq: int, event: object) -> list[Any]:
        raise NotImplementedError

    def write(self, connection: sqlite3.Connection, writes: list[Any]) -> None:
        raise NotImplementedError

    def apply(
        self, connection: sqlite3.Connection, namespace: str, seq: int, event: object
    ) -> None:
        self.write(connection, self.writes(namespace, seq, event))

    def forget(self) -> None:
        pass

    def before_commit(self, connection: sqlite3.Connection) -> None:
        pass


class ContextProjection(_WritesAtOnce):
    """Built-in context blocks, cached prompts, loaded skills, search entries and their FTS."""

    name = "context"

    def writes(self, namespace: str, seq: int, event: object) -> list[Any]:
        return list(project_context_event(namespace, seq, event))

    def write(self, connection: sqlite3.Connection, writes: list[Any]) -> None:
        apply_context_writes(connection, writes)


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


class MemoryProjection(_WritesAtOnce):
    """Agent Memory: profiles, raw messages, memories, their search indexes and history."""

    name = "memory"

    def writes(self, namespace: str, seq: int, event: object) -> list[Any]:
        return list(project_memory_event(namespace, seq, event))

    def write(self, connection: sqlite3.Connection, writes: list[Any]) -> None:
        apply_memory_writes(connection, writes)


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


class AnalyticsProjection:
    """Daily volumes per namespace, model and source: a batch's increments are summed here
    and written before it commits (two statements per batch)."""

    name = "analytics"

    def __init__(self) -> None:
        self.batch = AnalyticsBatch()

    def apply(
        self, connection: sqlite3.Connection, namespace: str, seq: int, event: object
    ) -> None:
        writes = project_analytics_event(namespace, event, seq)
        self.batch.add(writes)
        for write in writes:
            if isinstance(write, Purge):
                self.before_commit(connection)
                purge_analytics(connection, write)

    def forget(self) -> None:
        self.batch.forget()

    def before_commit(self, connection: sqlite3.Connection) -> None:
        if self.batch:
            write_analytics(connection, *self.batch.take())


_PROJECTION_TYPES: dict[str, Any] = {
    "sessions": SessionProjection,
    "context": ContextProjection,
    "registry": RegistryProjection,
    "memory": MemoryProjection,
    "analytics": AnalyticsProjection,
}


def default_projections(
    names: Sequence[str] = PROJECTOR_PROJECTIONS, encoder: TextEncoder | None = None
) -> list[Projection]:
    """The SQLite projections named (``vectors`` embeds with ``encoder``).

    Raises:
        InvalidInputError: ``vectors`` without an encoder.
    """
    projections: list[Projection] = []
    for name in names:
        if name == "vectors":
            if encoder is None:
                raise InvalidInputError(
                    "the vectors projection needs an embedding model (the indexer's)"
                )
            projections.append(VectorProjection(encoder))
        else:
            projections.append(_PROJECTION_TYPES[name]())
    return projections


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
    before its end rolls the transaction back.

    ``committed`` is the lowest position the caller knows it committed before. When the read
    model is behind it inside this transaction (another process dropped it to rebuild it),
    nothing is written and :class:`ReadModelRewound` is raised: applying the batch would mark
    everything before it as done in the emptied model.

    A failing event is retried by the caller (the transaction rolls back); after
    ``MAX_ATTEMPTS`` failures, or at once when it cannot be decoded, it is recorded as a dead
    letter and passed over. Raises on failures that should be retried, and
    :class:`~memstream.domain.errors.ReadModelDamagedError` when the file is damaged.
    ``stats`` counts only what a committed transaction did (``attempts`` survives rollbacks:
    it is the retry count).

    ``memo`` (the projector's own, across its batches): see :class:`BatchMemo`.
    ``checkpointer`` hears of the commit. ``wait=False``: :class:`StoreBusy` at the first step
    when another connection holds the write lock, instead of waiting for it.
    """
    # Projections that prepare a batch (embeddings: seconds while a model loads) do it before
    # the transaction takes the file's write lock, which every other writer (a projector's
    # event loop among them) would wait for meanwhile.
    decoded = _prepare(projections, entries)
    transaction = BatchTransaction(
        connection,
        projections,
        committed=committed,
        memo=memo,
        checkpointer=checkpointer,
        wait=wait,
        rows=rows,
    )
    try:
        yield from transaction.apply(entries, stats, decoded)
        return transaction.commit(stats)
    finally:
        transaction.rollback()  # once committed, nothing to roll back


class BatchTransaction:
    """One write transaction of a projector's batches: begun at creation, then any number of
    :meth:`apply` of log records, then :meth:`commit` (with the projections' positions) or
    :meth:`rollback`. Reads on the same connection see what it applied once
    :meth:`expose` wrote what the projections hold back until their commit."""

    __slots__ = (
        "_checkpointer",
        "_connection",
        "_done",
        "_memo",
        "_open",
        "_positions",
        "_projections",
        "_records",
        "_rows",
    )

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
        self._connection = connection
        self._projections = projections
        self._rows = rows
        self._memo = memo
        self._checkpointer = checkpointer
        self._done = ProjectorStats()
        self._open = False
        # The last records applied, by sequence: the identities of those the positions end on
        # are recorded with them.
        self._records: dict[int, LogRecord] = {}
        with _translated():
            _begin_immediate(connection, wait)
            self._open = True
            try:
                positions = _begin_positions(connection, projections, memo, rows)
                if committed is not None and positions and min(positions.values()) < committed:
                    raise ReadModelRewound(
                        f"read model at {min(positions.values())}, was at {committed}"
                    )
            except BaseException:
                self.rollback()
                raise
        self._positions = positions

    @property
    def position(self) -> int:
        """The lowest position of its projections, what it applied included."""
        return min(self._positions.values()) if self._positions else 0

    def apply(
        self,
        entries: Sequence[LogRecord],
        stats: ProjectorStats,
        decoded: dict[int, object] | None = None,
    ) -> Generator[None, None, None]:
        """Apply ``entries``, pausing after each event (see :func:`batch_steps`). On a failure
        (raised) the caller rolls the transaction back. ``stats.attempts`` counts failures.

        ``decoded``: what :func:`_prepare` returned for ``entries``, prepared before the
        transaction began; without it projections that prepare do it now, holding the lock.
        """
        connection, projections = self._connection, self._projections
        positions, done, rows = self._positions, self._done, self._rows
        partitioned = rows.count > 0
        done.attempts = stats.attempts
        if decoded is None:
            decoded = _prepare(projections, entries)
        records = self._records
        try:
            for entry in entries:
                records[entry.seq] = entry
                pending = pending_for(projections, positions, rows, entry)
                if not pending:
                    done.skipped += 1
                    continue
                try:
                    event = decoded[entry.seq] if entry.seq in decoded else entry.decode()
                except Exception as error:
                    for projection in pending:
                        _dead_letter(connection, projection.name, entry, error, 1, done)
                        if partitioned:
                            advance(positions, rows.names(projection.name), entry.seq)
                        else:
                            positions[projection.name] = entry.seq
                    continue
                applied = False
                for projection in pending:
                    # Only an event that failed before gets a savepoint (so that its last
                    # attempt can be rolled back alone and dead-lettered): a savepoint per event
                    # would make FTS5 flush a segment per event, several times slower than
                    # batched inserts.
                    isolated = entry.seq in stats.attempts
                    if isolated:
                        # Nothing held back across it, by any projection: a failure here makes
                        # every projection forget what it holds, which must be this event's only.
                        for holder in projections:
                            holder.before_commit(connection)
                        connection.execute("SAVEPOINT event")
                    try:
                        projection.apply(connection, entry.namespace(), entry.seq, event)
                        if isolated:  # what it held back fails here, not outside the savepoint
                            projection.before_commit(connection)
                    except sqlite3.OperationalError:
                        raise  # locked/busy/disk: transient, retry the whole batch
                    except Exception as error:
                        if is_damage(error):
                            raise  # the file's fault, not the event's: the caller replaces it
                        attempts = stats.attempts.get(entry.seq, 0) + 1
                        stats.attempts[entry.seq] = attempts
                        if attempts < MAX_ATTEMPTS or not isolated:
                            raise  # the whole batch rolls back and is retried
                        connection.execute("ROLLBACK TO event")
                        connection.execute("RELEASE event")
                        for forgetful in projections:
                            forgetful.forget()  # it may remember rows of the event rolled back
                        _dead_letter(connection, projection.name, entry, error, attempts, done)
                    else:
                        if isolated:
                            connection.execute("RELEASE event")
                        applied = True
                    if partitioned:
                        advance(positions, rows.names(projection.name), entry.seq)
                    else:
                        positions[projection.name] = entry.seq
                done.applied += applied
                yield
        except sqlite3.DatabaseError as error:
            if is_damage(error):
                raise damaged(error) from error
            raise

    def expose(self) -> None:
        """Write what the projections hold back until the commit (search rows, counts), so
        that reads on this connection see everything applied."""
        with _translated():
            for projection in self._projections:
                projection.before_commit(self._connection)

    def commit(self, stats: ProjectorStats) -> int:
        """Write the positions and commit; the lowest position now committed. ``stats`` gets
        the counts of everything applied in the transaction.

        Raises:
            Exception: the commit failed: the transaction is rolled back.
        """
        try:
            self.expose()
            with _translated():
                set_tracked_seqs(
                    self._connection,
                    self._positions,
                    position_events(self._positions, self._records),
                )
                self._connection.execute("COMMIT")
        except BaseException:
            self.rollback()
            raise
        self._open = False
        if self._checkpointer is not None:
            self._checkpointer.committed()
        if self._memo is not None:
            self._memo.positions = dict(self._positions)
        done = self._done
        stats.batches += 1
        stats.applied += done.applied
        stats.skipped += done.skipped
        stats.dead_lettered += done.dead_lettered
        return self.position

    def rollback(self) -> None:
        """Roll back (nothing when it has ended)."""
        if not self._open:
            return
        self._open = False
        if self._memo is not None:
            self._memo.positions = None
        for projection in self._projections:
            projection.forget()
        with contextlib.suppress(sqlite3.Error):  # a failed COMMIT may have ended it already
            if self._connection.in_transaction:
                self._connection.execute("ROLLBACK")


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


def _prepare(projections: Sequence[Projection], entries: Sequence[LogRecord]) -> dict[int, object]:
    """Let projections that prepare a batch (outside its transaction) see its events; the
    events decoded for them, by sequence (an undecodable one is left to the batch)."""
    preparing = [p for p in projections if hasattr(p, "prepare")]
    if not preparing:
        return {}
    decoded: dict[int, object] = {}
    events: list[tuple[str, int, object]] = []
    for entry in entries:
        try:
            event = entry.decode()
        except Exception:  # dead-lettered by the batch
            continue
        decoded[entry.seq] = event
        events.append((entry.namespace(), entry.seq, event))
    for projection in preparing:
        projection.prepare(events)
    return decoded


def _dead_letter(
    connection: sqlite3.Connection,
    projection: str,
    entry: LogRecord,
    error: BaseException,
    attempts: int,
    stats: ProjectorStats,
) -> None:
    logger.error("dead letter: %s seq %d on %s: %r", projection, entry.seq, entry.subject, error)
    record_dead_letter(
        connection,
        projection,
        entry.seq,
        entry.subject,
        entry.event_type(),
        repr(error),
        attempts,
    )
    stats.dead_lettered += 1
