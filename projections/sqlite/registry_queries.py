"""Reads of the session registry on SQLite: one registered session, or a page of them (the
shared :mod:`memstream.projections.sql.registry`)."""

from __future__ import annotations

from memstream.projections.sql.dialect import SQLITE
from memstream.projections.sql.registry import SqlRegistryQueries
from memstream.projections.sqlite.read_connection import Reads


class SqliteRegistryQueries(SqlRegistryQueries):
    """Registered sessions, most recently active first."""

    def __init__(self, connection: Reads) -> None:
        super().__init__(connection, SQLITE)
