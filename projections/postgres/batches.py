"""The projector's transactions on PostgreSQL: a batch of log records applied by the
PostgreSQL projections, with their positions, in one transaction (the contract:
:mod:`memstream.projections.sql.batches`).

A transaction locks its projections' tracking rows first (``FOR UPDATE``): two writers of one
projection (a projector and a rebuild, say) take turns instead of interleaving, and
``wait=False`` fails at once with :class:`~memstream.projections.ports.StoreBusy` while
another holds them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors

from memstream.projections.ports import (
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
from memstream.projections.registry import VERSIONS
from memstream.projections.registry_projector import (
    ForgetSession,
    RegisterSession,
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
from memstream.projections.tracking import UNPARTITIONED, TrackingRows
from memstream.projections.vector_projector import (
    DropVectors,
    PreparedVectors,
    project_vector_event,
)

Connection = psycopg.Connection[tuple[Any, ...]]
# Sessions whose registration the registry projection remembers before it starts again.
KNOWN_SESSIONS = 4096


WRITES = EngineWrites(
    session_rows=PgSessionRows,
    sessions=apply_session_writes,
    context=apply_context_writes,
    memory=apply_memory_writes,
    analytics=write_analytics,
    purge_analytics=purge_analytics,
)


class RegistryProjection:
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


class VectorProjection:
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


# The PostgreSQL projections named (``vectors`` embeds with an encoder).
default_projections = EngineProjections(WRITES, RegistryProjection, VectorProjection)


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
class BatchMemo:
    """The positions a store's transactions committed last. What its projections remember
    of the rows (sessions' last rows, keys) stays valid while nobody else moves those positions:
    a batch that finds them moved makes them forget."""

    positions: dict[str, int] | None = None


class BatchTransaction(SqlBatchTransaction):
    """A batch's transaction on PostgreSQL: its projections' tracking rows locked when it
    begins."""

    __slots__ = ()

    transient = psycopg.OperationalError  # the server, the connection or a lock

    def __init__(
        self,
        connection: Connection,
        projections: Sequence[Projection],
        *,
        committed: int | None = None,
        wait: bool = True,
        copy: str | None = None,
        rows: TrackingRows = UNPARTITIONED,
        memo: BatchMemo | None = None,
    ) -> None:
        """``copy``: the id of the copy its writer opened (checked when it begins).
        ``memo``: the positions its store committed last (see :class:`BatchMemo`)."""
        super().__init__(connection, projections, rows, memo)
        self._open = True
        try:
            with connection.pipeline():  # one round trip
                connection.execute("BEGIN")
                positions = lock_positions(
                    connection,
                    [row for p in projections for row in rows.names(p.name)],
                    wait=wait,
                    copy=copy,
                )
            self._began(positions, committed)
            if memo is not None and memo.positions != positions:
                # Another connection wrote these rows since (a projector of the same partition
                # that had not seen it lost its lease, a rebuild): what the projections
                # remember of the rows may be stale.
                for projection in projections:
                    projection.forget()
        except BaseException:
            self.rollback()
            raise

    def _write_positions(self, positions: dict[str, int], events: dict[int, str]) -> None:
        names = sorted(positions)
        seqs = [positions[name] for name in names]
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

    def _roll_back(self) -> None:
        with contextlib.suppress(psycopg.Error):
            self._connection.execute("ROLLBACK")

    def _dead_letter(
        self, projection: str, entry: LogRecord, error: BaseException, attempts: int
    ) -> None:
        self._connection.execute(
            "INSERT INTO dead_letters (projection, seq, subject, topic, error, attempts) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (projection, seq) DO UPDATE SET "
            "error = excluded.error, attempts = excluded.attempts",
            (projection, entry.seq, entry.subject, entry.event_type(), repr(error), attempts),
        )


def batch_steps(
    connection: Connection,
    projections: Sequence[Projection],
    entries: Sequence[LogRecord],
    stats: ProjectorStats,
    *,
    committed: int | None = None,
    wait: bool = True,
    copy: str | None = None,
    rows: TrackingRows = UNPARTITIONED,
    memo: BatchMemo | None = None,
) -> Generator[None, None, int]:
    """Apply ``entries`` in one transaction, pausing after each event, and commit; returns
    the lowest position now committed. Closing the generator early rolls it back."""
    decoded = prepare(projections, entries)
    transaction = BatchTransaction(
        connection, projections, committed=committed, wait=wait, copy=copy, rows=rows, memo=memo
    )
    return (yield from steps(transaction, entries, stats, decoded))
