"""Applies session-registry writes to SQLite (one row per registered session): the shared
statements (:mod:`memstream.projections.sql.registry`) and SQLite's bulk touch."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from memstream.projections.registry_projector import RegistryWrite
from memstream.projections.sql import registry
from memstream.projections.sql.dialect import SQLITE


def apply_registry_writes(connection: sqlite3.Connection, writes: Iterable[RegistryWrite]) -> None:
    """Apply writes inside the caller's transaction."""
    registry.apply_registry_writes(connection, SQLITE, writes, touch_sessions)


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
