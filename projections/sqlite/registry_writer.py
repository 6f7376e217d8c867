"""Applies session-registry writes to SQLite (one row per registered session)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from memstream.projections.registry_projector import (
    ChangeSession,
    ForgetSession,
    RegisterSession,
    RegistryWrite,
    TouchSession,
)


def apply_registry_writes(connection: sqlite3.Connection, writes: Iterable[RegistryWrite]) -> None:
    """Apply writes inside the caller's transaction."""
    for write in writes:
        if isinstance(write, ChangeSession):
            usage = write.usage or (0, 0, 0.0)
            connection.execute(
                "UPDATE session_registry SET name = coalesce(?, name), "
                "end_reason = coalesce(?, end_reason), input_tokens = input_tokens + ?, "
                "output_tokens = output_tokens + ?, cost = cost + ?, updated_at = ?, "
                "updated_seq = ?, record_seq = ?, record_version = ? "
                "WHERE namespace = ? AND session_id = ?",
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
                "INSERT INTO session_registry (namespace, session_id, name, model, source, "
                "parent_session_id, forked_from_message_id, created_at, updated_at, updated_seq, "
                "record_seq, record_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
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
            touch_sessions(
                connection, [(write.namespace, write.session_id, write.at.isoformat(), write.seq)]
            )
        elif isinstance(write, ForgetSession):
            connection.execute(
                "DELETE FROM session_registry WHERE namespace = ? AND session_id = ?",
                (write.namespace, write.session_id),
            )


def touch_sessions(
    connection: sqlite3.Connection, touches: list[tuple[str, str, str, int]]
) -> None:
    """Record the last activity ``(namespace, session id, time, seq)`` of registered sessions
    (no row: not registered, nothing to do)."""
    connection.executemany(
        "UPDATE session_registry SET updated_at = ?3, updated_seq = ?4 "
        "WHERE namespace = ?1 AND session_id = ?2",
        touches,
    )
