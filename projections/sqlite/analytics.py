"""The analytics read model on SQLite: a batch's counters and sessions written at once, and
the daily volumes read back."""

from __future__ import annotations

import json
import sqlite3

from memstream.projections.analytics_projector import CountRow, Purge, SessionRow, UnitRow
from memstream.projections.sql.analytics import COUNT_CONFLICT, SESSION_CONFLICT, UNIT_CONFLICT

# A count for a session is for its model and source as the sessions table holds them (written
# after the counts of the same batch: the table is still as it was when the batch began).
_COUNT = (
    "INSERT INTO analytics_daily (namespace, day, model, source, metric, session_id, profile, "
    "value) SELECT ?1, ?2, coalesce(?4, s.model, ''), coalesce(?5, s.source, ''), ?3, ?6, ?7, ?8 "
    "FROM (SELECT 1) LEFT JOIN analytics_sessions AS s "
    "ON s.namespace = ?1 AND s.session_id = ?6 WHERE true " + COUNT_CONFLICT
)
_UNIT = (
    "INSERT INTO analytics_units (namespace, kind, id, last_seq) VALUES (?, ?, ?, ?) "
    + UNIT_CONFLICT
)
_SESSION = (
    "INSERT INTO analytics_sessions (namespace, session_id, first_day, model, source, "
    "registered) VALUES (?, ?, ?, ?, ?, ?) " + SESSION_CONFLICT
)


def write_analytics(
    connection: sqlite3.Connection,
    counts: list[CountRow],
    sessions: list[SessionRow],
    units: list[UnitRow],
) -> None:
    """Write a batch's rows inside the caller's transaction: counts first, then sessions."""
    if counts:
        connection.executemany(_COUNT, counts)
    if sessions:
        connection.executemany(_SESSION, sessions)
    if units:
        connection.executemany(_UNIT, units)


def purge_analytics(connection: sqlite3.Connection, purge: Purge) -> None:
    """Remove the counters of the sessions and profiles whose deletions were purged, and count
    the counters other origins made for a purged session as outside any registered session."""
    units = connection.execute(
        "DELETE FROM analytics_units WHERE namespace = ? "
        "AND last_seq IN (SELECT value FROM json_each(?)) RETURNING kind, id",
        (purge.namespace, json.dumps(list(purge.sequences))),
    ).fetchall()
    namespace = purge.namespace
    for kind, identifier in units:
        if kind == "profile":
            connection.execute(
                "DELETE FROM analytics_daily WHERE namespace = ? AND profile = ?",
                (namespace, identifier),
            )
            continue
        connection.execute(
            "DELETE FROM analytics_daily WHERE namespace = ? AND session_id = ? AND profile = ''",
            (namespace, identifier),
        )
        connection.execute(
            "INSERT INTO analytics_daily (namespace, day, model, source, metric, session_id, "
            "profile, value) SELECT namespace, day, '', '', metric, session_id, profile, value "
            "FROM analytics_daily WHERE namespace = ?1 AND session_id = ?2 "
            "AND (model <> '' OR source <> '') AND true "
            "ON CONFLICT (namespace, day, model, source, metric, session_id, profile) "
            "DO UPDATE SET value = analytics_daily.value + excluded.value",
            (namespace, identifier),
        )
        connection.execute(
            "DELETE FROM analytics_daily WHERE namespace = ? AND session_id = ? "
            "AND (model <> '' OR source <> '')",
            (namespace, identifier),
        )
        connection.execute(
            "DELETE FROM analytics_sessions WHERE namespace = ? AND session_id = ?",
            (namespace, identifier),
        )
