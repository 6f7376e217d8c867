"""The connection a client's reads go through: its own, or one lent by the projector next to it.

SQLite drops a connection's whole page cache when another connection has written to the file since
its last read. A client whose projector runs in the same process reads right after each commit of
that projector, so every read on the client's own connection starts cold and reads its pages again,
where the connection that wrote them has them cached (bench/RESULTS.md,
'Figures moved from code comments'). Between its transactions the projector's connection is idle and
its cache is warm: :class:`ReadConnection` reads through it then, and through the client's own
connection otherwise (no projector here, a batch open, the projector's file not the one read here).

Reads are synchronous and run on the event loop's thread, like the projector's steps, so a
lent connection cannot start a batch in the middle of a read; a read transaction
(:meth:`ReadConnection.begin` .. :meth:`ReadConnection.commit`) stays on the connection it
began on.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, Protocol

from memstream.projections.snapshots import LookupWindow
from memstream.projections.sql.reading import Reading

__all__ = ["LookupWindow", "ReadConnection", "Reading", "Reads"]

Lender = Callable[[], sqlite3.Connection | None]


class ReadConnection:
    """``execute`` on the lent connection when there is one, else on ``own``."""

    __slots__ = ("_ends", "_lend", "_pinned", "own")

    def __init__(self, own: sqlite3.Connection, lend: Lender | None = None) -> None:
        self.own = own
        self._lend = lend
        self._pinned: sqlite3.Connection | None = None
        self._ends = False  # whether commit() ends a transaction begin() opened

    def current(self) -> sqlite3.Connection:
        """The connection the next statement runs on."""
        if self._pinned is not None:
            return self._pinned
        lend = self._lend
        if lend is not None and not self.own.in_transaction:
            lent = lend()
            if lent is not None:
                return lent
        return self.own

    def execute(self, sql: str, parameters: Any = ()) -> sqlite3.Cursor:
        return self.current().execute(sql, parameters)

    @property
    def in_transaction(self) -> bool:
        """Whether a read transaction begun here (or on the own connection) is open."""
        return self._pinned is not None or self.own.in_transaction

    def begin(self) -> bool:
        """Open a read transaction unless one is open; True if this call opened it. A lent
        connection inside its projector's write transaction (own events it applied and the
        log acknowledged, not yet committed) reads inside that one."""
        if self.in_transaction:
            return False
        connection = self.current()
        self._ends = not connection.in_transaction
        if self._ends:
            connection.execute("BEGIN")
        self._pinned = connection
        return True

    def commit(self) -> None:
        """End the read transaction :meth:`begin` opened."""
        pinned, self._pinned = self._pinned, None
        if pinned is not None and self._ends:
            pinned.execute("COMMIT")


class Reads(Protocol):
    """What query objects need of a connection: a plain one or a :class:`ReadConnection`."""

    def execute(self, sql: str, parameters: Any = ..., /) -> sqlite3.Cursor: ...

    @property
    def in_transaction(self) -> bool: ...
