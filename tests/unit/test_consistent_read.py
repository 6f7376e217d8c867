"""``EventLog.read_subject(consistent=True)`` against a replica that trails the leader.

Real servers cannot be made to trail on demand (a follower applies within milliseconds; the
cluster tests in tests/integration/test_nats_cluster.py read through followers and paused
leaders), so here the log's two sources are stand-ins: the direct gets, answered by a replica
that holds a prefix of the leader's events and catches up as told, and the leader's end of the
subject.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from memstream.domain.errors import UnavailableError
from memstream.workers.log.event_log import EventLog, LogEntry

SUBJECT = "ms.default.session.s"


class _NoNats:
    """What EventLog's constructor asks of a client; nothing is sent through it here."""

    def jetstream(self, timeout: float) -> None:
        return None


class TrailingReplica(EventLog):
    """Direct gets answered from the first ``applied`` events of the leader's ``events``
    (sequences 2, 4, 6, …: other subjects' events lie between), the replica catching up
    by ``step`` events per read that finds it short."""

    def __init__(self, events: int, applied: int, step: int, timeout: float = 2.0) -> None:
        super().__init__(_NoNats(), "S", timeout=timeout)  # type: ignore[arg-type]
        self.leader = [2 * n for n in range(1, events + 1)]
        self.applied = applied
        self.step = step
        self.leader_asked = 0

    async def read_batch(
        self, filter_subject: str, start_seq: int, batch: int = 1000
    ) -> tuple[list[LogEntry], int]:
        held = [seq for seq in self.leader[: self.applied] if seq >= start_seq]
        if not held:
            self.applied = min(len(self.leader), self.applied + self.step)  # catching up
        entries = [LogEntry(seq, SUBJECT, b"{}", {}) for seq in held[:batch]]
        return entries, len(held) - len(entries)

    async def last_seq(self, subject: str) -> int:
        self.leader_asked += 1
        return self.leader[-1] if self.leader else 0


async def _read(log: EventLog, after: int = 0, **options: Any) -> list[int]:
    return [entry.seq async for entry in log.read_subject(SUBJECT, after, **options)]


async def test_a_consistent_read_goes_on_until_it_has_what_the_leader_holds() -> None:
    # Given a replica holding 3 of the leader's 10 events, catching up 2 at a time
    log = TrailingReplica(events=10, applied=3, step=2)
    # When the subject is read without and with consistency
    plain = await _read(log)
    log.applied = 3
    consistent = await _read(log, consistent=True, batch=2)
    # Then the plain read ends where the replica does; the consistent one has every event,
    # each once and in order
    assert plain == [2, 4, 6]
    assert consistent == log.leader


async def test_a_consistent_read_from_a_position_past_the_end_yields_nothing() -> None:
    log = TrailingReplica(events=4, applied=4, step=1)
    assert await _read(log, 8, consistent=True) == []
    assert await _read(log, 6, consistent=True) == [8]


async def test_the_leaders_end_is_asked_again_when_its_last_event_went() -> None:
    # Given a replica short of the leader's last event, which is then erased
    log = TrailingReplica(events=5, applied=4, step=0)

    async def erased_meanwhile(subject: str) -> int:
        log.leader_asked += 1
        if log.leader_asked > 1:
            log.leader = log.leader[:4]
        return log.leader[-1]

    log.last_seq = erased_meanwhile  # type: ignore[method-assign]
    # When it is read consistently, then the read ends at the leader's new end
    assert await _read(log, consistent=True) == [2, 4, 6, 8]
    assert log.leader_asked == 2


async def test_a_replica_that_stays_behind_is_named_after_the_timeout() -> None:
    # Given a replica that never catches up
    log = TrailingReplica(events=6, applied=2, step=0, timeout=0.3)
    started = time.monotonic()
    # When it is read consistently, then the read fails after the timeout, naming how far
    # behind the replicas are and the command that names the one not current
    with pytest.raises(UnavailableError, match=r"sequence 4 of 12\).*memstream doctor"):
        await _read(log, consistent=True)
    assert 0.3 <= time.monotonic() - started < 2.0
