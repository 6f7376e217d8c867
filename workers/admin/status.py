"""Platform status: the stream, its consumers, each projection's lag, and dead letters."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import nats.errors
import nats.js.errors

from memstream.domain.errors import InvalidInputError, NotFoundError, UnavailableError
from memstream.projections.ports import ReadModels
from memstream.projections.registry import INDEXER_PROJECTIONS, PROJECTIONS
from memstream.workers.leases import lease_bucket
from memstream.workers.log.durability import ServerSync, StreamCopy, missing_events
from memstream.workers.log.event_log import EventLog
from memstream.workers.log.log_position import check_copy


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
class CopyStatus:
    """One read-model copy projecting the stream (a data dir, host or database), as its durable
    consumers show it: how far the slowest has acknowledged, and how far behind that is."""

    copy_id: str
    consumers: list[str]
    ack_floor: int
    lag: int
    local: bool


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """One server holding the stream, as its leader sees it: a replica that is offline or not
    current (catching up, or refusing a damaged store) is named here."""

    server: str
    leader: bool
    current: bool
    offline: bool
    lag: int


@dataclass(frozen=True, slots=True)
class PlatformStatus:
    """Everything ``memstream status`` shows."""

    stream: StreamStatus
    consumers: list[ConsumerStatus]
    copies: list[CopyStatus]
    copy_id: str
    projections: list[ProjectionStatus]
    dead_letter_count: int
    dead_letters: list[dict[str, object]]
    # Where this copy stands on the log: a line naming the range when it is ahead of it.
    log_gap: str | None = None
    durability: list[ServerSync] = field(default_factory=list)
    replicas: list[ReplicaStatus] = field(default_factory=list)
    # Each monitored server's own copy of the stream (``MEMSTREAM_NATS_MONITOR_URL``).
    stream_copies: list[StreamCopy] = field(default_factory=list)

    @property
    def damaged_copies(self) -> list[tuple[str, str]]:
        """The servers whose copy of the stream misses events the others hold, with a line
        each."""
        return missing_events(self.stream_copies, self.stream.name)

    @property
    def problems(self) -> list[str]:
        """What is wrong, one line each (``status`` exits non-zero when there is any)."""
        found = [] if self.log_gap is None else [self.log_gap]
        found += [s.describe() for s in self.durability if s.durable is False]
        found += [
            f"stream replica {r.server} is {'offline' if r.offline else 'not current'}"
            f" ({r.lag} operations behind)"
            for r in self.replicas
            if r.offline or not r.current
        ]
        found += [line for _, line in self.damaged_copies]
        return found

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "problems": self.problems}


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


# The durable consumers of a read-model copy: ``<worker>-<copy id>``, or with the projections
# it runs when not all of them, ``<worker>-<copy id>-<name>[-<name>...]``, and ``-p<n>`` for
# one partition's (see projector_consumer).
_COPY_CONSUMER = re.compile(r"(?P<worker>[a-z]+)-(?P<copy>[0-9a-f]{12})(?:-[a-z_]+)*(?:-p[0-9]+)?")


def copy_of(consumer: str) -> str | None:
    """The read-model copy a durable consumer belongs to, if it is a copy's consumer."""
    match = _COPY_CONSUMER.fullmatch(consumer)
    return match["copy"] if match else None


def copy_statuses(
    consumers: list[ConsumerStatus], last_seq: int, local: str | None = None
) -> list[CopyStatus]:
    """Group the stream's durable consumers by read-model copy; ``local`` marks this one."""
    grouped: dict[str, list[ConsumerStatus]] = {}
    for consumer in consumers:
        copy = copy_of(consumer.name) if consumer.durable else None
        if copy is not None:
            grouped.setdefault(copy, []).append(consumer)
    copies = []
    for copy, members in sorted(grouped.items()):
        # A consumer with nothing left to deliver or acknowledge (a partition's without new
        # events) is as far as the stream, whatever its last event.
        floor = min(
            last_seq if not (c.num_pending or c.num_ack_pending) else c.ack_floor for c in members
        )
        copies.append(
            CopyStatus(
                copy,
                sorted(c.name for c in members),
                floor,
                max(0, last_seq - floor),
                copy == local,
            )
        )
    return copies


async def forget_copy(log: EventLog, copy: str, *, local: str | None = None) -> list[str]:
    """Delete the durable consumers of read-model copy ``copy`` (one that no longer exists);
    returns their names.

    Raises:
        InvalidInputError: ``copy`` is not a copy id, or is this data dir's own copy.
        NotFoundError: the stream has no consumer of that copy.
        UnavailableError: NATS did not answer.
    """
    if not isinstance(copy, str) or not re.fullmatch(r"[0-9a-f]{12}", copy):
        raise InvalidInputError(
            f"copy id {copy!r} is not a read-model copy id (12 hex digits, as status lists them)"
        )
    if copy == local:
        raise InvalidInputError(
            f"copy {copy} is this data dir's own read-model copy; forget another copy, "
            "or remove this one's database first"
        )
    names = [c.name for c in await consumer_statuses(log) if c.durable and copy_of(c.name) == copy]
    if not names:
        raise NotFoundError(f"stream {log.stream!r} has no consumer of read-model copy {copy}")
    for name in names:
        try:
            await log.js.delete_consumer(log.stream, name)
        except (nats.errors.Error, TimeoutError) as error:
            raise UnavailableError(f"cannot delete consumer {name!r}: {error!r}") from error
    await _forget_leases(log, {re.sub(r"-p[0-9]+$", "", name) for name in names})
    return names


async def _forget_leases(log: EventLog, groups: set[str]) -> None:
    """Delete the partition lease buckets of ``groups`` (projectors by partition), if any."""
    for group in sorted(groups):
        try:
            await log.js.delete_key_value(lease_bucket(log.stream, group))
        except nats.js.errors.NotFoundError:
            continue  # this group never ran by partition
        except (nats.errors.Error, TimeoutError) as error:
            raise UnavailableError(f"cannot delete the leases of {group!r}: {error!r}") from error


def projection_statuses(
    read_models: ReadModels,
    last_seq: int,
    profiles_last_seq: int | None = None,
    partition_ends: dict[int, int] | None = None,
) -> list[ProjectionStatus]:
    """Tracked sequence and lag (``last_seq`` minus tracked) of every projection; the indexer's
    sees Agent Memory events only, so its lag counts from ``profiles_last_seq`` (the last of
    them; ``last_seq`` when not given). A projection tracked by partition is as far as its
    partition furthest behind: one whose row reached its last event (``partition_ends``)
    counts as at ``last_seq``."""
    statuses = []
    for projection in PROJECTIONS:
        seq = read_models.tracked_seq(projection)
        partitions = read_models.tracked_partitions(projection) if partition_ends else {}
        if partitions and partition_ends is not None:
            seq = min(
                last_seq if row >= partition_ends.get(partition, 0) else row
                for partition, row in partitions.items()
            )
        last = last_seq
        if projection in INDEXER_PROJECTIONS and profiles_last_seq is not None:
            last = profiles_last_seq
        statuses.append(ProjectionStatus(projection, seq, max(0, last - seq)))
    return statuses


async def profiles_last_seq(log: EventLog) -> int:
    """The stream sequence of the last Agent Memory event (0: none)."""
    return await log.last_seq(f"{log.subject_prefix}.*.profile.*")


async def replica_statuses(log: EventLog) -> list[ReplicaStatus]:
    """The servers holding the stream (none for a stream on one server without a cluster).

    Raises:
        UnavailableError: NATS did not answer.
    """
    try:
        info = await log.js.stream_info(log.stream)
    except (nats.errors.Error, TimeoutError) as error:
        raise UnavailableError(f"cannot read stream {log.stream!r}: {error!r}") from error
    cluster = info.cluster
    if cluster is None or not cluster.leader:
        return []
    found = [ReplicaStatus(str(cluster.leader), True, True, False, 0)]
    for peer in cluster.replicas or []:
        found.append(
            ReplicaStatus(
                str(peer.name), False, bool(peer.current), bool(peer.offline), int(peer.lag or 0)
            )
        )
    return found


async def platform_status(
    log: EventLog,
    read_models: ReadModels,
    *,
    dead_letter_limit: int = 5,
    durability: Sequence[ServerSync] = (),
    stream_copies: Sequence[StreamCopy] = (),
) -> PlatformStatus:
    """The stream, its consumers, projection lag and the last ``dead_letter_limit`` dead
    letters; where the copy stands on the log, the servers' fsync policy (``durability``, as
    the caller could read it), the stream's replicas and the monitored servers' copies of it
    (``stream_copies``).

    Raises:
        UnavailableError: NATS did not answer.
    """
    stream = await stream_status(log)
    gap = await check_copy(log, read_models.marks())
    letters = read_models.dead_letters()
    consumers = await consumer_statuses(log)
    local = read_models.copy_id()
    return PlatformStatus(
        stream=stream,
        consumers=consumers,
        copies=copy_statuses(consumers, stream.last_seq, local),
        copy_id=local,
        projections=projection_statuses(
            read_models,
            stream.last_seq,
            await profiles_last_seq(log),
            await log.partition_ends(),
        ),
        dead_letter_count=len(letters),
        dead_letters=letters[-dead_letter_limit:] if dead_letter_limit > 0 else [],
        log_gap=None if gap is None else gap.describe(),
        durability=list(durability),
        replicas=await replica_statuses(log),
        stream_copies=list(stream_copies),
    )
