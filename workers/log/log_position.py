"""Where a read-model copy stands against the log: a copy ahead of it is found and named.

The log is the only source of truth, and a copy records, beside each tracked sequence, the
identity of the event there (:meth:`~memstream.projections.ports.LogRecord.identity`). A log
can still end before a copy's positions, or hold other events there: a server that acknowledged
writes before they were on disk and then crashed, a restored backup of its store, a cluster
that lost its tail. A projector that trusted its positions would then skip the log's new events
at those sequences for good, and readers would be served events the log no longer holds. So
every copy is checked against the log when it is opened, when a projector starts and after
every reconnection (:func:`check_copy`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

REBUILD_COMMAND = "memstream projections rebuild"

# A tracking row: its name, its sequence, the identity of the event there (None: unknown).
Mark = tuple[str, int, str | None]


class LogReader(Protocol):
    """What the check needs of the log (:class:`~memstream.workers.log.event_log.EventLog`)."""

    async def stream_last_seq(self) -> int: ...

    async def identity_at(self, seq: int) -> str | None: ...


@dataclass(frozen=True, slots=True)
class LogGap:
    """A copy ahead of the log: it tracks events up to ``tracked``, the log ends at
    ``log_end``, and the events from ``first`` on are not the copy's (lost, or another event at
    ``first`` when ``replaced``)."""

    tracked: int
    log_end: int
    first: int
    replaced: bool
    rows: tuple[str, ...]

    def describe(self) -> str:
        """One line naming the range (what the warning, ``verify`` and ``status`` print)."""
        if self.replaced:
            return (
                f"read model ahead of the log: tracked {self.tracked}, log ends at "
                f"{self.log_end} but holds another event at {self.first} than the copy "
                f"applied there: events {self.first}-{self.tracked} of the copy are not the log's"
            )
        return (
            f"read model ahead of the log: tracked {self.tracked}, log ends at {self.log_end}: "
            f"events {self.first}-{self.tracked} are not in the log"
        )

    def refusal(self, location: str) -> str:
        """The one line that refuses a copy this process may not replace by itself."""
        return f"read model {location}: {self.describe()}; run `{REBUILD_COMMAND}`"


async def check_copy(log: LogReader, marks: Sequence[Mark]) -> LogGap | None:
    """Compare a copy's tracking rows (``marks``: name, sequence, identity) with the log.

    A row past the log's end is a lost tail. A row whose event the log holds under another
    identity is a replaced tail. A row whose event the log no longer holds at all (an erased
    or purged event: ``memstream admin purge``) or that recorded no identity (written before
    identities were) is checked against the log's end only.

    Raises:
        UnavailableError: the log cannot be read.
    """
    if not marks:
        return None
    end = await log.stream_last_seq()
    lost = [(row, seq) for row, seq, _ in marks if seq > end]
    expected: dict[int, str] = {}
    for _, seq, identity in marks:
        if seq <= end and identity is not None:
            expected.setdefault(seq, identity)
    replaced: list[int] = []
    for seq in sorted(expected):
        found = await log.identity_at(seq)
        if found is not None and found != expected[seq]:
            replaced.append(seq)
            break  # the lowest one names the range; every later row is past it
    if not lost and not replaced:
        return None
    first = min([*replaced, end + 1])
    rows = tuple(sorted({row for row, seq, _ in marks if seq >= first}))
    tracked = max(seq for _, seq, _ in marks)
    return LogGap(tracked, end, first, bool(replaced) and first in replaced, rows)
