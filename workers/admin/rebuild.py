"""Rebuild read models from the log, and verify a live read model against a scratch rebuild."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

import nats.js.errors
from nats.js import api

from memstream.domain.errors import ReadModelAheadError, ReadModelDamagedError, UnavailableError
from memstream.projections.ports import (
    Difference,
    ProjectorStats,
    ReadModelCopy,
    ReadModelStore,
    TextEncoder,
)
from memstream.projections.registry import (
    MODEL_FREE_PROJECTIONS,
    PARTITIONABLE,
    PROJECTIONS,
    PROJECTOR_PROJECTIONS,
    select_projections,
)
from memstream.projections.tracking import TrackingRows
from memstream.workers.dead_letters import forget_erased_dead_letters
from memstream.workers.log.event_log import TRANSIENT_ERRORS, EventLog, LogEntry
from memstream.workers.log.log_position import check_copy
from memstream.workers.position import NUDGE_SECONDS
from memstream.workers.projector import consumed_subjects, projector_consumer
from memstream.workers.pull import Puller, stream_sequence

Progress = Callable[[int, int], None]
# How long a read of the log waits before it asks again, while a failover leaves the stream or
# its reading consumer without a leader.
REREAD_PAUSE = 0.25


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """Outcome of comparing a live read model with a scratch rebuild at the same sequence;
    ``difference`` says where they first differ when the checksums do."""

    projection: str
    seq: int
    live: str
    rebuilt: str
    difference: Difference | None = None

    @property
    def ok(self) -> bool:
        return self.live == self.rebuilt


async def catch_up(
    log: EventLog,
    store: ReadModelStore,
    *,
    until: int,
    progress: Progress | None = None,
    batch: int = 1000,
) -> int:
    """Apply the log to ``store`` from its tracked position up to sequence ``until``.

    Uses an ephemeral consumer, so it can run beside a live projector: every event is applied
    once, by whichever commits first. Returns the sequence reached. On a partitioned stream it
    reads every partition, so it moves every partition's rows (see :class:`TrackingRows`).
    """
    count = await log.partitions()
    if count and not store.rows.count:
        store.track(TrackingRows(count, frozenset(range(count))))
    start = min(store.positions().values()) + 1
    if start > until:
        return start - 1
    puller = await _reader(log, start, time.monotonic() + log.timeout)
    stats = ProjectorStats()
    reached = start - 1
    # A failover may leave the reading consumer without a leader for a moment (503s): read on
    # from a new one, for as long as a read may take, before the log counts as unavailable.
    give_up_at = time.monotonic() + log.timeout
    try:
        while reached < until:
            try:
                msgs = await puller.fetch(batch, log.timeout)
            except TimeoutError as error:
                raise UnavailableError(f"log stopped at {reached} before {until}") from error
            except TRANSIENT_ERRORS as error:
                if time.monotonic() >= give_up_at:
                    raise UnavailableError(
                        f"cannot read stream {log.stream!r} from sequence {reached + 1}: {error!r}"
                    ) from error
                await puller.close()
                await asyncio.sleep(REREAD_PAUSE)
                puller = await _reader(log, reached + 1, give_up_at)
                continue
            give_up_at = time.monotonic() + log.timeout
            delivered = [(stream_sequence(m), m) for m in msgs]
            entries = [
                LogEntry(seq, m.subject, m.data, dict(m.headers or {}))
                for seq, m in delivered
                if seq <= until
            ]
            if entries:
                await asyncio.to_thread(_apply_like_projector, store, entries, stats)
                await forget_erased_dead_letters(log, store, entries)
            reached = max(reached, delivered[-1][0]) if delivered else reached
            if progress:
                progress(min(reached, until), until)
    finally:
        await puller.close()
    return min(reached, until)


async def _reader(log: EventLog, start: int, give_up_at: float | None = None) -> Puller:
    """An ephemeral consumer of the whole stream from ``start`` (made again while the stream
    has no leader, until ``give_up_at``).

    Raises:
        UnavailableError: it could not be made.
    """
    config = api.ConsumerConfig(
        deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=start,
        ack_policy=api.AckPolicy.NONE,
        filter_subject=f"{log.subject_prefix}.>",
        inactive_threshold=60.0,
        mem_storage=True,
    )
    while True:
        try:
            puller, _ = await Puller.create(log.client, log.stream, config)
            return puller
        except TRANSIENT_ERRORS as error:  # e.g. a cluster electing a new leader
            if give_up_at is None or time.monotonic() >= give_up_at:
                raise UnavailableError(
                    f"cannot read stream {log.stream!r} from sequence {start}: {error!r}"
                ) from error
            await asyncio.sleep(REREAD_PAUSE)


def repair(copy: ReadModelCopy) -> str | None:
    """Check the read model whole (however large it is) and move it aside if it is damaged or
    foreign; returns the name it was moved to (``None``: intact).

    Raises:
        ReadModelDamagedError: it is damaged and cannot be moved aside.
        UnavailableError: it cannot be opened.
    """
    return copy.repair()


async def rebuild(
    log: EventLog,
    copy: ReadModelCopy,
    names: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
    encoder: TextEncoder | None = None,
) -> int:
    """Drop the named projections in ``copy`` and replay the log into them (``encoder``
    embeds texts again for ``vectors``).

    A projector running elsewhere on the same copy notices the rewind and re-binds its
    consumer; both then skip what the other committed. A damaged or foreign copy (found at
    open, or by the rebuild itself) is moved aside and every projection rebuilt into a fresh
    one. Returns the sequence reached.
    """
    every = _every(encoder)
    selected = select_projections(names, every)
    store = copy.store(selected, encoder=encoder)
    fresh = store.fresh
    if fresh and len(selected) < len(every):
        store.close()
        store = copy.store(every, encoder=encoder)
    try:
        while True:
            try:
                for projection in store.projections:
                    store.drop(projection)
                return await catch_up(
                    log, store, until=await log.stream_last_seq(), progress=progress
                )
            except ReadModelDamagedError as error:
                if fresh or not store.renewable:
                    raise  # damage in a fresh copy is no old damage: do not loop
                store.renew(error.reason)  # moves it aside and opens a fresh one
                fresh = True
                if len(store.projections) < len(every):
                    store.close()
                    # Every projection is rebuilt into the fresh one.
                    store = copy.store(every, encoder=encoder)
    finally:
        store.close()


async def verify(
    log: EventLog,
    copy: ReadModelCopy,
    names: Sequence[str] | None = None,
    *,
    as_of: int | None = None,
    progress: Progress | None = None,
    wait_timeout: float = 30.0,
    encoder: TextEncoder | None = None,
) -> list[VerifyResult]:
    """Rebuild into a scratch store and compare checksums with the live one.

    ``names`` default: the projector's projections, and the others (but vectors without an
    ``encoder``) that a worker projects for this copy (it has their durable consumer: an
    analytics worker may never have run for it).
    Without ``as_of``, compares at the stream's end (waiting for the live projector to reach it).
    A live copy ahead of the log raises :class:`ReadModelAheadError`: it holds what the log
    lost, whatever its checksums say.
    With ``as_of``, only builds the scratch state at that sequence and reports its checksum
    (``live`` is the live checksum, comparable only when the live model is at that sequence).
    """
    every = _every(encoder)
    live = copy.store(select_projections(names, every), repair=False, encoder=encoder)
    try:
        gap = await check_copy(log, live.marks())
        if gap is not None:
            raise ReadModelAheadError(gap.refusal(copy.location))
        if names:
            selected = list(live.projections)
        else:  # what this copy maintains: an analytics worker may never have run for it
            selected = [
                p
                for p in every
                if p in PROJECTOR_PROJECTIONS or await _consumed(log, live.copy_id(), p)
            ]
        target = as_of if as_of is not None else await log.stream_last_seq()
        if as_of is None:
            # A worker that consumes part of the stream (the indexer: Agent Memory events)
            # reaches the last event of that part, not the stream's.
            reach = dict.fromkeys(selected, target)
            for p in selected:
                subjects = consumed_subjects(log.subject_prefix, (p,))
                if subjects != f"{log.subject_prefix}.>":
                    reach[p] = min(target, await log.last_seq(subjects))
            await _live_reaches(log, copy, live, reach, wait_timeout)
        scratch = copy.scratch(selected, encoder=encoder)
        try:
            await catch_up(log, scratch, until=target, progress=progress)
            return [_compare(live, scratch, p, target) for p in selected]
        finally:
            scratch.close()
    finally:
        live.close()


async def _live_reaches(
    log: EventLog, copy: ReadModelCopy, live: ReadModelStore, reach: dict[str, int], wait: float
) -> None:
    """Wait (at most ``wait`` seconds) until each projection of ``live`` reached its sequence
    in ``reach``; a projection projected by partition (see
    :class:`~memstream.projections.tracking.TrackingRows`) when each partition reached its last
    event up to there.

    Raises:
        UnavailableError: not reached in time.
    """
    ends = await log.partition_ends()
    targets = {
        p: {k: min(end, seq) for k, end in ends.items() if end}
        for p, seq in reach.items()
        if ends and p in PARTITIONABLE
    }
    reader = copy.reader(on_damage=_raise) if targets else None

    def behind(projection: str, seq: int) -> bool:
        if reader is not None and projection in targets:
            positions = reader.tracked_partitions(projection)
            if positions:
                return any(positions.get(k, 0) < t for k, t in targets[projection].items())
        return live.positions()[projection] < seq

    # Lingering projectors (the analytics worker gathers a second's events) commit at once
    # when a reader says what it waits for, wherever they run.
    wanted = max(reach.values(), default=0)
    loop = asyncio.get_running_loop()
    try:
        deadline = loop.time() + wait
        nudged = -math.inf
        while any(behind(p, seq) for p, seq in reach.items()):
            now = loop.time()
            if now > deadline:
                raise UnavailableError(f"live read model did not reach {wanted}")
            if now - nudged >= NUDGE_SECONDS:
                nudged = now
                await log.nudge(wanted)
            await asyncio.sleep(0.01)
    finally:
        if reader is not None:
            reader.close()


def _raise(error: ReadModelDamagedError) -> NoReturn:
    raise error


async def _consumed(log: EventLog, copy_id: str, projection: str) -> bool:
    """Whether ``projection`` of copy ``copy_id`` has the durable consumer of its worker."""
    try:
        await log.js.consumer_info(log.stream, projector_consumer(copy_id, (projection,)))
    except nats.js.errors.NotFoundError:
        return False
    except TRANSIENT_ERRORS as error:
        raise UnavailableError(f"cannot read the consumers of {log.stream!r}: {error!r}") from error
    return True


def _every(encoder: TextEncoder | None) -> tuple[str, ...]:
    """What "every projection" is: without an embedding model, all but ``vectors``."""
    return PROJECTIONS if encoder is not None else MODEL_FREE_PROJECTIONS


def _compare(
    live: ReadModelStore, scratch: ReadModelStore, projection: str, seq: int
) -> VerifyResult:
    live_sum, rebuilt_sum = live.checksum(projection), scratch.checksum(projection)
    difference = None
    if live_sum != rebuilt_sum:
        difference = live.first_difference(scratch, projection)
    return VerifyResult(projection, seq, live_sum, rebuilt_sum, difference)


def _apply_like_projector(
    store: ReadModelStore, entries: Sequence[LogEntry], stats: ProjectorStats
) -> None:
    """Apply a batch retrying failing events until they are dead-lettered, as the live projector
    does, so that a rebuild gets past the same poison events to the same read model."""
    while True:
        attempts = sum(stats.attempts.values())
        try:
            store.apply(entries, stats)
        except Exception:
            if sum(stats.attempts.values()) == attempts:
                raise  # not an event's failure (e.g. the database is unavailable)
        else:
            return
