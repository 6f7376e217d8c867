"""Applies session-registry writes to PostgreSQL (one row per registered session): the shared
statements (:mod:`memstream.projections.sql.registry`) and PostgreSQL's bulk touch."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg

from memstream.projections.registry_projector import RegistryWrite
from memstream.projections.sql import registry
from memstream.projections.sql.dialect import POSTGRES

Connection = psycopg.Connection[tuple[Any, ...]]


def apply_registry_writes(connection: Connection, writes: Iterable[RegistryWrite]) -> None:
    """Apply writes inside the caller's transaction."""
    registry.apply_registry_writes(connection, POSTGRES, writes, touch_sessions)


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
