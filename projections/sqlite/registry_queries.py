"""Reads of the session registry on SQLite: one registered session, or a page of them."""

from __future__ import annotations

from typing import Any

from memstream.projections.registry_rows import COLUMNS, record_state, session_info
from memstream.projections.snapshots import RecordSnapshot
from memstream.projections.sqlite.read_connection import ReadConnection, Reading, Reads


class SqliteRegistryQueries:
    """Registered sessions, most recently active first (by the log position of their last
    event: never by a clock)."""

    def __init__(self, connection: Reads) -> None:
        self.connection = connection

    def session(self, namespace: str, session_id: str) -> dict[str, Any] | None:
        row = self.connection.execute(
            f"SELECT {COLUMNS} FROM session_registry WHERE namespace = ? AND session_id = ?",
            (namespace, session_id),
        ).fetchone()
        return None if row is None else session_info(row)

    def page(
        self, namespace: str, limit: int, before: int | None = None
    ) -> tuple[list[dict[str, Any]], int | None]:
        """Up to ``limit`` sessions last active before log position ``before`` (``None``: from
        the most recent), and the position to continue from (``None``: no more)."""
        rows = self.connection.execute(
            f"SELECT {COLUMNS} FROM session_registry WHERE namespace = ? AND updated_seq < ? "
            "ORDER BY updated_seq DESC LIMIT ?",
            (namespace, 2**63 - 1 if before is None else before, limit + 1),
        ).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        return [session_info(row) for row in rows], (int(rows[-1][11]) if more and rows else None)

    def count(self, namespace: str) -> int:
        row = self.connection.execute(
            "SELECT count(*) FROM session_registry WHERE namespace = ?", (namespace,)
        ).fetchone()
        return int(row[0])


class SqliteRecordSnapshots:
    """Snapshots of a namespace's registry records (keyed by session id)."""

    def __init__(self, connection: ReadConnection, namespace: str) -> None:
        self.connection = connection
        self.namespace = namespace

    def reading(self) -> Reading:
        return Reading(self.connection)

    def guard(self, low: int, high: int) -> None:
        pass  # records make no lookups after they are restored

    def snapshot(self, session_id: str) -> RecordSnapshot:
        row = self.connection.execute(
            "SELECT record_seq, record_version, name, model, source, parent_session_id, "
            "input_tokens, output_tokens, cost, end_reason FROM session_registry "
            "WHERE namespace = ? AND session_id = ?",
            (self.namespace, session_id),
        ).fetchone()
        if row is None:
            return RecordSnapshot(self.namespace, session_id, 0, 0, {})
        state = record_state(row[2:])
        return RecordSnapshot(self.namespace, session_id, int(row[0]), int(row[1]), state)
