"""The extractor worker: turns ingested conversations and remembered texts into memories.

It follows the Agent Memory events of the stream with one durable consumer (``extractor``,
shared by every extractor process of the stream: their output goes to the log, not to a read
model, so they split the work). For each ingest (all its parts) or remembered text it runs the
extractor — the offline one by default, in a thread — and records the result on the profile as
``memory.memories_extracted`` (plus ``memory.memory_superseded`` for facts and instructions on a
topic that had a current memory). The command id derives from the source, and the profile
refuses a source it has recorded, so a redelivery (a killed worker, a lost ack) adds nothing.

An extraction that keeps failing is recorded as done with no memories and the error named in
its extractor field (a dead letter in the log itself, never half applied): ``ingest(wait=True)``
returns, and the failure is auditable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import api

from memstream.domain.extraction.model import (
    Embed,
    ExtractedMemory,
    ExtractorInfo,
    SourceMessage,
)
from memstream.domain.memory_input import iso, parse_time
from memstream.domain.memory_profile import MemoryProfile, content_id
from memstream.workers.log.aggregate_store import AggregateStore, CommandResult
from memstream.workers.log.codec import CommandMeta, decode_event
from memstream.workers.log.event_log import EventLog
from memstream.workers.log.subjects import logical_subject, parse_subject

logger = logging.getLogger(__name__)

EXTRACTOR_CONSUMER = "extractor"
FETCH_BATCH = 16
FETCH_TIMEOUT = 1.0
# Attempts of one source before it is recorded as failed (with no memories).
MAX_ATTEMPTS = 3
# A message not acknowledged within this is redelivered (to another extractor, after a kill);
# while a batch is worked on, the messages still waiting in it are marked in progress.
ACK_WAIT_SECONDS = 30.0
ACTOR = "memstream-extractor"


class Extractor(Protocol):
    """What the worker runs (the offline extractor, or an LLM one)."""

    @property
    def info(self) -> ExtractorInfo: ...

    def extract(
        self, messages: Sequence[SourceMessage], embed: Embed | None = None
    ) -> list[ExtractedMemory]: ...

    def extract_remembered(
        self, content: str, timestamp: datetime, embed: Embed | None = None
    ) -> ExtractedMemory: ...


def memory_record(
    memory: ExtractedMemory, memory_id: str, session_id: str | None
) -> dict[str, Any]:
    """An extracted memory as the event carries it."""
    return {
        "id": memory_id,
        "type": memory.type,
        "topic_key": memory.topic_key,
        "summary": memory.summary,
        "content": memory.content,
        "keywords": list(memory.keywords),
        "queries": list(memory.queries),
        "source_message_ids": list(memory.source_message_ids),
        "event_time": None if memory.event_time is None else iso(memory.event_time),
        "session_id": session_id,
    }


class ExtractorWorker:
    """Consumes ``<prefix>.*.profile.*`` and records extractions (see the module doc)."""

    def __init__(
        self,
        log: EventLog,
        extractor: Callable[[], Extractor],
        *,
        embed: Callable[[], Embed | None] | None = None,
        durable: str = EXTRACTOR_CONSUMER,
    ) -> None:
        self.log = log
        self._make_extractor = extractor  # called at the first extraction
        self._extractor: Extractor | None = None
        self._embed = embed or (lambda: None)
        self.durable = durable
        self.profiles: dict[str, AggregateStore[MemoryProfile]] = {}
        self.extracted = 0  # sources recorded (for status and tests)
        self.failed = 0
        self._attempts: dict[str, int] = {}
        self._parts: dict[str, list[dict[str, Any]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._subscription: Any = None
        self._closed = False

    @property
    def extractor(self) -> Extractor:
        if self._extractor is None:
            self._extractor = self._make_extractor()
        return self._extractor

    @property
    def closing(self) -> bool:
        return self._closed

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name=f"memstream-{self.durable}")

    async def close(self) -> None:
        """Stop (what is not acknowledged yet is redelivered to the next extractor)."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._subscription is not None:
            # Unsubscribed now, the connection's drain does not wait for its pending pulls.
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()
            self._subscription = None

    async def _subscribe(self) -> Any:
        subject = await self.log.stored(f"{self.log.subject_prefix}.*.profile.*")
        config = api.ConsumerConfig(
            durable_name=self.durable,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=ACK_WAIT_SECONDS,
            max_ack_pending=1000,
            filter_subject=subject,
            deliver_policy=api.DeliverPolicy.ALL,
        )
        return await self.log.js.pull_subscribe(
            subject, durable=self.durable, stream=self.log.stream, config=config
        )

    async def run(self) -> None:
        """Fetch and extract until closed (reconnecting through NATS outages)."""
        while not self._closed:
            try:
                subscription = self._subscription = await self._subscribe()
                while not self._closed:
                    try:
                        msgs = await subscription.fetch(FETCH_BATCH, timeout=FETCH_TIMEOUT)
                    except (TimeoutError, nats.errors.TimeoutError):
                        continue
                    for index, msg in enumerate(msgs):
                        for waiting in msgs[index + 1 :]:
                            await waiting.in_progress()
                        await self._handle(msg)
            except asyncio.CancelledError:
                raise
            except Exception:
                if self.closing:
                    return
                logger.exception("extractor: consuming failed; retrying in 1 s")
                await asyncio.sleep(1.0)

    async def _handle(self, msg: Msg) -> None:
        try:
            event = decode_event(msg.data, dict(msg.headers or {}), msg.subject)
        except Exception:
            logger.exception("extractor: skipping an undecodable message on %s", msg.subject)
            await msg.term()
            return
        try:
            if isinstance(event, MemoryProfile.ConversationIngested):
                await self._ingested(msg, event)
            elif isinstance(event, MemoryProfile.MemoryRemembered):
                await self._remembered(msg, event)
        except asyncio.CancelledError:
            raise
        except Exception:
            # Not acknowledged: redelivered after a pause (the source is retried whole).
            logger.exception("extractor: extraction from %s failed; will retry", msg.subject)
            with contextlib.suppress(Exception):
                await msg.nak(delay=1.0)
            return
        await msg.ack()

    async def _ingested(self, msg: Msg, event: MemoryProfile.ConversationIngested) -> None:
        key = event.ingest_id
        self._parts.setdefault(key, []).extend(event.messages)
        if event.part < event.parts:
            return  # acknowledged; the last part gathers them (from the log if need be)
        messages = self._parts.pop(key)
        if event.part > 1 and len(messages) < _expected(event):
            messages = await self._all_parts(msg, event)
        sources = [
            SourceMessage(
                m["id"],
                event.session_id,
                m["role"],
                m["content"],
                parse_time("timestamp", m["timestamp"]),
            )
            for m in messages
        ]
        await self._extract(
            msg.subject,
            event.profile,
            key,
            event.session_id,
            lambda embed: [
                memory_record(memory, content_id(event.profile, key, str(index)), event.session_id)
                for index, memory in enumerate(self.extractor.extract(sources, embed))
            ],
        )

    async def _all_parts(
        self, msg: Msg, event: MemoryProfile.ConversationIngested
    ) -> list[dict[str, Any]]:
        """The messages of every part of an ingest (an atomic batch: stored together just
        before its last part)."""
        last = msg.metadata.sequence.stream
        messages: list[dict[str, Any]] = []
        async for entry in self.log.read_subject(msg.subject, last - event.parts, consistent=True):
            part = decode_event(entry.payload, entry.headers, entry.subject)
            if (
                isinstance(part, MemoryProfile.ConversationIngested)
                and part.ingest_id == event.ingest_id
            ):
                messages.extend(part.messages)
            if entry.seq >= last:
                break
        return messages

    async def _remembered(self, msg: Msg, event: MemoryProfile.MemoryRemembered) -> None:
        timestamp = event.timestamp
        await self._extract(
            msg.subject,
            event.profile,
            event.memory_id,
            event.session_id,
            lambda embed: [
                memory_record(
                    self.extractor.extract_remembered(event.content, timestamp, embed),
                    event.memory_id,
                    event.session_id,
                )
            ],
        )

    async def _extract(
        self,
        subject: str,
        profile: str,
        source: str,
        session_id: str | None,
        run: Callable[[Embed | None], list[dict[str, Any]]],
    ) -> None:
        info = self.extractor.info
        extractor: dict[str, Any] = {"name": info.name, "version": info.version, **info.details}
        try:
            memories = await asyncio.to_thread(lambda: run(self._embed()))
        except Exception as error:
            attempts = self._attempts.get(source, 0) + 1
            self._attempts[source] = attempts
            if attempts < MAX_ATTEMPTS:
                raise
            logger.error(
                "extractor: %s of profile %s failed %d times; recorded with no memories: %r",
                source,
                profile,
                attempts,
                error,
            )
            memories = []
            extractor["error"] = repr(error)[:500]
            self.failed += 1
        self._attempts.pop(source, None)
        store = self._store(subject)
        namespace = parse_subject(subject).namespace
        result: CommandResult[None] = await store.execute(
            logical_subject(subject),  # what writers publish to (a delivery's may be partitioned)
            profile,
            lambda aggregate: aggregate.record_extraction(source, extractor, memories),
            CommandMeta(command_id=f"x-{content_id(namespace, profile, source)}", actor=ACTOR),
        )
        if result.events:
            self.extracted += 1

    def _store(self, subject: str) -> AggregateStore[MemoryProfile]:
        namespace = parse_subject(subject).namespace
        store = self.profiles.get(namespace)
        if store is None:
            store = self.profiles[namespace] = AggregateStore(
                self.log, lambda key: MemoryProfile.empty(namespace, key)
            )
        return store


def _expected(event: MemoryProfile.ConversationIngested) -> int:
    """A lower bound of an ingest's message count, seen from its last part (every earlier
    part holds at least one message)."""
    return len(event.messages) + event.parts - 1
