"""The write side of a PostgreSQL read-model copy: batches of log records applied with their
positions, dead letters, projections dropped for a rebuild or because their version changed."""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Generator, Hashable, Sequence
from typing import Any

import psycopg
from psycopg import conninfo, sql
from psycopg.pq import TransactionStatus

from memstream.domain.errors import UnavailableError
from memstream.projections.ports import (
    Difference,
    LogRecord,
    ProjectorStats,
    ReadModelStore,
    TextEncoder,
    run_steps,
)
from memstream.projections.postgres.batches import (
    BatchMemo,
    BatchTransaction,
    VectorProjection,
    batch_steps,
    default_projections,
    ensure_tracking,
    lock_positions,
)
from memstream.projections.postgres.checksum import checksum, first_difference
from memstream.projections.postgres.connection import SCHEMA, connect, describe, unavailable
from memstream.projections.postgres.schema import copy_id, migrate, tracked_marks
from memstream.projections.postgres.vectors import enable_pgvector
from memstream.projections.registry import PROJECTOR_PROJECTIONS, VERSIONS
from memstream.projections.sql.tables import TABLES
from memstream.projections.sql.tracking import changed_versions, dead_letters
from memstream.projections.tracking import PARTITION_ROW, TrackingRows

logger = logging.getLogger(__name__)

Connection = psycopg.Connection[tuple[Any, ...]]

LOCK_TIMEOUT_MS = 30_000
# A store or reader asks whether its copy was replaced at most this often (a question per
# read or write would cost a round trip each; writes check it in their transaction anyway).
REPLACED_CHECK_SECONDS = 0.5


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
        pgvector: bool = True,
    ) -> None:
        """``long_lived``: a projector's store, which empties a projection of another version
        to project it again (a reader's or a rebuild's store never does). ``pgvector``: store
        vectors for pgvector too where the server has it (see
        :mod:`~memstream.projections.postgres.vectors`)."""
        self.url = url
        self._names = list(projections)
        self._rows = TrackingRows()
        self._memo = BatchMemo()
        self._pgvector = pgvector
        self._location = describe(url)
        self._copy_checked = -math.inf  # when replaced() last found the copy in place
        self._projections = default_projections(projections, encoder)
        self.connection: Connection = connect(url, autocommit=True)
        try:
            migrate(self.connection, url)
            # A batch waits this long for another writer of its projections, then is retried.
            self.connection.execute(f"SET lock_timeout = '{LOCK_TIMEOUT_MS}ms'")
            ensure_tracking(self.connection, self._names)
            self._copy_id = copy_id(self.connection)
            if long_lived:
                self._renew_changed()
                if "vectors" in self._names and encoder is not None:
                    self._renew_vectors_of_other_models(encoder.model_name)
            if "vectors" in self._names and pgvector:
                self._enable_pgvector(renew=long_lived)
        except BaseException:
            self.connection.close()
            raise

    @property
    def projections(self) -> Sequence[str]:
        return list(self._names)

    @property
    def identity(self) -> Hashable | None:
        return ("postgresql", self._location, self._copy_id)

    @property
    def renewable(self) -> bool:
        return True  # renew() moves the schema aside and starts a new one

    @property
    def fresh(self) -> bool:
        return False  # opening never replaces a database (only renew() does)

    def replaced(self) -> bool:
        """Whether another process replaced the copy (a new copy id) since this store opened
        it. Not inside a transaction of its own (each checks the copy when it begins, see
        :func:`~memstream.projections.postgres.batches.lock_positions`: nothing is written to
        another copy), and asked again at most every :data:`REPLACED_CHECK_SECONDS`."""
        if self.connection.info.transaction_status == TransactionStatus.INTRANS:
            return False
        now = time.monotonic()
        if now - self._copy_checked < REPLACED_CHECK_SECONDS:
            return False
        try:
            replaced = copy_id(self.connection) != self._copy_id
        except (psycopg.Error, UnavailableError):
            return False
        if not replaced:
            self._copy_checked = now
        return replaced

    def renew(self, damage: str | None) -> None:
        """With ``damage``: move the memstream schema aside (renamed, kept for inspection) and
        start a new, empty copy, to be rebuilt from the log. Without: open the copy another
        process put in place."""
        if damage is not None:
            aside = f"{SCHEMA}_replaced_{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
            logger.error(
                "read model %s is damaged (%s): schema %s moved aside to %s, rebuilding",
                describe(self.url),
                damage,
                SCHEMA,
                aside,
            )
            with self.connection.transaction():
                self.connection.execute(
                    sql.SQL("ALTER SCHEMA {} RENAME TO {}").format(
                        sql.Identifier(SCHEMA), sql.Identifier(aside)
                    )
                )
        migrate(self.connection, self.url)
        ensure_tracking(self.connection, self._names, self._rows)
        self._copy_id = copy_id(self.connection)
        self._copy_checked = -math.inf
        if "vectors" in self._names and self._pgvector:
            self._enable_pgvector(renew=False)  # a new copy: nothing stored without
        for projection in self._projections:
            projection.forget()

    def checksum(self, projection: str) -> str:
        return checksum(self.connection, projection)

    def first_difference(self, other: ReadModelStore, projection: str) -> Difference | None:
        if not isinstance(other, PostgresReadModelStore):
            raise TypeError(f"cannot compare a PostgreSQL read model with {type(other).__name__}")
        return first_difference(self.connection, other.connection, projection)

    @property
    def location(self) -> str:
        return describe(self.url)

    def copy_id(self) -> str:
        return self._copy_id

    @property
    def rows(self) -> TrackingRows:
        return self._rows

    def track(self, rows: TrackingRows) -> None:
        ensure_tracking(self.connection, self._names, rows)
        self._rows = rows

    def marks(self) -> list[tuple[str, int, str | None]]:
        """See :meth:`~memstream.projections.ports.ReadModelStore.marks`."""
        try:
            return tracked_marks(self.connection)
        except psycopg.OperationalError as error:
            raise self._unavailable(error) from None

    def positions(self) -> dict[str, int]:
        """The last stream sequence each of its tracking rows committed (0: none)."""
        names = [row for name in self._names for row in self._rows.names(name)]
        rows = self.connection.execute(
            "SELECT projection, seq FROM tracking WHERE projection = ANY(%s)", (names,)
        ).fetchall()
        found = {str(name): int(seq) for name, seq in rows}
        return {name: found.get(name, 0) for name in names}

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
                    copy=self._copy_id,
                    rows=self._rows,
                    memo=self._memo,
                )
            )
        except psycopg.OperationalError as error:
            raise self._unavailable(error) from None

    def apply(
        self, records: Sequence[LogRecord], stats: ProjectorStats, *, committed: int | None = None
    ) -> int:
        return run_steps(self.steps(records, stats, committed=committed))

    def transaction(self, *, committed: int | None = None, wait: bool = True) -> BatchTransaction:
        try:
            return BatchTransaction(
                self.connection,
                self._projections,
                committed=committed,
                wait=wait,
                copy=self._copy_id,
                rows=self._rows,
                memo=self._memo,
            )
        except psycopg.OperationalError as error:
            raise self._unavailable(error) from None

    def drop(self, projection: str) -> None:
        """Empty ``projection`` and reset its position (for a rebuild from the log)."""
        ensure_tracking(self.connection, [projection])
        with self.connection.transaction():
            lock_positions(self.connection, [projection])
            _empty(self.connection, projection)

    def dead_letters(self) -> list[dict[str, object]]:
        return dead_letters(self.connection)

    def forget_dead_letters(self, letters: Sequence[tuple[str, int]]) -> int:
        if not letters:
            return 0
        try:
            with self.connection.transaction(), self.connection.cursor() as cursor:
                cursor.execute(
                    "DELETE FROM dead_letters AS d USING unnest(%s::text[], %s::bigint[]) "
                    "AS f (projection, seq) WHERE d.projection = f.projection AND d.seq = f.seq",
                    ([p for p, _ in letters], [s for _, s in letters]),
                )
                return cursor.rowcount
        except psycopg.OperationalError as error:
            raise self._unavailable(error) from None

    def close(self) -> None:
        self.connection.close()

    def _renew_changed(self) -> None:
        """Empty each of its projections whose recorded version is not the code's (the code
        that writes it changed what it writes): it is projected again from the log, alone."""
        rows = self.connection.execute("SELECT projection, version FROM tracking").fetchall()
        for name, version in changed_versions(rows, self._names).items():
            logger.warning(
                "read model %s: projection %s is at version %s, this code writes %s: "
                "emptied, to be projected again from the log",
                describe(self.url),
                name,
                version,
                VERSIONS[name],
            )
            with self.connection.transaction():
                lock_positions(self.connection, [name])
                _empty(self.connection, name)

    def _renew_vectors_of_other_models(self, model: str) -> None:
        """Empty ``vectors`` when it holds vectors of another model than ``model`` (the
        embedding model was changed): it is projected again from the log, never mixed."""
        row = self.connection.execute(
            "SELECT model FROM memory_vectors WHERE model <> %s LIMIT 1", (model,)
        ).fetchone()
        if row is None:
            return
        logger.warning(
            "read model %s: projection vectors holds vectors of model %s, the indexer embeds "
            "with %s; emptied, to be indexed again from the log",
            describe(self.url),
            row[0],
            model,
        )
        with self.connection.transaction():
            lock_positions(self.connection, ["vectors"])
            _empty(self.connection, "vectors")

    def _enable_pgvector(self, *, renew: bool) -> None:
        """Store vectors for pgvector too when the server has it. Vectors stored before
        (without) are made again: a projector's store empties the projection for that."""
        if not enable_pgvector(self.connection, self.url):
            return
        for projection in self._projections:
            if isinstance(projection, VectorProjection):
                projection.embeddings = True
        if not renew:
            return
        row = self.connection.execute(
            "SELECT 1 FROM memory_vectors WHERE embedding IS NULL LIMIT 1"
        ).fetchone()
        if row is None:
            return
        logger.warning(
            "read model %s: pgvector found; projection vectors emptied, to be indexed again "
            "from the log for it",
            describe(self.url),
        )
        with self.connection.transaction():
            lock_positions(self.connection, ["vectors"])
            _empty(self.connection, "vectors")

    def _unavailable(self, error: psycopg.OperationalError) -> Exception:
        """Our error for a failed batch: a lost connection (opened again for the next batch),
        or a server-side failure such as the lock timeout (the connection is kept)."""
        if self.connection.broken or self.connection.closed:
            self._reconnect()
            return unavailable(self.url, "lost", error)
        return unavailable(self.url, "cannot write to", error)

    def _reconnect(self) -> None:
        self.connection.close()
        self.connection = connect(self.url, autocommit=True)
        self.connection.execute(f"SET lock_timeout = '{LOCK_TIMEOUT_MS}ms'")
        for projection in self._projections:
            projection.forget()


def _empty(connection: Connection, projection: str) -> None:
    """Inside a transaction holding ``projection``'s tracking row: its tables emptied, its
    position 0 at the code's version, its dead letters gone."""
    for table in TABLES[projection]:
        connection.execute(f"DELETE FROM {table}")  # names from the table above, never input
    connection.execute(
        "UPDATE tracking SET seq = 0, version = %s, event = NULL WHERE projection = %s "
        "OR starts_with(projection, %s)",
        (VERSIONS[projection], projection, projection + PARTITION_ROW),
    )
    connection.execute("DELETE FROM dead_letters WHERE projection = %s", (projection,))


class ScratchStore(PostgresReadModelStore):
    """A store on a new database of the same server, dropped when closed (what ``verify``
    rebuilds into). Needs the ``CREATEDB`` privilege."""

    def __init__(
        self,
        url: str,
        projections: Sequence[str] = PROJECTOR_PROJECTIONS,
        *,
        encoder: TextEncoder | None = None,
    ) -> None:
        base = conninfo.conninfo_to_dict(url)
        # At most 63 bytes: the base name is cut, never the unique suffix.
        prefix = str(base.get("dbname") or "memstream").encode()[:40].decode("utf-8", "ignore")
        name = f"{prefix}_scratch_{uuid.uuid4().hex[:10]}"
        self.server_url = url
        self.database = name
        with connect(url, autocommit=True) as admin:
            try:
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            except psycopg.Error as error:
                raise unavailable(url, "cannot create a scratch database next to", error) from None
        try:
            super().__init__(conninfo.make_conninfo(url, dbname=name), projections, encoder=encoder)
        except BaseException:
            self._drop()
            raise

    def close(self) -> None:
        super().close()
        self._drop()

    def _drop(self) -> None:
        with connect(self.server_url, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(self.database)
                )
            )
