"""AggregateStore retry policy, with a hand-written fake log that always loses the race."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from memstream.domain.errors import ConcurrencyError
from memstream.domain.session import Session
from memstream.workers.aggregate_store import AggregateStore
from memstream.workers.event_log import ExpectedSequenceMismatch, LogEntry, OutgoingMessage


class AlwaysConflictingLog:
    """A log whose subject always moved on (another writer always wins)."""

    def __init__(self) -> None:
        self.publishes = 0

    async def publish(
        self, subject: str, messages: Sequence[OutgoingMessage], expected_last_seq: int | None
    ) -> Any:
        self.publishes += 1
        raise ExpectedSequenceMismatch("wrong last sequence")

    async def read_subject(self, subject: str, after_seq: int = 0) -> Any:
        return
        yield LogEntry(0, subject, b"", {})  # an async generator that yields nothing

    async def last_seq(self, subject: str) -> int:
        return 0


async def test_a_command_that_keeps_conflicting_gives_up_with_concurrency_error() -> None:
    # Given a store whose log always reports a conflict, with a short retry budget
    log = AlwaysConflictingLog()
    store: AggregateStore[Session] = AggregateStore(
        log,  # type: ignore[arg-type]
        lambda key: Session.empty("default", key),
        retry_seconds=0.05,
    )
    message = {"id": "m1", "role": "user", "content": "hi"}
    # When a command is run, Then it retries for the budget and raises ConcurrencyError
    with pytest.raises(ConcurrencyError, match=r"changed under the command \d+ times"):
        await store.execute("ms.default.session.s", "s", lambda s: s.append_message(message))
    assert log.publishes >= 3
