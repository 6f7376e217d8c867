"""AggregateStore results and retry policy, with hand-written fake logs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from memstream.domain.errors import ConcurrencyError
from memstream.domain.session import SessionAggregate
from memstream.workers.log.aggregate_store import AggregateStore, Decided
from memstream.workers.log.event_log import (
    ExpectedSequenceMismatch,
    LogEntry,
    OutgoingMessage,
    PublishResult,
)


class AcceptingLog:
    """A log with one writer: every publish lands after the last."""

    def __init__(self) -> None:
        self.seq = 0

    async def publish(
        self, subject: str, messages: Sequence[OutgoingMessage], expected_last_seq: int | None
    ) -> PublishResult:
        assert expected_last_seq == self.seq
        self.seq += len(messages)
        return PublishResult(self.seq, duplicate=False)

    async def read_subject(self, subject: str, after_seq: int = 0) -> Any:
        return
        yield LogEntry(0, subject, b"", {})  # an async generator that yields nothing

    async def last_seq(self, subject: str) -> int:
        return self.seq


class AlwaysConflictingLog(AcceptingLog):
    """A log whose subject always moved on (another writer always wins)."""

    def __init__(self) -> None:
        super().__init__()
        self.publishes = 0

    async def publish(
        self, subject: str, messages: Sequence[OutgoingMessage], expected_last_seq: int | None
    ) -> Any:
        self.publishes += 1
        raise ExpectedSequenceMismatch("wrong last sequence")


async def test_a_command_that_keeps_conflicting_gives_up_with_concurrency_error() -> None:
    # Given a store whose log always reports a conflict, with a short retry budget
    log = AlwaysConflictingLog()
    store: AggregateStore[SessionAggregate] = AggregateStore(
        log,  # type: ignore[arg-type]
        lambda key: SessionAggregate.empty("default", key),
        retry_seconds=0.05,
    )
    message = {"id": "m1", "role": "user", "content": "hi"}
    # When a command is run, Then it retries for the budget and raises ConcurrencyError
    with pytest.raises(ConcurrencyError, match=r"changed under the command \d+ times"):
        await store.execute("ms.default.session.s", "s", lambda s: s.append_message(message))
    assert log.publishes >= 3


async def test_a_command_returns_its_events_sequence_and_decided_value() -> None:
    # Given a store over a log that accepts every publish
    log = AcceptingLog()
    store: AggregateStore[SessionAggregate] = AggregateStore(
        log,  # type: ignore[arg-type]
        lambda key: SessionAggregate.empty("default", key),
    )
    subject = "ms.default.session.s"
    # When a command decides an event, Then its result has the event and its sequence
    message = {"id": "m1", "role": "user", "content": "hi"}
    appended = await store.execute(subject, "s", lambda s: s.append_message(message))
    assert [type(e) for e in appended.events] == [SessionAggregate.MessageAppended]
    assert (appended.seq, appended.value) == (1, None)

    # When a decision returns a value with its events (Decided), Then the result carries it
    def freeze(session: SessionAggregate) -> Decided[str | None]:
        return Decided(session.freeze_system_prompt("prompt"), session.frozen_prompt)

    frozen = await store.execute(subject, "s", freeze)
    assert [type(e) for e in frozen.events] == [SessionAggregate.SystemPromptFrozen]
    assert (frozen.seq, frozen.value) == (2, None)
    # And a no-op decision publishes nothing but still answers, at the subject's sequence
    again = await store.execute(subject, "s", freeze)
    assert (again.events, again.seq, again.value) == ((), 2, "prompt")
