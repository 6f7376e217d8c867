"""An in-memory log with JetStream's publish rules, for AggregateStore tests without NATS.

It implements what the store needs of :class:`~memstream.workers.log.event_log.EventLog`: one
sequence over all subjects, ``Nats-Expected-Last-Subject-Sequence`` (refused with
:class:`ExpectedSequenceMismatch`), ``Nats-Msg-Id`` dedupe, and reads by subject — counting the
entries it hands out, so that tests can assert how much of a subject a decision read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

from memstream.workers.log.codec import H_MSG_ID, CommandMeta, decode_event, encode_event
from memstream.workers.log.event_log import (
    ExpectedSequenceMismatch,
    LogEntry,
    OutgoingMessage,
    PublishResult,
)

A = TypeVar("A")


class MemoryLog:
    """Entries of every subject in stream order."""

    def __init__(self) -> None:
        self.entries: list[LogEntry] = []
        self.entries_read = 0
        # called after each entry handed out: lets a test move a projector during a read
        self.on_read: Callable[[], None] = lambda: None
        self._msg_ids: dict[str, int] = {}
        self._last: dict[str, int] = {}

    async def publish(
        self, subject: str, messages: Sequence[OutgoingMessage], expected_last_seq: int | None
    ) -> PublishResult:
        if all(m.msg_id in self._msg_ids for m in messages):
            return PublishResult(self._msg_ids[messages[-1].msg_id], duplicate=True)
        if expected_last_seq is not None and self._last.get(subject, 0) != expected_last_seq:
            raise ExpectedSequenceMismatch(f"wrong last sequence: {self._last.get(subject, 0)}")
        for message in messages:
            seq = len(self.entries) + 1
            headers = {**message.headers, H_MSG_ID: message.msg_id}
            self.entries.append(LogEntry(seq, subject, message.payload, headers))
            self._msg_ids[message.msg_id] = seq
            self._last[subject] = seq
        return PublishResult(len(self.entries), duplicate=False)

    async def read_subject(self, subject: str, after_seq: int = 0) -> AsyncIterator[LogEntry]:
        for entry in self.entries[after_seq:]:
            if entry.subject == subject:
                self.entries_read += 1
                yield entry
                self.on_read()

    async def last_seq(self, subject: str) -> int:
        return self._last.get(subject, 0)

    def replay(self, subject: str, aggregate: A) -> A:
        """``aggregate`` (empty) with every event of ``subject`` applied: the reference a
        decision on a restored aggregate is compared with. Reads are not counted."""
        for entry in self.entries:
            if entry.subject == subject:
                decode_event(entry.payload, entry.headers, entry.subject).mutate(aggregate)
        return aggregate

    async def publish_behind(self, subject: str, events: Sequence[Any]) -> None:
        """Publish ``events`` as another writer would, one command each, behind the back of
        whoever holds the subject's aggregate."""
        last = await self.last_seq(subject)
        for event in events:
            meta = CommandMeta()
            payload, headers = encode_event(event, meta, meta.command_id)
            message = OutgoingMessage(payload, headers, meta.command_id)
            last = (await self.publish(subject, [message], last)).seq
