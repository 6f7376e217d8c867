"""The connection a PostgreSQL reader's queries go through.

Each statement runs on its own (autocommit) unless a reading is open: a repeatable-read,
read-only transaction, so that a snapshot and the lookups made while deciding on it see one
moment of the read model.

A projector in the same process lends its connection while it holds its writer's own events
in an open transaction (acknowledged by the log, committed within a few milliseconds, see
:meth:`~memstream.workers.projector.ProjectorWorker.hold_own`): statements then run inside that
transaction, which has them, instead of making the projector commit first. Reads are
synchronous on the event loop's thread, like the projector's steps, so no batch starts in the
middle of one; a reading begun on the lent connection stays on it. A lost connection is
:class:`~memstream.domain.errors.UnavailableError` naming the database (password masked), and
the next statement connects again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import psycopg

from memstream.projections.postgres.connection import connect, unavailable

Cursor = psycopg.Cursor[tuple[Any, ...]]
Connection = psycopg.Connection[tuple[Any, ...]]
# The connection of a projector of this process, inside a transaction that holds its own
# events, or ``None``.
Lender = Callable[[], Connection | None]


class Executes(Protocol):
    """What the query classes need of a connection."""

    def execute(self, query: Any, params: Any = ..., /) -> Cursor: ...


class PgReads:
    """Statements of one reader on its own connection (see the module's docstring)."""

    def __init__(self, url: str, lend: Lender | None = None) -> None:
        self.url = url
        self._connection: Connection | None = None
        self._lend = lend
        self._reading = False
        self._pinned: Connection | None = None  # a reading on a lent connection
        self.connection  # noqa: B018 - connect now: an unreachable server fails the open

    @property
    def connection(self) -> Connection:
        """The reader's own connection (connected again if it was lost)."""
        connection = self._connection
        if connection is None or connection.closed or connection.broken:
            if connection is not None:
                connection.close()
            self._reading = False
            connection = self._connection = connect(self.url, autocommit=True)
        return connection

    def current(self) -> Connection:
        """The connection the next statement runs on."""
        if self._pinned is not None:
            return self._pinned
        if not self._reading and self._lend is not None:
            lent = self._lend()
            if lent is not None:
                return lent
        return self.connection

    def lent(self) -> bool:
        """Whether the next statement runs on a lent connection."""
        return self.current() is not self._connection

    def execute(self, query: Any, params: Any = None, /) -> Cursor:
        try:
            # Reads walk and join: planned for the tables as they are (see connect()).
            return self.current().execute(query, params, prepare=False)
        except psycopg.OperationalError as error:
            if self._reading and self._connection is not None and self._connection.broken:
                self._reading = False
            raise unavailable(self.url, "cannot read", error) from None

    def begin(self) -> bool:
        """Open a reading unless one is open; True if this call opened it."""
        if self._reading:
            return False
        lent = self._lend() if self._lend is not None else None
        if lent is not None:
            self._pinned = lent  # inside the projector's transaction: one moment already
        else:
            self.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        self._reading = True
        return True

    def commit(self) -> None:
        """End the reading :meth:`begin` opened."""
        if not self._reading:
            return
        self._reading = False
        if self._pinned is not None:
            self._pinned = None  # the projector's transaction is the projector's to end
            return
        connection = self._connection
        if connection is not None and not connection.broken and not connection.closed:
            connection.execute("COMMIT")

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
