"""Reads of the session registry on PostgreSQL: one registered session, or a page of them."""

from __future__ import annotations

from typing import Any

from memstream.projections.postgres.reads import Executes
from memstream.projections.registry_rows import COLUMNS, session_info

Connection = Executes


class PgRegistryQueries:
    """Registered sessions, most recently active first (by the log position of their last
    event: never by a clock)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def session(self, namespace: str, session_id: str) -> dict[str, Any] | None:
        row = self.connection.execute(
            f"SELECT {COLUMNS} FROM session_registry WHERE namespace = %s AND session_id = %s",
            (namespace, session_id),
        ).fetchone()
        return None if row is None else session_info(row)

    def page(
        self, namespace: str, limit: int, before: int | None = None
    ) -> tuple[list[dict[str, Any]], int | None]:
        """Up to ``limit`` sessions last active before log position ``before`` (``None``: from
        the most recent), and the position to continue from (``None``: no more)."""
        rows = self.connection.execute(
            f"SELECT {COLUMNS} FROM session_registry WHERE namespace = %s AND updated_seq < %s "
            "ORDER BY updated_seq DESC LIMIT %s",
            (namespace, 2**63 - 1 if before is None else before, limit + 1),
        ).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        return [session_info(row) for row in rows], (int(rows[-1][11]) if more and rows else None)

    def count(self, namespace: str) -> int:
        row = self.connection.execute(
            "SELECT count(*) FROM session_registry WHERE namespace = %s", (namespace,)
        ).fetchone()
        return 0 if row is None else int(row[0])
