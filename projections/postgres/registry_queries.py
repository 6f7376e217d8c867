"""Reads of the session registry on PostgreSQL: one registered session, or a page of them."""

from __future__ import annotations

from typing import Any

from memstream.projections.postgres.reads import Executes

Connection = Executes

_COLUMNS = (
    "session_id, name, parent_session_id, model, source, input_tokens, output_tokens, cost, "
    "end_reason, created_at, updated_at, updated_seq"
)


def _info(row: tuple[Any, ...]) -> dict[str, Any]:
    """A row as a ``SessionInfo`` (the reference's field names, snake_case)."""
    return {
        "id": row[0],
        "name": row[1],
        "parent_session_id": row[2],
        "model": row[3],
        "source": row[4],
        "input_tokens": int(row[5]),
        "output_tokens": int(row[6]),
        "estimated_cost": float(row[7]),
        "end_reason": row[8],
        "created_at": row[9],
        "updated_at": row[10],
    }


class PgRegistryQueries:
    """Registered sessions, most recently active first (by the log position of their last
    event: never by a clock)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def session(self, namespace: str, session_id: str) -> dict[str, Any] | None:
        row = self.connection.execute(
            f"SELECT {_COLUMNS} FROM session_registry WHERE namespace = %s AND session_id = %s",
            (namespace, session_id),
        ).fetchone()
        return None if row is None else _info(row)

    def page(
        self, namespace: str, limit: int, before: int | None = None
    ) -> tuple[list[dict[str, Any]], int | None]:
        """Up to ``limit`` sessions last active before log position ``before`` (``None``: from
        the most recent), and the position to continue from (``None``: no more)."""
        rows = self.connection.execute(
            f"SELECT {_COLUMNS} FROM session_registry WHERE namespace = %s AND updated_seq < %s "
            "ORDER BY updated_seq DESC LIMIT %s",
            (namespace, 2**63 - 1 if before is None else before, limit + 1),
        ).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        return [_info(row) for row in rows], (int(rows[-1][11]) if more and rows else None)

    def count(self, namespace: str) -> int:
        row = self.connection.execute(
            "SELECT count(*) FROM session_registry WHERE namespace = %s", (namespace,)
        ).fetchone()
        return 0 if row is None else int(row[0])
