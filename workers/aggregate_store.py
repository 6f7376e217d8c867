"""Run domain commands against aggregates that live on the log.

The store keeps recently used aggregates in memory together with the stream sequence of their
last event. A command is decided on the cached aggregate and published with
``Nats-Expected-Last-Subject-Sequence``; when another writer got there first the aggregate is
fast-forwarded from its subject and the command decided again (bounded), so the common case costs
one publish round trip and a long session is never replayed per command.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from eventsourcing.domain import Aggregate

from memstream.domain.errors import ConcurrencyError, MemstreamError
from memstream.workers.codec import CommandMeta, decode_event, encode_event
from memstream.workers.event_log import EventLog, ExpectedSequenceMismatch, OutgoingMessage

logger = logging.getLogger(__name__)
A = TypeVar("A", bound=Aggregate)
# Conflicts are retried for this long (a writer that keeps losing to others in tight loops can
# wait for several of their bursts; measured up to ~4 s with 8 writers on one session here).
RETRY_SECONDS = 15.0
CACHE_SIZE = 256


@dataclass
class _Cached(Generic[A]):
    aggregate: A
    seq: int


@dataclass(frozen=True, slots=True)
class CommandResult:
    """Outcome of a command: the events it published (maybe none) and the log position."""

    events: Sequence[Aggregate.Event]
    seq: int


class AggregateStore(Generic[A]):
    """Load-decide-publish-apply for one aggregate class, with a per-subject cache and lock."""

    def __init__(
        self,
        log: EventLog,
        empty: Callable[[str], A],
        *,
        cache_size: int = CACHE_SIZE,
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        self.log = log
        self.retry_seconds = retry_seconds
        self._empty = empty
        self._cache: OrderedDict[str, _Cached[A]] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}
        self._cache_size = cache_size

    async def execute(
        self,
        subject: str,
        key: str,
        decide: Callable[[A], Sequence[Aggregate.Event]],
        meta: CommandMeta | None = None,
    ) -> CommandResult:
        """Decide events with ``decide(aggregate)`` and append them to ``subject`` atomically.

        ``key`` identifies the aggregate for :attr:`empty` (e.g. the session id). Domain errors
        raised by ``decide`` propagate unchanged and publish nothing.

        Raises:
            ConcurrencyError: the subject kept moving for ``retry_seconds``.
            UnavailableError: NATS is unreachable.
        """
        meta = meta or CommandMeta()
        lock = self._locks.setdefault(subject, asyncio.Lock())
        async with lock:
            deadline = asyncio.get_running_loop().time() + self.retry_seconds
            attempt = 0
            while asyncio.get_running_loop().time() < deadline or attempt < 3:
                attempt += 1
                cached = await self._load(subject, key)
                try:
                    events = list(decide(cached.aggregate))
                except MemstreamError:
                    # A refusal may come from a stale cache (another writer moved on).
                    if await self._caught_up(subject, cached):
                        continue
                    raise
                if not events:
                    if await self._caught_up(subject, cached):
                        continue  # a no-op decided on stale state: decide again
                    return CommandResult((), cached.seq)
                outgoing = [
                    OutgoingMessage(
                        *encode_event(event, meta, _msg_id(meta.command_id, i, len(events))),
                        msg_id=_msg_id(meta.command_id, i, len(events)),
                    )
                    for i, event in enumerate(events)
                ]
                try:
                    result = await self.log.publish(subject, outgoing, cached.seq)
                except ExpectedSequenceMismatch:
                    await self._fast_forward(subject, cached)
                    if attempt > 2:  # jitter, so that writers who lost together spread out
                        await asyncio.sleep(random.uniform(0, 0.0005 * 2 ** min(attempt, 5)))
                    continue
                except BaseException:
                    # Unknown outcome (timeout, disconnect): the cache may be stale; reload later.
                    self._cache.pop(subject, None)
                    raise
                if result.duplicate:
                    # An earlier attempt of this command is already in the log: read it back.
                    await self._fast_forward(subject, cached)
                    return CommandResult((), cached.seq)
                for event in events:
                    event.mutate(cached.aggregate)
                cached.seq = result.seq
                return CommandResult(events, result.seq)
        raise ConcurrencyError(
            f"{subject} changed under the command {attempt} times in "
            f"{self.retry_seconds:g} s; giving up"
        )

    async def get(self, subject: str, key: str) -> A:
        """The aggregate as of the log's current end (for decisions, not for reads)."""
        async with self._locks.setdefault(subject, asyncio.Lock()):
            cached = await self._load(subject, key)
            await self._fast_forward(subject, cached)
            return cached.aggregate

    async def _load(self, subject: str, key: str) -> _Cached[A]:
        cached = self._cache.get(subject)
        if cached is None:
            cached = _Cached(self._empty(key), 0)
            await self._fast_forward(subject, cached)
            self._cache[subject] = cached
            while len(self._cache) > self._cache_size:
                evicted, _ = self._cache.popitem(last=False)
                lock = self._locks.get(evicted)
                if lock is not None and not lock.locked():
                    del self._locks[evicted]
        else:
            self._cache.move_to_end(subject)
        return cached

    async def _caught_up(self, subject: str, cached: _Cached[A]) -> bool:
        """Fast-forward if the subject moved past the cache; True if it did."""
        if await self.log.last_seq(subject) <= cached.seq:
            return False
        await self._fast_forward(subject, cached)
        return True

    async def _fast_forward(self, subject: str, cached: _Cached[A]) -> None:
        async for entry in self.log.read_subject(subject, cached.seq):
            try:
                event = decode_event(entry.payload, entry.headers)
            except Exception:
                # Not an event of ours (the projector dead-letters it too): pass over it.
                logger.exception("skipping undecodable message %d on %s", entry.seq, subject)
            else:
                event.mutate(cached.aggregate)
            cached.seq = entry.seq


def _msg_id(command_id: str, index: int, count: int) -> str:
    return command_id if count == 1 else f"{command_id}:{index}"
