"""Reads of the session registry on SQLite: one registered session, or a page of them, and
snapshots of its records (the shared :mod:`memstream.projections.sql.registry`)."""

from __future__ import annotations

from memstream.projections.sql.dialect import SQLITE
from memstream.projections.sql.registry import SqlRecordSnapshots, SqlRegistryQueries
from memstream.projections.sqlite.read_connection import ReadConnection, Reading, Reads


class SqliteRegistryQueries(SqlRegistryQueries):
    """Registered sessions, most recently active first."""

    def __init__(self, connection: Reads) -> None:
        super().__init__(connection, SQLITE)


class SqliteRecordSnapshots(SqlRecordSnapshots):
    """Snapshots of a namespace's registry records (keyed by session id)."""

    def __init__(self, connection: ReadConnection, namespace: str) -> None:
        super().__init__(connection, namespace, SQLITE, lambda: Reading(connection))
