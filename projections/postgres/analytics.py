"""The analytics read model on PostgreSQL: a batch's counters and sessions written with one
statement each, and the daily volumes read back."""

from __future__ import annotations

from typing import Any

import psycopg

from memstream.projections.analytics_projector import CountRow, Purge, SessionRow, UnitRow
from memstream.projections.sql.analytics import COUNT_CONFLICT, SESSION_CONFLICT, UNIT_CONFLICT

Connection = psycopg.Connection[tuple[Any, ...]]

# A count for a session is for its model and source as the sessions table holds them (written
# after the counts of the same batch: the table is still as it was when the batch began).
# Counts that land on one counter are summed first (one statement may not update a row twice).
_COUNTS = (
    "INSERT INTO analytics_daily (namespace, day, model, source, metric, session_id, profile, "
    "value) "
    "SELECT c.ns, c.day, coalesce(c.model, s.model, ''), coalesce(c.source, s.source, ''), "
    "c.metric, c.sid, c.profile, sum(c.amount) "
    "FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], "
    "%s::text[], %s::bigint[]) AS c (ns, day, metric, model, source, sid, profile, amount) "
    "LEFT JOIN analytics_sessions AS s ON s.namespace = c.ns AND s.session_id = c.sid "
    "GROUP BY 1, 2, 3, 4, 5, 6, 7 " + COUNT_CONFLICT
)
_UNITS = (
    "INSERT INTO analytics_units (namespace, kind, id, last_seq) "
    "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::bigint[]) " + UNIT_CONFLICT
)
_SESSIONS = (
    "INSERT INTO analytics_sessions (namespace, session_id, first_day, model, source, "
    "registered) SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], "
    "%s::text[], %s::int[]) " + SESSION_CONFLICT
)


def write_analytics(
    connection: Connection,
    counts: list[CountRow],
    sessions: list[SessionRow],
    units: list[UnitRow],
) -> None:
    """Write a batch's rows inside the caller's transaction: counts first, then sessions (one
    row per session, as :func:`~memstream.projections.analytics_projector.merged_sightings`
    gives them)."""
    if counts:
        connection.execute(
            _COUNTS, [list(column) for column in zip(*counts, strict=True)], prepare=False
        )
    if sessions:
        connection.execute(
            _SESSIONS, [list(column) for column in zip(*sessions, strict=True)], prepare=False
        )
    if units:
        connection.execute(
            _UNITS, [list(column) for column in zip(*units, strict=True)], prepare=False
        )


def purge_analytics(connection: Connection, purge: Purge) -> None:
    """Remove the counters of the sessions and profiles whose deletions were purged, and count
    the counters other origins made for a purged session as outside any registered session."""
    units = connection.execute(
        "DELETE FROM analytics_units WHERE namespace = %s AND last_seq = ANY(%s) "
        "RETURNING kind, id",
        (purge.namespace, list(purge.sequences)),
    ).fetchall()
    namespace = purge.namespace
    profiles = [identifier for kind, identifier in units if kind == "profile"]
    sessions = [identifier for kind, identifier in units if kind == "session"]
    if profiles:
        connection.execute(
            "DELETE FROM analytics_daily WHERE namespace = %s AND profile = ANY(%s) "
            "AND profile <> ''",
            (namespace, profiles),
        )
    if not sessions:
        return
    connection.execute(
        "DELETE FROM analytics_daily WHERE namespace = %s AND session_id = ANY(%s) "
        "AND profile = ''",
        (namespace, sessions),
    )
    connection.execute(
        "WITH moved AS (DELETE FROM analytics_daily WHERE namespace = %s "
        "AND session_id = ANY(%s) AND (model <> '' OR source <> '') "
        "RETURNING namespace, day, metric, session_id, profile, value) "
        "INSERT INTO analytics_daily (namespace, day, model, source, metric, session_id, "
        "profile, value) SELECT namespace, day, '', '', metric, session_id, profile, "
        "sum(value) FROM moved GROUP BY namespace, day, metric, session_id, profile "
        "ON CONFLICT (namespace, day, model, source, metric, session_id, profile) "
        "DO UPDATE SET value = analytics_daily.value + excluded.value",
        (namespace, sessions),
    )
    connection.execute(
        "DELETE FROM analytics_sessions WHERE namespace = %s AND session_id = ANY(%s)",
        (namespace, sessions),
    )
