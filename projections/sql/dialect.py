"""What differs, in the SQL memstream writes, between SQLite and PostgreSQL.

Shared statements are written with ``?`` parameters and text compared in byte order (SQLite's
default); :meth:`Dialect.sql` gives a statement in an engine's own form, once per statement.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class Rows(Protocol):
    """A cursor's results, as sqlite3 and psycopg both give them."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Executes(Protocol):
    """What shared queries and writes need of a connection (sqlite3's, psycopg's, a reader's)."""

    def execute(self, query: Any, params: Any = ..., /) -> Any: ...


@dataclass(frozen=True, slots=True)
class Dialect:
    """An engine's SQL: its parameter marker, how text sorts in byte order, and how a read
    locks the row it reads until the transaction ends."""

    name: str
    parameter: str
    byte_order: str  # appended to an ORDER BY term of text
    lock_row: str  # appended to a SELECT (SQLite's write transaction holds the whole file)
    find: str  # the function giving where a text is found in another (1-based; 0: nowhere)

    def sql(self, statement: str) -> str:
        """``statement`` (written with ``?`` parameters) in this dialect."""
        return _converted(self.parameter, statement)

    def any_of(self, column: str, values: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
        """A condition that ``column`` is one of ``values`` (written with ``?``, as the
        statement it goes into), and its parameters."""
        if self.parameter == "?":
            return f"{column} IN ({','.join('?' * len(values))})", tuple(values)
        return f"{column} = ANY(?)", (list(values),)


@functools.lru_cache(maxsize=512)
def _converted(parameter: str, statement: str) -> str:
    if parameter == "?":
        return statement
    # psycopg reads % as the start of a parameter: a literal one is written twice.
    return statement.replace("%", "%%").replace("?", parameter)


SQLITE = Dialect("sqlite", "?", "", "", "instr")
POSTGRES = Dialect("postgresql", "%s", ' COLLATE "C"', " FOR UPDATE", "strpos")
