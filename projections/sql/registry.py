"""The session registry's reads and writes on either engine: one row per registered session."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any

from memstream.projections.registry_projector import (
    ChangeSession,
    ForgetSession,
    RegisterSession,
    RegistryWrite,
    TouchSession,
)
from memstream.projections.registry_rows import COLUMNS, record_state, session_info
from memstream.projections.snapshots import RecordSnapshot
from memstream.projections.sql.dialect import Dialect, Executes

Touch = Callable[[Any, list[tuple[str, str, str, int]]], object]


class SqlRegistryQueries:
    """Registered sessions, most recently active first (by the log position of their last
    event: never by a clock)."""

    def __init__(self, connection: Executes, dialect: Dialect) -> None:
        self.connection = connection
        self.dialect = dialect

    def session(self, namespace: str, session_id: str) -> dict[str, Any] | None:
        row = self.connection.execute(
            self.dialect.sql(
                f"SELECT {COLUMNS} FROM session_registry WHERE namespace = ? AND session_id = ?"
            ),
            (namespace, session_id),
        ).fetchone()
        return None if row is None else session_info(row)

    def page(
        self, namespace: str, limit: int, before: int | None = None
    ) -> tuple[list[dict[str, Any]], int | None]:
        """Up to ``limit`` sessions last active before log position ``before`` (``None``: from
        the most recent), and the position to continue from (``None``: no more)."""
        rows = self.connection.execute(
            self.dialect.sql(
                f"SELECT {COLUMNS} FROM session_registry WHERE namespace = ? AND updated_seq < ? "
                "ORDER BY updated_seq DESC LIMIT ?"
            ),
            (namespace, 2**63 - 1 if before is None else before, limit + 1),
        ).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        return [session_info(row) for row in rows], (int(rows[-1][11]) if more and rows else None)

    def count(self, namespace: str) -> int:
        row = self.connection.execute(
            self.dialect.sql("SELECT count(*) FROM session_registry WHERE namespace = ?"),
            (namespace,),
        ).fetchone()
        return 0 if row is None else int(row[0])


class SqlRecordSnapshots:
    """Snapshots of a namespace's registry records (keyed by session id); ``reading`` opens the
    engine's read transaction."""

    def __init__(
        self,
        reads: Executes,
        namespace: str,
        dialect: Dialect,
        reading: Callable[[], AbstractContextManager[Any]],
    ) -> None:
        self.reads = reads
        self.namespace = namespace
        self.dialect = dialect
        self._reading = reading

    def reading(self) -> AbstractContextManager[Any]:
        return self._reading()

    def guard(self, low: int, high: int) -> None:
        pass  # records make no lookups after they are restored

    def snapshot(self, session_id: str) -> RecordSnapshot:
        row = self.reads.execute(
            self.dialect.sql(
                "SELECT record_seq, record_version, name, model, source, parent_session_id, "
                "input_tokens, output_tokens, cost, end_reason FROM session_registry "
                "WHERE namespace = ? AND session_id = ?"
            ),
            (self.namespace, session_id),
        ).fetchone()
        if row is None:
            return RecordSnapshot(self.namespace, session_id, 0, 0, {})
        state = record_state(row[2:])
        return RecordSnapshot(self.namespace, session_id, int(row[0]), int(row[1]), state)


def apply_registry_writes(
    connection: Executes, dialect: Dialect, writes: Iterable[RegistryWrite], touch: Touch
) -> None:
    """Apply writes inside the caller's transaction (``touch``: the engine's bulk form of
    :class:`TouchSession`, ``(connection, [(namespace, session id, time, seq)])``)."""
    for write in writes:
        if isinstance(write, ChangeSession):
            usage = write.usage or (0, 0, 0.0)
            connection.execute(
                dialect.sql(
                    "UPDATE session_registry SET name = coalesce(?, name), "
                    "end_reason = coalesce(?, end_reason), input_tokens = input_tokens + ?, "
                    "output_tokens = output_tokens + ?, cost = cost + ?, updated_at = ?, "
                    "updated_seq = ?, record_seq = ?, record_version = ? "
                    "WHERE namespace = ? AND session_id = ?"
                ),
                (
                    write.name,
                    write.end_reason,
                    *usage,
                    write.at,
                    write.seq,
                    write.seq,
                    write.version,
                    write.namespace,
                    write.session_id,
                ),
            )
        elif isinstance(write, RegisterSession):
            connection.execute(
                dialect.sql(
                    "INSERT INTO session_registry (namespace, session_id, name, model, source, "
                    "parent_session_id, forked_from_message_id, created_at, updated_at, "
                    "updated_seq, record_seq, record_version) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
                ),
                (
                    write.namespace,
                    write.session_id,
                    write.name,
                    write.model,
                    write.source,
                    write.parent_session_id,
                    write.forked_from_message_id,
                    write.at,
                    write.at,
                    write.seq,
                    write.seq,
                    write.version,
                ),
            )
        elif isinstance(write, TouchSession):
            touch(
                connection, [(write.namespace, write.session_id, write.at.isoformat(), write.seq)]
            )
        elif isinstance(write, ForgetSession):
            connection.execute(
                dialect.sql("DELETE FROM session_registry WHERE namespace = ? AND session_id = ?"),
                (write.namespace, write.session_id),
            )
