"""The connection a PostgreSQL reader's queries go through.

Each statement runs on its own (autocommit) unless a reading is open: a repeatable-read,
read-only transaction, so that a snapshot and the lookups made while deciding on it see one
moment of the read model. A lost connection is
:class:`~memstream.domain.errors.UnavailableError` naming the database (password masked), and
the next statement connects again.
"""

from __future__ import annotations

from typing import Any, Protocol

import psycopg

from memstream.projections.postgres.connection import connect, unavailable

Cursor = psycopg.Cursor[tuple[Any, ...]]


class Executes(Protocol):
    """What the query classes need of a connection."""

    def execute(self, query: Any, params: Any = ..., /) -> Cursor: ...


class PgReads:
    """Statements of one reader on its own connection (see the module's docstring)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._connection: psycopg.Connection[tuple[Any, ...]] | None = None
        self._reading = False
        self.connection  # noqa: B018 - connect now: an unreachable server fails the open

    @property
    def connection(self) -> psycopg.Connection[tuple[Any, ...]]:
        connection = self._connection
        if connection is None or connection.closed or connection.broken:
            if connection is not None:
                connection.close()
            self._reading = False
            connection = self._connection = connect(self.url, autocommit=True)
        return connection

    def execute(self, query: Any, params: Any = None, /) -> Cursor:
        try:
            return self.connection.execute(query, params)
        except psycopg.OperationalError as error:
            if self._reading and self._connection is not None and self._connection.broken:
                self._reading = False
            raise unavailable(self.url, "cannot read", error) from None

    def begin(self) -> bool:
        """Open a reading unless one is open; True if this call opened it."""
        if self._reading:
            return False
        self.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        self._reading = True
        return True

    def commit(self) -> None:
        """End the reading :meth:`begin` opened."""
        if not self._reading:
            return
        self._reading = False
        connection = self._connection
        if connection is not None and not connection.broken and not connection.closed:
            connection.execute("COMMIT")

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class PgReading:
    """A reading on :class:`PgReads` (nothing new when one is open)."""

    __slots__ = ("opened", "reads")

    def __init__(self, reads: PgReads) -> None:
        self.reads = reads
        self.opened = False

    def __enter__(self) -> None:
        self.opened = self.reads.begin()

    def __exit__(self, *exc_info: object) -> None:
        if self.opened:
            self.opened = False
            self.reads.commit()
