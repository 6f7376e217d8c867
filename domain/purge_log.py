"""The purge log: what ``memstream admin purge`` erased from the log, without what it erased.

A purge erases every event of deleted sessions and profiles (a session deleted through a
SessionManager: its messages, registration and built-in blocks; a deleted profile: its
memories and raw messages) once they have been deleted for longer than a grace period. Read
models built from the log before the purge still hold some rows of them (a cleared session's
position, its counters in the analytics); a read model built after it never had them. So that
both agree, the purge first records an :class:`PurgeLog.EventsPurged` event naming the stream
sequences of the last events of the subjects it erases (the deletions themselves): each
projection removes what it keeps of an aggregate whose last event is one of them. The event
holds no personal data: sequences, counts and the cut-off time.

One purge log per namespace, on its own subject.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from eventsourcing.domain import Aggregate

from memstream.domain.aggregates import empty_aggregate, next_event
from memstream.domain.errors import InvalidInputError

_NAMESPACE = uuid.UUID("0b7e3f51-6a2d-4c1e-8f3b-5d9a2c4e6f10")
PURGE_LOG_ID: Final = "log"  # the id token of a namespace's purge log subject
# At most this many subjects in one purge event (a larger purge records several).
PURGE_EVENT_MAX_SUBJECTS: Final = 10_000


def purge_log_aggregate_id(namespace: str, log_id: str = PURGE_LOG_ID) -> uuid.UUID:
    """The deterministic aggregate id of a namespace's purge log."""
    return uuid.uuid5(_NAMESPACE, f"{namespace}\x00{log_id}")


class PurgeLog(Aggregate):
    """A namespace's record of purges."""

    class Event(Aggregate.Event):
        pass

    class EventsPurged(Event):
        """Events were erased: those of the subjects whose last events (deletions) are at
        ``sequences``, all deleted before ``deleted_before``."""

        sequences: list[int]
        subjects: int
        events: int
        sessions: int
        profiles: int
        older_than: str
        deleted_before: str

        def apply(self, aggregate: Any) -> None:
            aggregate.purges += 1

    purges: int

    @classmethod
    def empty(cls, namespace: str) -> PurgeLog:
        log = empty_aggregate(cls, purge_log_aggregate_id(namespace))
        log.purges = 0
        return log

    def record(
        self,
        *,
        sequences: list[int],
        subjects: int,
        events: int,
        sessions: int,
        profiles: int,
        older_than: str,
        deleted_before: str,
    ) -> list[Event]:
        """Decide the record of a purge (nothing to purge: nothing recorded)."""
        if not sequences:
            return []
        if len(sequences) > PURGE_EVENT_MAX_SUBJECTS:
            raise InvalidInputError(
                f"a purge event names at most {PURGE_EVENT_MAX_SUBJECTS} subjects, "
                f"not {len(sequences)}"
            )
        return [
            next_event(
                self,
                self.EventsPurged,
                sequences=sorted(sequences),
                subjects=subjects,
                events=events,
                sessions=sessions,
                profiles=profiles,
                older_than=older_than,
                deleted_before=deleted_before,
            )
        ]
