"""The write side of a PostgreSQL read-model copy: batches of log records applied with their
positions, dead letters, projections dropped for a rebuild or because their version changed."""

from __future__ import annotations

import logging
from collections.abc import Generator, Sequence
from typing import Any

import psycopg

from memstream.projections.ports import (
    PROJECTOR_PROJECTIONS,
    VERSIONS,
    LogRecord,
    ProjectorStats,
    TextEncoder,
    run_steps,
)
from memstream.projections.postgres.batches import (
    PgBatchTransaction,
    batch_steps,
    ensure_tracking,
    lock_positions,
    pg_projections,
)
from memstream.projections.postgres.connection import connect, describe, unavailable
from memstream.projections.postgres.schema import copy_id, migrate

logger = logging.getLogger(__name__)

Connection = psycopg.Connection[tuple[Any, ...]]

LOCK_TIMEOUT_MS = 30_000
# Tables each projection owns: emptied together when it is dropped.
PROJECTION_TABLES: dict[str, tuple[str, ...]] = {
    "sessions": ("session_keys", "messages", "compactions", "session_state"),
    "context": (
        "context_blocks",
        "cached_prompts",
        "loaded_skills",
        "search_blocks",
        "search_entries",
    ),
    "registry": ("session_registry",),
    "memory": (
        "memory_profiles",
        "memory_messages",
        "memories",
        "memory_sources",
        "memory_history",
        "memory_extractions",
    ),
    "vectors": ("memory_vectors",),
}


class PostgresReadModelStore:
    """A projector's (or a rebuild's) store on one PostgreSQL database, for ``projections``.

    Its connection is its own, in autocommit mode: each batch is one explicit transaction.
    """

    def __init__(
        self,
        url: str,
        projections: Sequence[str] = PROJECTOR_PROJECTIONS,
        *,
        encoder: TextEncoder | None = None,
        long_lived: bool = False,
    ) -> None:
        """``long_lived``: a projector's store, which empties a projection of another version
        to project it again (a reader's or a rebuild's store never does)."""
        self.url = url
        self._names = list(projections)
        self._projections = pg_projections(projections, encoder)
        self.connection: Connection = connect(url, autocommit=True)
        try:
            migrate(self.connection, url)
            # A batch waits this long for another writer of its projections, then is retried.
            self.connection.execute(f"SET lock_timeout = '{LOCK_TIMEOUT_MS}ms'")
            ensure_tracking(self.connection, self._names)
            self._copy_id = copy_id(self.connection)
            if long_lived:
                self._renew_changed()
        except BaseException:
            self.connection.close()
            raise

    @property
    def projections(self) -> Sequence[str]:
        return list(self._names)

    @property
    def location(self) -> str:
        return describe(self.url)

    def copy_id(self) -> str:
        return self._copy_id

    def positions(self) -> dict[str, int]:
        """The last stream sequence each of its projections committed (0: none)."""
        rows = self.connection.execute(
            "SELECT projection, seq FROM tracking WHERE projection = ANY(%s)", (self._names,)
        ).fetchall()
        found = {str(name): int(seq) for name, seq in rows}
        return {name: found.get(name, 0) for name in self._names}

    def steps(
        self,
        records: Sequence[LogRecord],
        stats: ProjectorStats,
        *,
        committed: int | None = None,
        wait: bool = True,
    ) -> Generator[None, None, int]:
        """See :meth:`memstream.projections.ports.ReadModelStore.steps`."""
        try:
            return (
                yield from batch_steps(
                    self.connection,
                    self._projections,
                    records,
                    stats,
                    committed=committed,
                    wait=wait,
                )
            )
        except psycopg.OperationalError as error:
            if self.connection.broken or self.connection.closed:
                self._reconnect()
            raise unavailable(self.url, "lost", error) from None

    def apply(
        self, records: Sequence[LogRecord], stats: ProjectorStats, *, committed: int | None = None
    ) -> int:
        return run_steps(self.steps(records, stats, committed=committed))

    def transaction(self, *, committed: int | None = None, wait: bool = True) -> PgBatchTransaction:
        return PgBatchTransaction(
            self.connection, self._projections, committed=committed, wait=wait
        )

    def drop(self, projection: str) -> None:
        """Empty ``projection`` and reset its position (for a rebuild from the log)."""
        ensure_tracking(self.connection, [projection])
        with self.connection.transaction():
            lock_positions(self.connection, [projection])
            _empty(self.connection, projection)

    def dead_letters(self) -> list[dict[str, object]]:
        cursor = self.connection.execute(
            "SELECT projection, seq, subject, topic, error, attempts, recorded_at "
            "FROM dead_letters ORDER BY projection, seq"
        )
        names = [c.name for c in cursor.description or ()]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def close(self) -> None:
        self.connection.close()

    def _renew_changed(self) -> None:
        """Empty each of its projections whose recorded version is not the code's (the code
        that writes it changed what it writes): it is projected again from the log, alone."""
        rows = self.connection.execute(
            "SELECT projection, version FROM tracking WHERE projection = ANY(%s)", (self._names,)
        ).fetchall()
        for name, version in rows:
            if int(version) != VERSIONS[str(name)]:
                logger.warning(
                    "read model %s: projection %s is at version %s, this code writes %s: "
                    "emptied, to be projected again from the log",
                    describe(self.url),
                    name,
                    version,
                    VERSIONS[str(name)],
                )
                with self.connection.transaction():
                    lock_positions(self.connection, [str(name)])
                    _empty(self.connection, str(name))

    def _reconnect(self) -> None:
        self.connection.close()
        self.connection = connect(self.url, autocommit=True)
        self.connection.execute(f"SET lock_timeout = '{LOCK_TIMEOUT_MS}ms'")
        for projection in self._projections:
            projection.forget()


def _empty(connection: Connection, projection: str) -> None:
    """Inside a transaction holding ``projection``'s tracking row: its tables emptied, its
    position 0 at the code's version, its dead letters gone."""
    for table in PROJECTION_TABLES[projection]:
        connection.execute(f"DELETE FROM {table}")  # names from the table above, never input
    connection.execute(
        "UPDATE tracking SET seq = 0, version = %s WHERE projection = %s",
        (VERSIONS[projection], projection),
    )
    connection.execute("DELETE FROM dead_letters WHERE projection = %s", (projection,))
