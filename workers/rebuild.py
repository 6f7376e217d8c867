"""Rebuild read models from the log, and verify a live read model against a scratch rebuild."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nats.js import api

from memstream.domain.errors import InvalidInputError, UnavailableError
from memstream.projections.sqlite.checksum import Difference, checksum, first_difference
from memstream.projections.sqlite.damage import is_damage
from memstream.projections.sqlite.database import (
    drop_projection,
    open_database,
    replace_damaged,
    tracked_seq,
)
from memstream.workers.event_log import EventLog, LogEntry
from memstream.workers.projector import Projection, ProjectorStats, apply_batch, default_projections
from memstream.workers.pull import Puller, stream_sequence

Progress = Callable[[int, int], None]


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
    connection: sqlite3.Connection,
    projections: Sequence[Projection],
    *,
    until: int,
    progress: Progress | None = None,
    batch: int = 1000,
) -> int:
    """Apply the log to ``connection`` from its tracked position up to sequence ``until``.

    Uses an ephemeral consumer, so it can run beside a live projector: every event is applied
    once, by whichever commits first. Returns the sequence reached.
    """
    start = min(tracked_seq(connection, p.name) for p in projections) + 1
    if start > until:
        return start - 1
    config = api.ConsumerConfig(
        deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=start,
        ack_policy=api.AckPolicy.NONE,
        filter_subject=f"{log.subject_prefix}.>",
        inactive_threshold=60.0,
        mem_storage=True,
    )
    puller, _ = await Puller.create(log.client, log.stream, config)
    stats = ProjectorStats()
    reached = start - 1
    try:
        while reached < until:
            try:
                msgs = await puller.fetch(batch, log.timeout)
            except TimeoutError as error:
                raise UnavailableError(f"log stopped at {reached} before {until}") from error
            delivered = [(stream_sequence(m), m) for m in msgs]
            entries = [
                LogEntry(seq, m.subject, m.data, dict(m.headers or {}))
                for seq, m in delivered
                if seq <= until
            ]
            if entries:
                await asyncio.to_thread(
                    _apply_like_projector, connection, projections, entries, stats
                )
            reached = max(reached, delivered[-1][0]) if delivered else reached
            if progress:
                progress(min(reached, until), until)
    finally:
        await puller.close()
    return min(reached, until)


def repair(database: Path) -> Path | None:
    """Check the read model whole (``PRAGMA quick_check``, however large it is) and move it
    aside if it is damaged or foreign; returns the name it was moved to (``None``: intact).

    Raises:
        ReadModelDamagedError: it is damaged and cannot be moved aside.
        UnavailableError: it cannot be opened.
    """
    connection = open_database(database, repair=True, quick_check_limit=sys.maxsize)
    connection.close()
    return connection.replaced


async def rebuild(
    log: EventLog,
    database: Path,
    names: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
) -> int:
    """Drop the named projections in ``database`` and replay the log into them.

    A projector running elsewhere on the same database notices the rewind and re-binds its
    consumer; both then skip what the other committed. A damaged or foreign file (found at
    open, or by the rebuild itself) is moved aside and every projection rebuilt into a fresh
    one. Returns the sequence reached.
    """
    projections = _select(names)
    connection = open_database(database, repair=True)
    fresh = connection.replaced is not None
    if fresh:
        projections = default_projections()
    try:
        while True:
            try:
                for projection in projections:
                    drop_projection(connection, projection.name)
                return await catch_up(
                    log,
                    connection,
                    projections,
                    until=await log.stream_last_seq(),
                    progress=progress,
                )
            except sqlite3.DatabaseError as error:
                if fresh or not is_damage(error):
                    raise  # damage in a fresh file is no old damage: do not loop
                connection.close()
                connection = replace_damaged(database, str(error), connection.identity)
                fresh = True
                projections = default_projections()
    finally:
        connection.close()


async def verify(
    log: EventLog,
    database: Path,
    names: Sequence[str] | None = None,
    *,
    as_of: int | None = None,
    progress: Progress | None = None,
    wait_timeout: float = 30.0,
) -> list[VerifyResult]:
    """Rebuild into a scratch database and compare checksums with the live one.

    Without ``as_of``, compares at the stream's end (waiting for the live projector to reach it).
    With ``as_of``, only builds the scratch state at that sequence and reports its checksum
    (``live`` is the live checksum, comparable only when the live model is at that sequence).
    """
    projections = _select(names)
    live = open_database(database)
    try:
        target = as_of if as_of is not None else await log.stream_last_seq()
        if as_of is None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + wait_timeout
            while min(tracked_seq(live, p.name) for p in projections) < target:
                if loop.time() > deadline:
                    raise UnavailableError(f"live read model did not reach {target}")
                await asyncio.sleep(0.05)
        with tempfile.TemporaryDirectory(prefix="memstream-verify-") as scratch_dir:
            scratch = open_database(Path(scratch_dir) / "scratch.db")
            try:
                await catch_up(log, scratch, projections, until=target, progress=progress)
                return [_compare(live, scratch, p.name, target) for p in projections]
            finally:
                scratch.close()
    finally:
        live.close()


def _compare(
    live: sqlite3.Connection, scratch: sqlite3.Connection, projection: str, seq: int
) -> VerifyResult:
    live_sum, rebuilt_sum = checksum(live, projection), checksum(scratch, projection)
    difference = None
    if live_sum != rebuilt_sum:
        difference = first_difference(live, scratch, projection)
    return VerifyResult(projection, seq, live_sum, rebuilt_sum, difference)


def _apply_like_projector(
    connection: sqlite3.Connection,
    projections: Sequence[Projection],
    entries: Sequence[LogEntry],
    stats: ProjectorStats,
) -> None:
    """Apply a batch retrying failing events until they are dead-lettered, as the live projector
    does, so that a rebuild gets past the same poison events to the same read model."""
    while True:
        attempts = sum(stats.attempts.values())
        try:
            apply_batch(connection, projections, entries, stats)
        except Exception:
            if sum(stats.attempts.values()) == attempts:
                raise  # not an event's failure (e.g. the database is unavailable)
        else:
            return


def _select(names: Sequence[str] | None) -> list[Projection]:
    available = {p.name: p for p in default_projections()}
    if not names:
        return list(available.values())
    unknown = [n for n in names if n not in available]
    if unknown:
        raise InvalidInputError(
            f"unknown projection {unknown[0]!r}; known: {', '.join(sorted(available))}"
        )
    return [available[n] for n in names]
