"""Built-in blocks and search blocks restored from the SQLite context read model: the snapshot
a writer decides a context command on, instead of replaying the block's subject (the rules:
:mod:`memstream.projections.sql.snapshots`)."""

from __future__ import annotations

import sqlite3

from memstream.projections.sql.dialect import SQLITE
from memstream.projections.sql.snapshots import SqlDocumentSnapshots, SqlSearchSnapshots
from memstream.projections.sqlite.read_connection import ReadConnection
from memstream.projections.sqlite.session_snapshots import read_connection


class SqliteDocumentSnapshots(SqlDocumentSnapshots):
    """Snapshots of a namespace's built-in blocks (keyed by ``document_id``)."""

    def __init__(self, connection: sqlite3.Connection | ReadConnection, namespace: str) -> None:
        reads = read_connection(connection)
        super().__init__(reads, namespace, SQLITE)
        self.connection = reads


class SqliteSearchSnapshots(SqlSearchSnapshots):
    """Snapshots of a namespace's search blocks (keyed by the block's key)."""

    def __init__(self, connection: sqlite3.Connection | ReadConnection, namespace: str) -> None:
        reads = read_connection(connection)
        super().__init__(reads, namespace, SQLITE)
        self.connection = reads
