"""Data sets the benchmarks start from: a log of message events, and long sessions."""

from __future__ import annotations

import asyncio
import time

from bench.harness import ACK_TIMEOUT
from bench.payloads import MessageFactory, chunks
from memstream.client import Memstream
from memstream.domain.session import SessionAggregate
from memstream.workers.log.codec import H_MSG_ID, CommandMeta, encode_event
from memstream.workers.log.event_log import EventLog
from memstream.workers.log.subjects import subject_for


async def fill_log(
    log: EventLog,
    factory: MessageFactory,
    *,
    sessions: int,
    per_session: int,
    namespace: str = "default",
    window: int = 1000,
) -> int:
    """Append ``sessions × per_session`` single-message ``MessageAppended`` events, round-robin.

    Events are decided by the real Session aggregate and encoded by the real codec, exactly as
    ``append_message`` would write them, but published with a window instead of one awaited
    publish each, so a 100,000-event log takes seconds to build. Returns the events written.
    """
    aggregates = [SessionAggregate.empty(namespace, f"chat-{s}") for s in range(sessions)]
    subjects = [
        subject_for(log.subject_prefix, namespace, "session", a.session_id) for a in aggregates
    ]
    js = log.client.jetstream(timeout=ACK_TIMEOUT, publish_async_max_pending=window)
    futures = []
    for index in range(per_session):
        for aggregate, subject in zip(aggregates, subjects, strict=True):
            message = factory.message(f"{aggregate.session_id}-{index}", index)
            events = aggregate.append_message(message)
            aggregate.apply_events(events)
            meta = CommandMeta()
            data, headers = encode_event(events[0], meta, meta.command_id)
            headers[H_MSG_ID] = meta.command_id
            futures.append(
                await js.publish_async(subject, data, wait_stall=ACK_TIMEOUT, headers=headers)
            )
    await asyncio.wait_for(asyncio.gather(*futures), ACK_TIMEOUT)
    return sessions * per_session


async def fill_session(
    ms: Memstream, session_id: str, factory: MessageFactory, count: int, *, batch: int = 500
) -> float:
    """Append ``count`` messages to one session through ``append_messages`` chains and wait until
    the read model has them. Returns the seconds it took."""
    start = time.perf_counter()
    session = ms.session(session_id)
    messages = factory.messages(session_id, count)
    for chain in chunks(messages, batch):
        await session.append_messages(chain)
    await ms.wait_for("sessions")
    return time.perf_counter() - start


async def fill_sessions(ms: Memstream, factory: MessageFactory, sessions: int, count: int) -> float:
    """:func:`fill_session` for ``sessions`` sessions ``chat-000``, ``chat-001``…; the seconds
    it took."""
    start = time.perf_counter()
    for index in range(sessions):
        await fill_session(ms, f"chat-{index:03d}", factory, count)
    return time.perf_counter() - start
