"""Reads of the session registry on PostgreSQL: one registered session, or a page of them
(the shared :class:`~memstream.projections.sql.registry.SqlRegistryQueries`)."""

from __future__ import annotations

from memstream.projections.postgres.reads import Executes
from memstream.projections.sql.dialect import POSTGRES
from memstream.projections.sql.registry import SqlRegistryQueries


class PgRegistryQueries(SqlRegistryQueries):
    """Registered sessions, most recently active first."""

    def __init__(self, connection: Executes) -> None:
        super().__init__(connection, POSTGRES)
