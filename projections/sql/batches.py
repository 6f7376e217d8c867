"""The projector's transactions on either engine: a batch of log records applied by the
projections, with their positions, in one transaction.

A redelivered sequence at or below a projection's position is skipped for it. A failing event
is retried with its batch; its last attempt gets a savepoint of its own, so that it alone is
rolled back and recorded as a dead letter. A batch that finds the positions below what its
projector committed (someone dropped the projection to rebuild it) writes nothing. Each engine
begins, commits and rolls back its own way (:class:`SqlBatchTransaction`'s hooks).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

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
    TextEncoder,
)
from memstream.projections.registry import PROJECTOR_PROJECTIONS
from memstream.projections.session_projector import project_session_event
from memstream.projections.tracking import (
    UNPARTITIONED,
    TrackingRows,
    advance,
    pending_for,
    position_events,
)

logger = logging.getLogger(__name__)


class Projection(Protocol):
    """One read model fed by the projector."""

    name: str

    def apply(self, connection: Any, namespace: str, seq: int, event: object) -> None:
        """Write the effects of one event (inside the projector's transaction)."""

    def forget(self) -> None:
        """Drop what it remembers of the read model from earlier writes (after a rollback, or
        when another connection may have written)."""

    def before_commit(self, connection: Any) -> None:
        """Write what it held back during the transaction (called before it commits, and before
        an event that gets a savepoint of its own)."""


class Memo(Protocol):
    """What a projector keeps between its transactions: the positions it committed last."""

    positions: dict[str, int] | None


@dataclass(frozen=True, slots=True)
class EngineWrites:
    """An engine's writers of the projections written once here."""

    session_rows: Callable[[], Any]  # what a sessions projection remembers of its rows
    sessions: Callable[[Any, Any, Any], None]  # (connection, writes, rows)
    context: Callable[[Any, Any], None]  # (connection, writes)
    memory: Callable[[Any, Any], None]  # (connection, writes)
    analytics: Callable[..., None]  # (connection, counts, sessions, ...)
    purge_analytics: Callable[[Any, Purge], None]


class _WritesAtOnce:
    """A projection whose writes for an event (a pure function of it) are applied at once: it
    remembers nothing between events and holds nothing back."""

    name: str

    def __init__(self, writes: EngineWrites) -> None:
        self.writes = writes

    @staticmethod
    def project(namespace: str, seq: int, event: object) -> Iterable[Any]:
        raise NotImplementedError

    def write(self, connection: Any, writes: list[Any]) -> None:
        raise NotImplementedError

    def apply(self, connection: Any, namespace: str, seq: int, event: object) -> None:
        self.write(connection, list(self.project(namespace, seq, event)))

    def forget(self) -> None:
        pass

    def before_commit(self, connection: Any) -> None:
        pass


class SqlContextProjection(_WritesAtOnce):
    """Built-in context blocks, cached prompts, loaded skills, search entries and their
    full-text index."""

    name = "context"
    project = staticmethod(project_context_event)

    def write(self, connection: Any, writes: list[Any]) -> None:
        self.writes.context(connection, writes)


class SqlMemoryProjection(_WritesAtOnce):
    """Agent Memory: profiles, raw messages, memories, their search indexes and history."""

    name = "memory"
    project = staticmethod(project_memory_event)

    def write(self, connection: Any, writes: list[Any]) -> None:
        self.writes.memory(connection, writes)


class SqlSessionProjection:
    """Messages tree, its full-text index and compaction overlays: its writes go through the
    engine's rows, which remember keys and hold some writes back until
    :meth:`before_commit`."""

    name = "sessions"

    def __init__(self, writes: EngineWrites) -> None:
        self.writes = writes
        self.rows = writes.session_rows()

    def apply(self, connection: Any, namespace: str, seq: int, event: object) -> None:
        self.writes.sessions(connection, project_session_event(namespace, seq, event), self.rows)

    def forget(self) -> None:
        self.rows.forget()

    def before_commit(self, connection: Any) -> None:
        self.rows.flush(connection)


class SqlAnalyticsProjection:
    """Daily volumes per namespace, model and source: a batch's increments are summed here
    and written before it commits."""

    name = "analytics"

    def __init__(self, writes: EngineWrites) -> None:
        self.writes = writes
        self.batch = AnalyticsBatch()

    def apply(self, connection: Any, namespace: str, seq: int, event: object) -> None:
        writes = project_analytics_event(namespace, event, seq)
        self.batch.add(writes)
        for write in writes:
            if isinstance(write, Purge):
                self.before_commit(connection)
                self.writes.purge_analytics(connection, write)

    def forget(self) -> None:
        self.batch.forget()

    def before_commit(self, connection: Any) -> None:
        if self.batch:
            self.writes.analytics(connection, *self.batch.take())


class EngineProjections:
    """An engine's projections by name: those written once here, made with its ``writes``,
    and its own ``registry`` and ``vectors`` (which embeds with an encoder)."""

    def __init__(
        self,
        writes: EngineWrites,
        registry: Callable[[], Projection],
        vectors: Callable[[TextEncoder], Projection],
    ) -> None:
        self.vectors = vectors
        self.types: dict[str, Callable[[], Projection]] = {
            "sessions": functools.partial(SqlSessionProjection, writes),
            "context": functools.partial(SqlContextProjection, writes),
            "registry": registry,
            "memory": functools.partial(SqlMemoryProjection, writes),
            "analytics": functools.partial(SqlAnalyticsProjection, writes),
        }

    def __call__(
        self, names: Sequence[str] = PROJECTOR_PROJECTIONS, encoder: TextEncoder | None = None
    ) -> list[Projection]:
        """The projections named (``vectors`` embeds with ``encoder``).

        Raises:
            InvalidInputError: ``vectors`` without an encoder, or a name no projection has.
        """
        projections: list[Projection] = []
        for name in names:
            if name == "vectors":
                if encoder is None:
                    raise InvalidInputError(
                        "the vectors projection needs an embedding model (the indexer's)"
                    )
                projections.append(self.vectors(encoder))
            elif name in self.types:
                projections.append(self.types[name]())
            else:
                raise InvalidInputError(f"no projection is called {name!r}")
        return projections


class SqlBatchTransaction:
    """One write transaction of a projector's batches: begun by the engine's constructor, then
    any number of :meth:`apply` of log records, then :meth:`commit` (with the projections'
    positions) or :meth:`rollback`. Reads on the same connection see what it applied once
    :meth:`expose` wrote what the projections hold back until their commit.

    An engine sets ``transient`` (its driver's errors to retry the whole batch with) and
    implements :meth:`_dead_letter`, :meth:`_write_positions` (and commit) and
    :meth:`_roll_back`; ``_damage`` tells a damaged file's error from an event's."""

    __slots__ = (
        "_connection",
        "_done",
        "_memo",
        "_open",
        "_positions",
        "_projections",
        "_records",
        "_rows",
    )

    transient: ClassVar[type[Exception]] = Exception

    def __init__(
        self,
        connection: Any,
        projections: Sequence[Projection],
        rows: TrackingRows = UNPARTITIONED,
        memo: Memo | None = None,
    ) -> None:
        self._connection = connection
        self._projections = projections
        self._rows = rows
        self._memo = memo
        self._done = ProjectorStats()
        self._open = False
        self._positions: dict[str, int] = {}
        # The last records applied, by sequence: the identities of those the positions end on
        # are recorded with them.
        self._records: dict[int, LogRecord] = {}

    def _began(self, positions: dict[str, int], committed: int | None) -> None:
        """Take the positions found when the transaction began.

        Raises:
            ReadModelRewound: they are behind ``committed`` (the read model was emptied).
        """
        if committed is not None and positions and min(positions.values()) < committed:
            raise ReadModelRewound(f"read model at {min(positions.values())}, was at {committed}")
        self._positions = positions

    @property
    def position(self) -> int:
        """The lowest position of its projections, what it applied included."""
        return min(self._positions.values()) if self._positions else 0

    @staticmethod
    def _damage(error: BaseException) -> bool:
        return False

    def _dead_letter(
        self, projection: str, entry: LogRecord, error: BaseException, attempts: int
    ) -> None:
        raise NotImplementedError

    def _write_positions(self, positions: dict[str, int], events: dict[int, str]) -> None:
        """Write the positions and commit."""
        raise NotImplementedError

    def _roll_back(self) -> None:
        raise NotImplementedError

    def _committed(self) -> None:
        """After the commit (an engine hears of it here)."""

    def apply(
        self,
        entries: Sequence[LogRecord],
        stats: ProjectorStats,
        decoded: dict[int, object] | None = None,
    ) -> Generator[None, None, None]:
        """Apply ``entries``, pausing (``yield``) after each event. On a failure (raised) the
        caller rolls the transaction back. ``stats.attempts`` counts failures.

        ``decoded``: what :func:`prepare` returned for ``entries``, prepared before the
        transaction began; without it projections that prepare do it now, inside it.
        """
        connection, projections = self._connection, self._projections
        positions, done, rows = self._positions, self._done, self._rows
        partitioned = rows.count > 0
        done.attempts = stats.attempts
        if decoded is None:
            decoded = prepare(projections, entries)
        records = self._records
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
                    self._lost(projection.name, entry, error, 1)
                    if partitioned:
                        advance(positions, rows.names(projection.name), entry.seq)
                    else:
                        positions[projection.name] = entry.seq
                continue
            applied = False
            for projection in pending:
                # Only an event that failed before gets a savepoint (so that its last attempt
                # can be rolled back alone and dead-lettered): a savepoint per event would make
                # SQLite's FTS5 flush a segment per event, several times slower than batched
                # inserts.
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
                except self.transient:
                    raise  # locked, busy, disk, server, connection: retry the whole batch
                except Exception as error:
                    if self._damage(error):
                        raise  # the file's fault, not the event's: the caller replaces it
                    attempts = stats.attempts.get(entry.seq, 0) + 1
                    stats.attempts[entry.seq] = attempts
                    if attempts < MAX_ATTEMPTS or not isolated:
                        raise  # the whole batch rolls back and is retried
                    connection.execute("ROLLBACK TO SAVEPOINT event")
                    connection.execute("RELEASE SAVEPOINT event")
                    for forgetful in projections:
                        forgetful.forget()  # it may remember rows of the event rolled back
                    self._lost(projection.name, entry, error, attempts)
                else:
                    if isolated:
                        connection.execute("RELEASE SAVEPOINT event")
                    applied = True
                if partitioned:
                    advance(positions, rows.names(projection.name), entry.seq)
                else:
                    positions[projection.name] = entry.seq
            done.applied += applied
            yield

    def _lost(self, projection: str, entry: LogRecord, error: BaseException, attempts: int) -> None:
        logger.error(
            "dead letter: %s seq %d on %s: %r", projection, entry.seq, entry.subject, error
        )
        self._dead_letter(projection, entry, error, attempts)
        self._done.dead_lettered += 1

    def expose(self) -> None:
        """Write what the projections hold back until the commit (search rows, counts), so
        that reads on this connection see everything applied."""
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
            self._write_positions(self._positions, position_events(self._positions, self._records))
        except BaseException:
            self.rollback()
            raise
        self._open = False
        self._committed()
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
        self._roll_back()


def steps(
    transaction: SqlBatchTransaction,
    entries: Sequence[LogRecord],
    stats: ProjectorStats,
    decoded: dict[int, object],
) -> Generator[None, None, int]:
    """Apply ``entries`` in ``transaction``, pausing after each event, and commit; returns the
    lowest position now committed. Closing the generator early rolls it back.

    ``committed`` (given to the transaction) is the lowest position the caller knows it
    committed before. When the read model is behind it inside this transaction (another process
    dropped it to rebuild it), nothing is written and :class:`ReadModelRewound` is raised:
    applying the batch would mark everything before it as done in the emptied model.

    A failing event is retried by the caller (the transaction rolls back); after
    ``MAX_ATTEMPTS`` failures, or at once when it cannot be decoded, it is recorded as a dead
    letter and passed over. Raises on failures that should be retried.
    """
    try:
        yield from transaction.apply(entries, stats, decoded)
        return transaction.commit(stats)
    finally:
        transaction.rollback()  # once committed, nothing to roll back


def prepare(projections: Sequence[Projection], entries: Sequence[LogRecord]) -> dict[int, object]:
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
