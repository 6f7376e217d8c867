"""What the tracking rows and dead letters say, read on either engine: projections' positions
(a partitioned one's per partition) and the versions that wrote them."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from memstream.projections.registry import VERSIONS
from memstream.projections.sql.dialect import Dialect, Executes
from memstream.projections.tracking import PARTITION_ROW, projection_of

_DEAD_LETTER = ("projection", "seq", "subject", "topic", "error", "attempts", "recorded_at")


def tracking_rows(
    connection: Executes, dialect: Dialect, projection: str
) -> tuple[int, dict[int, int]]:
    """``projection``'s own row (0 if none) and its partitions' rows, in one query."""
    prefix = projection + PARTITION_ROW
    plain = 0
    partitions: dict[int, int] = {}
    for name, seq in connection.execute(
        dialect.sql(
            "SELECT projection, seq FROM tracking "
            "WHERE projection = ? OR substr(projection, 1, ?) = ?"
        ),
        (projection, len(prefix), prefix),
    ).fetchall():
        if name == projection:
            plain = int(seq)
        else:
            partitions[int(str(name)[len(prefix) :])] = int(seq)
    return plain, partitions


def tracked_seq(connection: Executes, dialect: Dialect, projection: str) -> int:
    """The last stream sequence ``projection`` committed (0 if none); of a partitioned one, the
    lowest of its partitions'."""
    plain, partitions = tracking_rows(connection, dialect, projection)
    return min(partitions.values()) if partitions else plain


def dead_letters(connection: Executes, order: str = "projection, seq") -> list[dict[str, Any]]:
    """Every recorded dead letter, in ``order`` (columns of the table)."""
    rows = connection.execute(
        f"SELECT {', '.join(_DEAD_LETTER)} FROM dead_letters ORDER BY {order}"
    ).fetchall()
    return [dict(zip(_DEAD_LETTER, row, strict=True)) for row in rows]


def changed_versions(rows: Iterable[tuple[Any, Any]], names: Collection[str]) -> dict[str, int]:
    """Of the projections ``names``, those whose tracking ``rows`` (name, version) were written
    by another version than this code's, with that version (one partition of another version
    is enough); projections without rows are left out."""
    found: dict[str, int] = {}
    for row, version in rows:
        name = projection_of(str(row))
        if name in names and found.get(name, VERSIONS.get(name, 1)) == VERSIONS.get(name, 1):
            found[name] = int(version)
    return {name: v for name, v in found.items() if v != VERSIONS.get(name, 1)}
