"""Applies session-registry writes to PostgreSQL (one row per registered session)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg

from memstream.projections.registry_writes import (
    ChangeSession,
    ForgetSession,
    RegisterSession,
    RegistryWrite,
    TouchSession,
)

Connection = psycopg.Connection[tuple[Any, ...]]


def apply_registry_writes(connection: Connection, writes: Iterable[RegistryWrite]) -> None:
    """Apply writes inside the caller's transaction."""
    for write in writes:
        if isinstance(write, ChangeSession):
            usage = write.usage or (0, 0, 0.0)
            connection.execute(
                "UPDATE session_registry SET name = coalesce(%s, name), "
                "end_reason = coalesce(%s, end_reason), input_tokens = input_tokens + %s, "
                "output_tokens = output_tokens + %s, cost = cost + %s, updated_at = %s, "
                "updated_seq = %s, record_seq = %s, record_version = %s "
                "WHERE namespace = %s AND session_id = %s",
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
                "record_seq, record_version) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
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
                "DELETE FROM session_registry WHERE namespace = %s AND session_id = %s",
                (write.namespace, write.session_id),
            )


def touch_sessions(connection: Connection, touches: list[tuple[str, str, str, int]]) -> None:
    """Record the last activity ``(namespace, session id, time, seq)`` of registered sessions
    (no row: not registered, nothing to do)."""
    with connection.cursor() as cursor:
        cursor.executemany(
            "UPDATE session_registry SET updated_at = %(at)s, updated_seq = %(seq)s "
            "WHERE namespace = %(ns)s AND session_id = %(id)s",
            [{"ns": ns, "id": sid, "at": at, "seq": seq} for ns, sid, at, seq in touches],
        )
