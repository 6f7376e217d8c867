"""Sessions restored from the SQLite read model: the snapshot a writer decides commands on (the
rules: :mod:`memstream.projections.sql.snapshots`), read through the client's
:class:`~memstream.projections.sqlite.read_connection.ReadConnection`."""

from __future__ import annotations

import sqlite3

from memstream.projections.sql.dialect import SQLITE
from memstream.projections.sql.snapshots import SqlSessionSnapshots
from memstream.projections.sqlite.read_connection import ReadConnection


def read_connection(connection: sqlite3.Connection | ReadConnection) -> ReadConnection:
    """``connection`` as a :class:`ReadConnection` (a plain one: its own)."""
    return connection if isinstance(connection, ReadConnection) else ReadConnection(connection)


class SqliteSessionSnapshots(SqlSessionSnapshots):
    """Snapshots of a namespace's sessions from the sessions read model."""

    def __init__(self, connection: sqlite3.Connection | ReadConnection, namespace: str) -> None:
        reads = read_connection(connection)
        super().__init__(reads, namespace, SQLITE)
        self.connection = reads
