"""The SQLite adapter of the read-model ports: one read-model copy in one SQLite file.

:class:`SqliteCopy` opens :class:`SqliteReadModels` (a client's reads) and
:class:`SqliteReadModelStore` (a projector's or a rebuild's writes) on the file; SQLite's errors
that say the file is damaged leave them as
:class:`~memstream.domain.errors.ReadModelDamagedError`.
"""

from __future__ import annotations

import logging
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Generator, Hashable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from memstream.domain.errors import ReadModelDamagedError
from memstream.projections.ports import (
    Difference,
    LogRecord,
    OnDamage,
    ProjectorStats,
    ReadModelStore,
    TextEncoder,
    run_steps,
)
from memstream.projections.registry import PARTITIONABLE, PROJECTIONS, PROJECTOR_PROJECTIONS
from memstream.projections.sql.analytics import SqlAnalyticsQueries
from memstream.projections.sql.dialect import SQLITE
from memstream.projections.sql.snapshots import SnapshotSources
from memstream.projections.sqlite.batches import (
    BatchMemo,
    BatchTransaction,
    Projection,
    batch_steps,
    default_projections,
)
from memstream.projections.sqlite.checkpointer import Checkpointer, defer_checkpoints
from memstream.projections.sqlite.checksum import checksum, first_difference
from memstream.projections.sqlite.context_queries import SqliteContextQueries
from memstream.projections.sqlite.copy import ProjectorLock, copy_id
from memstream.projections.sqlite.damage import damage_translated
from memstream.projections.sqlite.database import (
    ReadModelConnection,
    dead_letters,
    drop_projection,
    file_replaced,
    forget_dead_letters,
    open_database,
    renew_changed_projections,
    renew_vectors_of_other_models,
    replace_damaged,
    track_partitions,
    tracked_marks,
    tracked_partitions,
    tracked_seq,
    tracked_seqs,
)
from memstream.projections.sqlite.memory_queries import SqliteMemoryQueries
from memstream.projections.sqlite.read_connection import ReadConnection
from memstream.projections.sqlite.read_guard import guarded
from memstream.projections.sqlite.registry_queries import (
    SqliteRegistryQueries,
)
from memstream.projections.sqlite.session_queries import SqliteSessionQueries
from memstream.projections.tracking import TrackingRows

logger = logging.getLogger(__name__)


def _identity(connection: sqlite3.Connection) -> Hashable | None:
    return connection.identity if isinstance(connection, ReadModelConnection) else None


class SqliteReadModelStore:
    """The write side on one connection: the projections' batches, their tracking rows and
    dead letters. ``long_lived`` (a projector's store): the file's WAL checkpoints run in a
    thread of their own (see :mod:`~memstream.projections.sqlite.checkpointer`)."""

    def __init__(
        self,
        connection: sqlite3.Connection,
        projections: Sequence[Projection] | None = None,
        *,
        long_lived: bool = True,
        scratch: tempfile.TemporaryDirectory[str] | None = None,
    ) -> None:
        self.connection = connection
        self.sqlite_projections = list(projections or default_projections())
        self._names = tuple(p.name for p in self.sqlite_projections)
        self._rows = TrackingRows()
        self._long_lived = long_lived
        self._memo = BatchMemo()
        self._checkpointer = self._checkpoints() if long_lived else None
        self._scratch = scratch  # a temporary directory it lives in, removed at close

    def _checkpoints(self) -> Checkpointer | None:
        """Checkpoints in a thread of their own (none for a connection that
        :func:`open_database` did not make)."""
        connection = self.connection
        if not isinstance(connection, ReadModelConnection):
            return None
        defer_checkpoints(connection)
        checkpointer = Checkpointer(connection.path)
        checkpointer.start()
        return checkpointer

    @property
    def projections(self) -> Sequence[str]:
        return self._names

    @property
    def identity(self) -> Hashable | None:
        return _identity(self.connection)

    @property
    def renewable(self) -> bool:
        return isinstance(self.connection, ReadModelConnection)

    @property
    def fresh(self) -> bool:
        """Whether opening it moved a damaged file aside (this one is new and empty)."""
        connection = self.connection
        return isinstance(connection, ReadModelConnection) and connection.replaced is not None

    def copy_id(self) -> str:
        with damage_translated():
            return copy_id(self.connection)

    @property
    def rows(self) -> TrackingRows:
        return self._rows

    def track(self, rows: TrackingRows) -> None:
        if rows.count:
            with damage_translated():
                track_partitions(
                    self.connection, [n for n in self._names if n in PARTITIONABLE], rows.count
                )
        self._memo.positions = None
        self._rows = rows

    def marks(self) -> list[tuple[str, int, str | None]]:
        with damage_translated():
            return tracked_marks(self.connection)

    def positions(self) -> dict[str, int]:
        with damage_translated():
            return tracked_seqs(
                self.connection, [row for name in self._names for row in self._rows.names(name)]
            )

    def steps(
        self,
        records: Sequence[LogRecord],
        stats: ProjectorStats,
        *,
        committed: int | None = None,
        wait: bool = True,
    ) -> Generator[None, None, int]:
        return batch_steps(
            self.connection,
            self.sqlite_projections,
            records,
            stats,
            committed=committed,
            memo=self._memo,
            checkpointer=self._checkpointer,
            wait=wait,
            rows=self._rows,
        )

    def apply(
        self, records: Sequence[LogRecord], stats: ProjectorStats, *, committed: int | None = None
    ) -> int:
        return run_steps(self.steps(records, stats, committed=committed))

    def transaction(self, *, committed: int | None = None, wait: bool = True) -> BatchTransaction:
        return BatchTransaction(
            self.connection,
            self.sqlite_projections,
            committed=committed,
            memo=self._memo,
            checkpointer=self._checkpointer,
            wait=wait,
            rows=self._rows,
        )

    def replaced(self) -> bool:
        return file_replaced(self.connection)  # one stat

    def renew(self, damage: str | None) -> None:
        connection = self.connection
        if not isinstance(connection, ReadModelConnection):
            return
        path = connection.path
        connection.close()
        if damage is not None:
            self.connection = replace_damaged(path, damage, connection.identity)
        else:
            self.connection = open_database(path, repair=True)
        if self._checkpointer is not None:
            self._checkpointer.stop()
        self._checkpointer = self._checkpoints() if self._long_lived else None
        self.track(self._rows)  # the new file's partition rows

    def drop(self, projection: str) -> None:
        self._memo.positions = None  # the positions it remembers are gone
        with damage_translated():
            drop_projection(self.connection, projection)

    def dead_letters(self) -> list[dict[str, object]]:
        with damage_translated():
            return dead_letters(self.connection)

    def forget_dead_letters(self, letters: Sequence[tuple[str, int]]) -> int:
        with damage_translated():
            return forget_dead_letters(self.connection, letters)

    def checksum(self, projection: str) -> str:
        with damage_translated():
            return checksum(self.connection, projection)

    def first_difference(self, other: ReadModelStore, projection: str) -> Difference | None:
        if not isinstance(other, SqliteReadModelStore):
            raise TypeError(f"cannot compare a SQLite read model with {type(other).__name__}")
        with damage_translated():
            return first_difference(self.connection, other.connection, projection)

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
        self.connection.close()
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None


class SqliteReadModels(SnapshotSources):
    """The read side on one connection: queries (damage handed to ``on_damage``), snapshot
    sources, positions. Reads go through the connection of a projector of this process while
    it is idle on the same file (``lender``; see
    :class:`~memstream.projections.sqlite.read_connection.ReadConnection`)."""

    dialect = SQLITE
    reads: ReadConnection

    def __init__(
        self,
        connection: sqlite3.Connection,
        on_damage: OnDamage,
        lender: Callable[[], ReadModelStore | None] | None = None,
    ) -> None:
        self.connection = connection
        self._lender = lender
        self.reads = reads = ReadConnection(connection, self._lend if lender else None)
        self.sessions = guarded(SqliteSessionQueries(reads), on_damage)
        self.context = guarded(SqliteContextQueries(reads), on_damage)
        self.registry = guarded(SqliteRegistryQueries(reads), on_damage)
        self.memory = guarded(SqliteMemoryQueries(reads), on_damage)
        self.analytics = guarded(SqlAnalyticsQueries(reads, SQLITE), on_damage)

    def _lend(self) -> sqlite3.Connection | None:
        """The lender's connection, when it has one idle on the file read here."""
        lender = self._lender
        store = lender() if lender is not None else None
        if not isinstance(store, SqliteReadModelStore):
            return None
        lent, own = store.connection, self.connection
        if (
            isinstance(lent, ReadModelConnection)
            and isinstance(own, ReadModelConnection)
            and lent.identity == own.identity
        ):
            return lent
        return None

    @property
    def identity(self) -> Hashable | None:
        return _identity(self.connection)

    def lent(self) -> bool:
        return self.reads.current() is not self.connection

    def tracked_partitions(self, projection: str) -> dict[int, int]:
        with damage_translated():
            return tracked_partitions(self.reads.current(), projection)

    def marks(self) -> list[tuple[str, int, str | None]]:
        with damage_translated():
            return tracked_marks(self.reads.current())

    def tracked_seq(self, projection: str) -> int:
        with damage_translated():
            return tracked_seq(self.reads.current(), projection)

    def copy_id(self) -> str:
        with damage_translated():
            return copy_id(self.connection)

    def dead_letters(self) -> list[dict[str, object]]:
        with damage_translated():
            return dead_letters(self.connection)

    def replaced(self) -> bool:
        return file_replaced(self.connection)  # one stat

    def damage_translated(self) -> AbstractContextManager[None]:
        return damage_translated()

    def close(self) -> None:
        self.connection.close()


class SqliteCopy:
    """The read-model copy in the SQLite file at ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @property
    def location(self) -> str:
        return str(self.path)

    def exists(self) -> bool:
        return self.path.exists()

    def reader(
        self,
        *,
        on_damage: OnDamage,
        lender: Callable[[], ReadModelStore | None] | None = None,
        check: bool = False,
    ) -> SqliteReadModels:
        connection = open_database(self.path, repair=check, quick_check_limit=-1)
        return SqliteReadModels(connection, on_damage, lender)

    def store(
        self,
        projections: Sequence[str] = PROJECTOR_PROJECTIONS,
        *,
        long_lived: bool = False,
        repair: bool = True,
        encoder: TextEncoder | None = None,
    ) -> SqliteReadModelStore:
        connection = open_database(self.path, repair=repair)
        if long_lived:  # a projector's (it holds their locks): changed versions start over
            try:
                with damage_translated():
                    renew_changed_projections(connection, projections)
                    if "vectors" in projections and encoder is not None:
                        renew_vectors_of_other_models(connection, encoder.model_name)
            except BaseException:
                connection.close()
                raise
        return SqliteReadModelStore(
            connection, default_projections(projections, encoder), long_lived=long_lived
        )

    def scratch(
        self,
        projections: Sequence[str] = PROJECTOR_PROJECTIONS,
        *,
        encoder: TextEncoder | None = None,
    ) -> SqliteReadModelStore:
        directory = tempfile.TemporaryDirectory(prefix="memstream-verify-")
        try:
            connection = open_database(Path(directory.name) / "scratch.db")
        except BaseException:
            directory.cleanup()
            raise
        return SqliteReadModelStore(
            connection,
            default_projections(projections, encoder),
            long_lived=False,
            scratch=directory,
        )

    def claim(self, projections: Sequence[str] = PROJECTIONS) -> ProjectorLock:
        database = self.path
        try:
            connection = open_database(database)
        except ReadModelDamagedError:
            # The locks are the file's, not the copy's: their holder replaces the damaged file.
            return ProjectorLock.acquire(database, "(damaged)", projections)
        try:
            with damage_translated():
                copy = copy_id(connection)
        except ReadModelDamagedError:
            copy = "(damaged)"
        finally:
            connection.close()
        return ProjectorLock.acquire(database, copy, projections)

    def repair(self) -> str | None:
        connection = open_database(self.path, repair=True, quick_check_limit=sys.maxsize)
        connection.close()
        return None if connection.replaced is None else str(connection.replaced)
