"""Tracking rows: where a read-model copy records how far each projection has applied the
log (one row per projection, or per projection and partition on a partitioned stream), and the
bookkeeping of a batch against them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from memstream.projections.registry import PARTITIONABLE

if TYPE_CHECKING:
    from memstream.projections.ports import LogRecord


# A partitioned projection's tracking rows are ``<projection>@<partition>``.
PARTITION_ROW = "@"


def projection_of(row: str) -> str:
    """The projection a tracking row belongs to (``sessions@3`` -> ``sessions``)."""
    return row.partition(PARTITION_ROW)[0]


@dataclass(frozen=True, slots=True)
class TrackingRows:
    """Where a store records its projections' positions: one row per projection on a stream
    without partitions (``count`` 0), else one per projection and partition, of which the
    store's projector writes those of the partitions it consumes (``owned``).

    A projector consumes the events of its partitions in stream order. So once it has applied
    the event at sequence S, every partition it consumes is complete up to S, and each of their
    rows records S (never less than it held). A row of partition p at S thus means: every
    event of p up to S is applied. A reader waits for each partition it reads to reach the
    partition's own target (its last event when the reader connected, its own last write in
    it), so a partition without new events never holds up a reader.
    """

    count: int = 0
    owned: frozenset[int] = frozenset()

    def names(self, projection: str) -> tuple[str, ...]:
        """The rows of ``projection`` this store writes (its own for one that is not
        :data:`PARTITIONABLE`)."""
        if not self.count or projection not in PARTITIONABLE:
            return (projection,)
        return tuple(f"{projection}{PARTITION_ROW}{p}" for p in sorted(self.owned))

    def every(self, projection: str) -> tuple[str, ...]:
        """Every row of ``projection`` (each partition's, on a partitioned stream)."""
        if not self.count or projection not in PARTITIONABLE:
            return (projection,)
        return tuple(f"{projection}{PARTITION_ROW}{p}" for p in range(self.count))

    def row(self, projection: str, subject: str) -> str:
        """The row of the partition ``subject`` (as the stream stored it) is in."""
        if not self.count or projection not in PARTITIONABLE:
            return projection
        partition = subject[subject.rfind(".") + 1 :]
        if not partition.isdigit():
            raise ValueError(f"subject {subject!r} has no partition token")
        return f"{projection}{PARTITION_ROW}{partition}"


# The rows of a stream without partitions: one per projection.
UNPARTITIONED = TrackingRows()


class Named(Protocol):
    name: str


N = TypeVar("N", bound=Named)


def pending_for(
    projections: Sequence[N], positions: dict[str, int], rows: TrackingRows, record: LogRecord
) -> list[N]:
    """The projections that have not applied ``record`` yet: its sequence is past their row
    (of its partition; a partition not consumed here never is)."""
    seq = record.seq
    if not rows.count:
        return [p for p in projections if seq > positions[p.name]]
    return [p for p in projections if seq > positions.get(rows.row(p.name, record.subject), seq)]


def advance(positions: dict[str, int], rows: tuple[str, ...], seq: int) -> None:
    """Record that ``rows`` (one projection's, see :class:`TrackingRows`) are complete up to
    ``seq``."""
    for row in rows:
        if positions[row] < seq:
            positions[row] = seq


def position_events(positions: dict[str, int], records: dict[int, LogRecord]) -> dict[int, str]:
    """The identity of the event at each of ``positions`` that ``records`` (by sequence) hold:
    what a store records beside them."""
    return {seq: records[seq].identity() for seq in set(positions.values()) if seq in records}
