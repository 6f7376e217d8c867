"""The analytics read model's reads on either engine: daily volumes per namespace, model and
source (each engine writes a batch's counters its own way)."""

from __future__ import annotations

from typing import Any

from memstream.projections.analytics_rows import daily_rows
from memstream.projections.sql.dialect import Dialect, Executes

# A namespace (None: every one) and a range of days, both inclusive.
# How each engine's analytics writes (one row or a batch's rows at once) meet the rows there.
COUNT_CONFLICT = (
    "ON CONFLICT (namespace, day, model, source, metric, session_id, profile) "
    "DO UPDATE SET value = analytics_daily.value + excluded.value"
)
UNIT_CONFLICT = "ON CONFLICT (namespace, kind, id) DO UPDATE SET last_seq = excluded.last_seq"
# A session's model and source are the ones it was registered with, once it was.
SESSION_CONFLICT = (
    "ON CONFLICT (namespace, session_id) DO UPDATE SET "
    "model = CASE WHEN excluded.registered = 1 THEN excluded.model "
    "ELSE analytics_sessions.model END, "
    "source = CASE WHEN excluded.registered = 1 THEN excluded.source "
    "ELSE analytics_sessions.source END, "
    "registered = CASE WHEN excluded.registered = 1 THEN 1 "
    "ELSE analytics_sessions.registered END"
)
_WHERE = "(CAST(? AS TEXT) IS NULL OR namespace = ?) AND {day} >= ? AND {day} <= ?"


class SqlAnalyticsQueries:
    """Daily volumes per namespace, model and source."""

    def __init__(self, connection: Executes, dialect: Dialect) -> None:
        self.connection = connection
        self.dialect = dialect

    def daily(
        self, namespace: str | None, since: str | None = None, until: str | None = None
    ) -> list[dict[str, Any]]:
        params = (namespace, namespace, since or "", until or "9999-12-31")
        counters = self.connection.execute(
            self.dialect.sql(
                "SELECT namespace, day, model, source, metric, sum(value) FROM analytics_daily "
                f"WHERE {_WHERE.format(day='day')} GROUP BY namespace, day, model, source, metric"
            ),
            params,
        ).fetchall()
        sessions = self.connection.execute(
            self.dialect.sql(
                "SELECT namespace, first_day, model, source, count(*) FROM analytics_sessions "
                f"WHERE {_WHERE.format(day='first_day')} "
                "GROUP BY namespace, first_day, model, source"
            ),
            params,
        ).fetchall()
        return daily_rows(counters, sessions)
