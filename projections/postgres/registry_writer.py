"""Applies session-registry writes to PostgreSQL (one row per registered session)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg

from memstream.projections.registry_projector import (
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


def touch_sessions(
    connection: Connection, touches: list[tuple[str, str, str, int]]
) -> set[tuple[str, str]]:
    """Record the last activity ``(namespace, session id, time, seq)`` of registered sessions
    (no row: not registered, nothing to do); the sessions that had a row."""
    rows = connection.execute(
        "UPDATE session_registry AS r SET updated_at = t.at, updated_seq = t.seq "
        "FROM unnest(%s::text[], %s::text[], %s::text[], %s::bigint[]) AS t (ns, id, at, seq) "
        "WHERE r.namespace = t.ns AND r.session_id = t.id RETURNING r.namespace, r.session_id",
        (
            [t[0] for t in touches],
            [t[1] for t in touches],
            [t[2] for t in touches],
            [t[3] for t in touches],
        ),
        prepare=False,  # a join with an array of rows
    ).fetchall()
    return {(str(ns), str(session_id)) for ns, session_id in rows}
