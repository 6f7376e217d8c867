"""Platform status: the stream, its consumers, each projection's lag, and dead letters."""

from __future__ import annotations

import sqlite3
from dataclasses import asdict, dataclass
from typing import Any

import nats.errors

from memstream.domain.errors import UnavailableError
from memstream.projections.sqlite.database import dead_letters, tracked_seq
from memstream.workers.event_log import EventLog
from memstream.workers.projector import default_projections


@dataclass(frozen=True, slots=True)
class StreamStatus:
    """The log's stream right now."""

    name: str
    messages: int
    bytes: int
    first_seq: int
    last_seq: int
    consumer_count: int


@dataclass(frozen=True, slots=True)
class ConsumerStatus:
    """One consumer of the stream (durable workers and short-lived readers alike)."""

    name: str
    durable: bool
    num_pending: int
    num_ack_pending: int
    num_redelivered: int
    ack_floor: int


@dataclass(frozen=True, slots=True)
class ProjectionStatus:
    """How far one read model got: the last sequence it committed and how far behind it is."""

    name: str
    tracked_seq: int
    lag: int


@dataclass(frozen=True, slots=True)
class PlatformStatus:
    """Everything ``memstream status`` shows."""

    stream: StreamStatus
    consumers: list[ConsumerStatus]
    projections: list[ProjectionStatus]
    dead_letter_count: int
    dead_letters: list[dict[str, object]]

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


async def stream_status(log: EventLog) -> StreamStatus:
    """The stream's name, size and sequence range.

    Raises:
        UnavailableError: NATS did not answer.
    """
    try:
        info = await log.js.stream_info(log.stream)
    except (nats.errors.Error, TimeoutError) as error:
        raise UnavailableError(f"cannot read stream {log.stream!r}: {error!r}") from error
    state = info.state
    return StreamStatus(
        name=log.stream,
        messages=int(state.messages),
        bytes=int(state.bytes),
        first_seq=int(state.first_seq),
        last_seq=int(state.last_seq),
        consumer_count=int(state.consumer_count),
    )


async def consumer_statuses(log: EventLog) -> list[ConsumerStatus]:
    """Every consumer of the stream, durable ones first.

    Raises:
        UnavailableError: NATS did not answer.
    """
    try:
        infos = await log.js.consumers_info(log.stream)
    except (nats.errors.Error, TimeoutError) as error:
        raise UnavailableError(f"cannot list consumers of {log.stream!r}: {error!r}") from error
    consumers = [
        ConsumerStatus(
            name=info.name,
            durable=bool(info.config.durable_name),
            num_pending=int(info.num_pending or 0),
            num_ack_pending=int(info.num_ack_pending or 0),
            num_redelivered=int(info.num_redelivered or 0),
            ack_floor=int(info.ack_floor.stream_seq if info.ack_floor else 0),
        )
        for info in infos
    ]
    return sorted(consumers, key=lambda c: (not c.durable, c.name))


def projection_statuses(connection: sqlite3.Connection, last_seq: int) -> list[ProjectionStatus]:
    """Tracked sequence and lag (``last_seq`` minus tracked) of every projection."""
    statuses = []
    for projection in default_projections():
        seq = tracked_seq(connection, projection.name)
        statuses.append(ProjectionStatus(projection.name, seq, max(0, last_seq - seq)))
    return statuses


async def platform_status(
    log: EventLog, connection: sqlite3.Connection, *, dead_letter_limit: int = 5
) -> PlatformStatus:
    """The stream, its consumers, projection lag and the last ``dead_letter_limit`` dead letters.

    Raises:
        UnavailableError: NATS did not answer.
    """
    stream = await stream_status(log)
    letters = dead_letters(connection)
    return PlatformStatus(
        stream=stream,
        consumers=await consumer_statuses(log),
        projections=projection_statuses(connection, stream.last_seq),
        dead_letter_count=len(letters),
        dead_letters=letters[-dead_letter_limit:] if dead_letter_limit > 0 else [],
    )
