"""The PostgreSQL adapter of the read-model ports: one read-model copy in one database.

:class:`PostgresCopy` opens :class:`PostgresReadModels` (a client's reads) and
:class:`~memstream.projections.postgres.store.PostgresReadModelStore` (a projector's or a
rebuild's writes) on the database at a URL; every error names it with its password masked.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from memstream.projections.ports import OnDamage, ReadModelStore, TextEncoder
from memstream.projections.postgres.connection import connect, describe, unavailable
from memstream.projections.postgres.context_queries import PgContextQueries
from memstream.projections.postgres.locks import PostgresProjectorLock
from memstream.projections.postgres.memory_queries import PgMemoryQueries
from memstream.projections.postgres.reads import PgReads
from memstream.projections.postgres.registry_queries import PgRegistryQueries
from memstream.projections.postgres.schema import copy_id, migrate, schema_version, tracked_marks
from memstream.projections.postgres.session_queries import PgSessionQueries
from memstream.projections.postgres.store import (
    REPLACED_CHECK_SECONDS,
    PostgresReadModelStore,
    ScratchStore,
)
from memstream.projections.registry import PROJECTIONS, PROJECTOR_PROJECTIONS
from memstream.projections.sql.analytics import SqlAnalyticsQueries
from memstream.projections.sql.dialect import POSTGRES
from memstream.projections.sql.snapshots import SnapshotSources
from memstream.projections.sql.tracking import dead_letters, tracked_seq, tracking_rows


class PostgresReadModels(SnapshotSources):
    """The read side on one connection of its own: queries, snapshot sources, positions.
    Reads go through the connection of a projector of this process on the same copy while it
    holds its writer's own events in an open transaction (``lender``; see
    :class:`~memstream.projections.postgres.reads.PgReads`)."""

    dialect = POSTGRES
    reads: PgReads

    def __init__(self, url: str, lender: Callable[[], ReadModelStore | None] | None = None) -> None:
        self.url = url
        self._lender = lender
        self.reads = PgReads(url, self._lend if lender is not None else None)
        try:
            migrate(self.reads.connection, url)
            self._copy_id = copy_id(self.reads.connection)
        except BaseException:
            self.reads.close()
            raise
        self._copy_checked = -math.inf  # when replaced() last found the copy in place
        self._identity = ("postgresql", describe(url), self._copy_id)
        self.sessions = PgSessionQueries(self.reads)
        self.context = PgContextQueries(self.reads)
        self.registry = PgRegistryQueries(self.reads)
        self.memory = PgMemoryQueries(self.reads)
        self.analytics = SqlAnalyticsQueries(self.reads, POSTGRES)

    @property
    def identity(self) -> Hashable | None:
        return self._identity

    def _lend(self) -> psycopg.Connection[tuple[Any, ...]] | None:
        """The lender's connection while it is inside a transaction on this copy."""
        store = self._lender() if self._lender is not None else None
        if (
            isinstance(store, PostgresReadModelStore)
            and store.identity == self.identity
            and store.connection.info.transaction_status == TransactionStatus.INTRANS
        ):
            return store.connection
        return None

    def lent(self) -> bool:
        return self.reads.lent()

    def tracked_seq(self, projection: str) -> int:
        return tracked_seq(self.reads, POSTGRES, projection)

    def marks(self) -> list[tuple[str, int, str | None]]:
        """See :meth:`~memstream.projections.ports.ReadModels.marks`."""
        return tracked_marks(self.reads.connection)

    def tracked_partitions(self, projection: str) -> dict[int, int]:
        return tracking_rows(self.reads, POSTGRES, projection)[1]

    def copy_id(self) -> str:
        row = self.reads.execute("SELECT value FROM meta WHERE key = 'copy_id'").fetchone()
        return "" if row is None else str(row[0])

    def dead_letters(self) -> list[dict[str, object]]:
        return dead_letters(self.reads)

    def replaced(self) -> bool:
        """Whether the copy was replaced (a new copy id) since this reader opened it. Not
        while reads are lent (the lender's transaction found this copy when it began), and
        asked again at most every :data:`REPLACED_CHECK_SECONDS`."""
        if self.reads.lent():
            return False
        now = time.monotonic()
        if now - self._copy_checked < REPLACED_CHECK_SECONDS:
            return False
        try:
            replaced = self.copy_id() != self._copy_id
        except psycopg.Error:
            return False
        if not replaced:
            self._copy_checked = now
        return replaced

    def damage_translated(self) -> AbstractContextManager[None]:
        return contextlib.nullcontext()  # PostgreSQL reports no damaged files

    def close(self) -> None:
        self.reads.close()


class PostgresCopy:
    """The read-model copy in the PostgreSQL database at ``url``."""

    def __init__(self, url: str) -> None:
        self.url = url

    @property
    def location(self) -> str:
        return describe(self.url)

    def exists(self) -> bool:
        with connect(self.url) as connection:
            return schema_version(connection, self.url) > 0

    def reader(
        self,
        *,
        on_damage: OnDamage,
        lender: Callable[[], ReadModelStore | None] | None = None,
        check: bool = False,
    ) -> PostgresReadModels:
        return PostgresReadModels(self.url, lender)

    def store(
        self,
        projections: Sequence[str] = PROJECTOR_PROJECTIONS,
        *,
        long_lived: bool = False,
        repair: bool = True,
        encoder: TextEncoder | None = None,
    ) -> PostgresReadModelStore:
        return PostgresReadModelStore(self.url, projections, encoder=encoder, long_lived=long_lived)

    def scratch(
        self,
        projections: Sequence[str] = PROJECTOR_PROJECTIONS,
        *,
        encoder: TextEncoder | None = None,
    ) -> PostgresReadModelStore:
        return ScratchStore(self.url, projections, encoder=encoder)

    def claim(self, projections: Sequence[str] = PROJECTIONS) -> PostgresProjectorLock:
        with connect(self.url) as connection:
            try:
                migrate(connection, self.url)
                copy = copy_id(connection)
            except psycopg.Error as error:
                raise unavailable(self.url, "cannot read", error) from None
        return PostgresProjectorLock.acquire(self.url, copy, projections)

    def repair(self) -> str | None:
        return None  # nothing to check whole: PostgreSQL keeps its own files consistent
