"""The projector's transactions on PostgreSQL: a batch of log records applied by the
PostgreSQL projections, with their positions, in one transaction.

The same contract as SQLite's (:mod:`memstream.projections.sqlite.batches`): a redelivered
sequence at or below a projection's position is skipped for it; a failing event is retried
with its batch, and its last attempt gets a savepoint of its own so that it alone is rolled
back and recorded as a dead letter; a batch that finds the positions below what its projector
committed (someone dropped the projection to rebuild it) writes nothing.

A transaction locks its projections' tracking rows first (``FOR UPDATE``): two writers of one
projection (a projector and a rebuild, say) take turns instead of interleaving, and
``wait=False`` fails at once with :class:`~memstream.projections.ports.StoreBusy` while
another holds them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from psycopg import errors

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
)
from memstream.projections.postgres.analytics import purge_analytics, write_analytics
from memstream.projections.postgres.context_writer import apply_context_writes
from memstream.projections.postgres.memory_writer import (
    apply_memory_writes,
    drop_vectors,
    store_vectors,
)
from memstream.projections.postgres.registry_writer import apply_registry_writes, touch_sessions
from memstream.projections.postgres.session_writer import PgSessionRows, apply_session_writes
from memstream.projections.postgres.vectors import ensure_index
from memstream.projections.registry import PROJECTOR_PROJECTIONS, VERSIONS
from memstream.projections.registry_projector import (
    ForgetSession,
    RegisterSession,
    Touches,
    TouchSession,
    project_registry_event,
)
from memstream.projections.session_projector import project_session_event
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

Connection = psycopg.Connection[tuple[Any, ...]]
# Sessions whose registration the registry projection remembers before it starts again.
KNOWN_SESSIONS = 4096


class PgProjection(Protocol):
    """One read model fed by the projector, as PostgreSQL writes it."""

    name: str

    def apply(self, connection: Connection, namespace: str, seq: int, event: object) -> None:
        """Write the effects of one event (inside the projector's transaction)."""

    def forget(self) -> None:
        """Drop what it remembers of the read model (after a rollback)."""

    def before_commit(self, connection: Connection) -> None:
        """Write what it held back (before the commit, and before an isolated event)."""


class PgSessionProjection:
    name = "sessions"

    def __init__(self) -> None:
        self.rows = PgSessionRows()

    def apply(self, connection: Connection, namespace: str, seq: int, event: object) -> None:
        apply_session_writes(connection, project_session_event(namespace, seq, event), self.rows)

    def forget(self) -> None:
        self.rows.forget()

    def before_commit(self, connection: Connection) -> None:
        self.rows.flush(connection)


class PgContextProjection:
    name = "context"

    def apply(self, connection: Connection, namespace: str, seq: int, event: object) -> None:
        apply_context_writes(connection, project_context_event(namespace, seq, event))

    def forget(self) -> None:
        pass

    def before_commit(self, connection: Connection) -> None:
        pass


class PgRegistryProjection:
    """Registered sessions; the touches of a batch are written once per session, and not at
    all for a session known not to be registered (most sessions never are: a touch of one
    would be a statement that changes nothing). What it knows holds while it is the registry's
    only writer (one projector per projection) and is forgotten after a rollback."""

    name = "registry"

    def __init__(self) -> None:
        self.touches = Touches()
        self.registered: dict[tuple[str, str], bool] = {}

    def apply(self, connection: Connection, namespace: str, seq: int, event: object) -> None:
        for write in project_registry_event(namespace, seq, event):
            if isinstance(write, TouchSession):
                self.touches.add(namespace, write)
                continue
            self.before_commit(connection)  # a later write must not be overtaken by a touch
            apply_registry_writes(connection, [write])
            if isinstance(write, RegisterSession | ForgetSession):
                self._know((write.namespace, write.session_id), isinstance(write, RegisterSession))

    def forget(self) -> None:
        self.touches.pending.clear()
        self.registered.clear()

    def before_commit(self, connection: Connection) -> None:
        if not self.touches.pending:
            return
        touches = [t for t in self.touches.take() if self.registered.get(t[:2]) is not False]
        if touches:
            touched = touch_sessions(connection, touches)
            for namespace, session_id, _, _ in touches:
                key = (namespace, session_id)
                self._know(key, key in touched)

    def _know(self, key: tuple[str, str], registered: bool) -> None:
        if len(self.registered) >= KNOWN_SESSIONS and key not in self.registered:
            self.registered.clear()
        self.registered[key] = registered


class PgMemoryProjection:
    name = "memory"

    def apply(self, connection: Connection, namespace: str, seq: int, event: object) -> None:
        apply_memory_writes(connection, project_memory_event(namespace, seq, event))

    def forget(self) -> None:
        pass

    def before_commit(self, connection: Connection) -> None:
        pass


class PgVectorProjection:
    """Embeddings; a batch's texts are embedded together in :meth:`prepare`, before its
    transaction begins (a model takes seconds; no row stays locked meanwhile)."""

    name = "vectors"

    def __init__(self, encoder: TextEncoder) -> None:
        self.encoder = encoder
        self.prepared = PreparedVectors(encoder)
        self.embeddings = False  # also stored for pgvector (set by the store that finds it)
        self._indexed: set[int] = set()  # dimensions whose HNSW index this transaction has

    def prepare(self, events: Sequence[tuple[str, int, object]]) -> None:
        self.prepared.prepare(events)

    def apply(self, connection: Connection, namespace: str, seq: int, event: object) -> None:
        for write in project_vector_event(namespace, seq, event):
            if isinstance(write, DropVectors):
                drop_vectors(connection, write)
            else:
                vectors = self.prepared.vectors(seq, write)
                if self.embeddings and len(vectors):
                    dimension = len(vectors[0])
                    if dimension not in self._indexed:
                        ensure_index(connection, dimension)
                        self._indexed.add(dimension)
                store_vectors(
                    connection,
                    write,
                    self.encoder.model_name,
                    vectors,
                    embeddings=self.embeddings,
                )

    def forget(self) -> None:
        self._indexed.clear()  # (an index made in a rolled back transaction is gone)

    def before_commit(self, connection: Connection) -> None:
        pass


class PgAnalyticsProjection:
    """Daily volumes per namespace, model and source: a batch's increments are summed here
    and written before it commits (two statements per batch)."""

    name = "analytics"

    def __init__(self) -> None:
        self.batch = AnalyticsBatch()

    def apply(self, connection: Connection, namespace: str, seq: int, event: object) -> None:
        writes = project_analytics_event(namespace, event, seq)
        self.batch.add(writes)
        for write in writes:
            if isinstance(write, Purge):
                self.before_commit(connection)
                purge_analytics(connection, write)

    def forget(self) -> None:
        self.batch.forget()

    def before_commit(self, connection: Connection) -> None:
        if self.batch:
            write_analytics(connection, *self.batch.take())


_TYPES: dict[str, Any] = {
    "sessions": PgSessionProjection,
    "context": PgContextProjection,
    "registry": PgRegistryProjection,
    "memory": PgMemoryProjection,
    "analytics": PgAnalyticsProjection,
}


def pg_projections(
    names: Sequence[str] = PROJECTOR_PROJECTIONS, encoder: TextEncoder | None = None
) -> list[PgProjection]:
    """The PostgreSQL projections named (``vectors`` embeds with ``encoder``).

    Raises:
        InvalidInputError: ``vectors`` without an encoder, or a name no projection has.
    """
    projections: list[PgProjection] = []
    for name in names:
        if name == "vectors":
            if encoder is None:
                raise InvalidInputError(
                    "the vectors projection needs an embedding model (the indexer's)"
                )
            projections.append(PgVectorProjection(encoder))
        elif name in _TYPES:
            projections.append(_TYPES[name]())
        else:
            raise InvalidInputError(f"no projection is called {name!r}")
    return projections


def ensure_tracking(
    connection: Connection, names: Sequence[str], rows: TrackingRows = UNPARTITIONED
) -> None:
    """Create the tracking rows of ``names`` that are missing (at 0, of the code's version),
    in a transaction of their own: a batch only locks existing rows (an insert inside it would
    make another batch wait on the uncommitted row, ``wait=False`` or not). With partitions
    (``rows``), every partition's rows, each at the projection's own position if it has one
    (every event up to it is applied, in every partition)."""
    every = [(row, name) for name in names for row in rows.every(name)]
    with connection.transaction():
        connection.execute(
            "INSERT INTO tracking (projection, seq, version, event) "
            "SELECT t.row, coalesce(o.seq, 0), t.version, o.event "
            "FROM unnest(%s::text[], %s::text[], %s::int[]) AS t (row, name, version) "
            "LEFT JOIN tracking AS o ON o.projection = t.name AND t.row <> t.name "
            "ON CONFLICT DO NOTHING",
            (
                [row for row, _ in every],
                [name for _, name in every],
                [VERSIONS[name] for _, name in every],
            ),
        )


def lock_positions(
    connection: Connection, names: Sequence[str], *, wait: bool = True, copy: str | None = None
) -> dict[str, int]:
    """Inside a transaction: the positions of ``names`` (see :func:`ensure_tracking`), their
    tracking rows locked until it ends; with ``copy``, checked to be of the copy of that id.

    Raises:
        StoreBusy: ``wait`` is false and another transaction holds one of them.
        ReadModelRewound: the database holds another copy than ``copy`` (it was replaced).
    """
    statement = (
        "SELECT projection, seq, (SELECT value FROM meta WHERE key = 'copy_id') FROM tracking "
        "WHERE projection = ANY(%s) ORDER BY projection FOR UPDATE OF tracking"
    )
    try:
        rows = connection.execute(
            statement if wait else statement + " NOWAIT", (list(names),)
        ).fetchall()
    except errors.LockNotAvailable as error:
        if wait:
            raise  # the lock timeout ran out: transient, tried again
        raise StoreBusy(str(error)) from error
    if copy is not None and any(row[2] != copy for row in rows):
        raise ReadModelRewound(f"the read model was replaced (copy {copy} is gone)")
    found = {str(name): int(seq) for name, seq, _ in rows}
    return {name: found.get(name, 0) for name in names}


@dataclass
class PgBatchMemo:
    """The positions a store's transactions committed last. What its projections remember
    of the rows (sessions' last rows, keys) stays valid while nobody else moves those positions:
    a batch that finds them moved makes them forget."""

    positions: dict[str, int] | None = None


class PgBatchTransaction:
    """One write transaction of a projector's batches: begun at creation, then any number of
    :meth:`apply`, then :meth:`commit` (with the positions) or :meth:`rollback`."""

    def __init__(
        self,
        connection: Connection,
        projections: Sequence[PgProjection],
        *,
        committed: int | None = None,
        wait: bool = True,
        copy: str | None = None,
        rows: TrackingRows = UNPARTITIONED,
        memo: PgBatchMemo | None = None,
    ) -> None:
        """``copy``: the id of the copy its writer opened (checked when it begins).
        ``memo``: the positions its store committed last (see :class:`PgBatchMemo`)."""
        self._connection = connection
        self._projections = projections
        self._rows = rows
        self._memo = memo
        self._done = ProjectorStats()
        self._open = True
        # The records applied, by sequence: the identities of those the positions end on are
        # recorded with them.
        self._records: dict[int, LogRecord] = {}
        try:
            with connection.pipeline():  # one round trip
                connection.execute("BEGIN")
                positions = lock_positions(
                    connection,
                    [row for p in projections for row in rows.names(p.name)],
                    wait=wait,
                    copy=copy,
                )
            if committed is not None and positions and min(positions.values()) < committed:
                raise ReadModelRewound(
                    f"read model at {min(positions.values())}, was at {committed}"
                )
            if memo is not None and memo.positions != positions:
                # Another connection wrote these rows since (a projector of the same partition
                # that had not seen it lost its lease, a rebuild): what the projections
                # remember of the rows may be stale.
                for projection in projections:
                    projection.forget()
        except BaseException:
            self.rollback()
            raise
        self._positions = positions

    @property
    def position(self) -> int:
        return min(self._positions.values()) if self._positions else 0

    def apply(
        self,
        entries: Sequence[LogRecord],
        stats: ProjectorStats,
        decoded: dict[int, object] | None = None,
    ) -> Generator[None, None, None]:
        """Apply ``entries``, pausing after each event. On a failure (raised) the caller rolls
        the transaction back. ``stats.attempts`` counts failures."""
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
                    _dead_letter(connection, projection.name, entry, error, 1, done)
                    if partitioned:
                        advance(positions, rows.names(projection.name), entry.seq)
                    else:
                        positions[projection.name] = entry.seq
                continue
            applied = False
            for projection in pending:
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
                except psycopg.OperationalError:
                    raise  # the server, the connection or a lock: transient, retry the batch
                except Exception as error:
                    attempts = stats.attempts.get(entry.seq, 0) + 1
                    stats.attempts[entry.seq] = attempts
                    if attempts < MAX_ATTEMPTS or not isolated:
                        raise
                    connection.execute("ROLLBACK TO SAVEPOINT event")
                    connection.execute("RELEASE SAVEPOINT event")
                    for forgetful in projections:
                        forgetful.forget()
                    _dead_letter(connection, projection.name, entry, error, attempts, done)
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

    def expose(self) -> None:
        """Write what the projections held back."""
        for projection in self._projections:
            projection.before_commit(self._connection)

    def commit(self, stats: ProjectorStats) -> int:
        """Write the positions and commit; the lowest position now committed."""
        try:
            self.expose()
            names = sorted(self._positions)
            seqs = [self._positions[name] for name in names]
            events = position_events(self._positions, self._records)
            with self._connection.pipeline():  # one round trip
                # A row whose sequence did not move keeps the identity it had.
                self._connection.execute(
                    "UPDATE tracking AS t SET seq = p.seq, event = "
                    "coalesce(p.event, CASE WHEN t.seq = p.seq THEN t.event END) "
                    "FROM unnest(%s::text[], %s::bigint[], %s::text[]) "
                    "AS p (projection, seq, event) "
                    "WHERE t.projection = p.projection",
                    (names, seqs, [events.get(seq) for seq in seqs]),
                    prepare=False,
                )
                self._connection.execute("COMMIT")
        except BaseException:
            self.rollback()
            raise
        self._open = False
        if self._memo is not None:
            self._memo.positions = dict(self._positions)
        done = self._done
        stats.batches += 1
        stats.applied += done.applied
        stats.skipped += done.skipped
        stats.dead_lettered += done.dead_lettered
        return self.position

    def rollback(self) -> None:
        if not self._open:
            return
        self._open = False
        if self._memo is not None:
            self._memo.positions = None
        for projection in self._projections:
            projection.forget()
        with contextlib.suppress(psycopg.Error):
            self._connection.execute("ROLLBACK")


def batch_steps(
    connection: Connection,
    projections: Sequence[PgProjection],
    entries: Sequence[LogRecord],
    stats: ProjectorStats,
    *,
    committed: int | None = None,
    wait: bool = True,
    copy: str | None = None,
    rows: TrackingRows = UNPARTITIONED,
    memo: PgBatchMemo | None = None,
) -> Generator[None, None, int]:
    """Apply ``entries`` in one transaction, pausing after each event, and commit; returns
    the lowest position now committed. Closing the generator early rolls it back."""
    decoded = prepare(projections, entries)
    transaction = PgBatchTransaction(
        connection, projections, committed=committed, wait=wait, copy=copy, rows=rows, memo=memo
    )
    try:
        yield from transaction.apply(entries, stats, decoded)
        return transaction.commit(stats)
    finally:
        transaction.rollback()


def prepare(projections: Sequence[PgProjection], entries: Sequence[LogRecord]) -> dict[int, object]:
    """Let projections that prepare a batch see its events before its transaction; the events
    decoded for them, by sequence (an undecodable one is left to the batch)."""
    preparing = [p for p in projections if hasattr(p, "prepare")]
    if not preparing:
        return {}
    decoded: dict[int, object] = {}
    events: list[tuple[str, int, object]] = []
    for entry in entries:
        try:
            event = entry.decode()
        except Exception:
            continue
        decoded[entry.seq] = event
        events.append((entry.namespace(), entry.seq, event))
    for projection in preparing:
        projection.prepare(events)
    return decoded


def _dead_letter(
    connection: Connection,
    projection: str,
    entry: LogRecord,
    error: BaseException,
    attempts: int,
    stats: ProjectorStats,
) -> None:
    logger.error("dead letter: %s seq %d on %s: %r", projection, entry.seq, entry.subject, error)
    connection.execute(
        "INSERT INTO dead_letters (projection, seq, subject, topic, error, attempts) "
        "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (projection, seq) DO UPDATE SET "
        "error = excluded.error, attempts = excluded.attempts",
        (projection, entry.seq, entry.subject, entry.event_type(), repr(error), attempts),
    )
    stats.dead_lettered += 1
