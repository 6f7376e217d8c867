"""The analytics read model's reads on either engine: daily volumes per namespace, model and
source (each engine writes a batch's counters its own way)."""

from __future__ import annotations

from typing import Any

from memstream.projections.analytics_rows import daily_rows
from memstream.projections.sql.dialect import Dialect, Executes

# A namespace (None: every one) and a range of days, both inclusive.
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
