"""Partition leases in a NATS KV bucket: each partition of a worker group is held by at most
one live member, shared out evenly, and taken over within seconds when a member dies.

What ``memstream worker projector --partitions`` shares a partitioned stream out with (see
:mod:`memstream.workers.partitioned`). One bucket per group, its entries expiring ``ttl``
seconds after their last write:

- ``member.<id>``: a live member, rewritten every ``ttl / 3`` seconds;
- ``p<n>``: partition ``n``'s lease, holding its owner's id, renewed with a compare-and-set on
  its revision (a member whose renewal fails lost the lease: it was taken over after expiring).

Every tick a member renews what it holds, counts the live members, and moves towards its fair
share (``ceil(partitions / members)``): above it, it releases leases (highest partitions
first); below it, it creates leases of partitions nobody holds. A member that dies stops
renewing; its entries expire after ``ttl`` and the others take its partitions at their next
tick. A member that stops cleanly deletes its entries at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable
from typing import Final

import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig
from nats.js.kv import KeyValue

from memstream.domain.errors import InvalidInputError
from memstream.domain.limits import MAX_PARTITIONS

logger = logging.getLogger(__name__)

DEFAULT_TTL: Final = 6.0
_LOST = (nats.js.errors.KeyWrongLastSequenceError, nats.js.errors.KeyNotFoundError)


def lease_bucket(stream: str, group: str) -> str:
    """The KV bucket of a stream's worker group (``group``: e.g. a projector's durable name;
    characters other than letters, digits, ``-`` and ``_`` become ``_``)."""
    name = f"memstream_leases_{stream}_{group}"
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


class PartitionLeases:
    """One member's view of its group's partition leases (see the module docstring).

    ``on_change(owned)`` is called with the new set of partitions each time it changes.
    """

    def __init__(
        self,
        js: JetStreamContext,
        bucket: str,
        member: str,
        partitions: int,
        *,
        ttl: float = DEFAULT_TTL,
        on_change: Callable[[frozenset[int]], None] | None = None,
    ) -> None:
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidInputError(
                f"partitions is {partitions}; it must be between 1 and {MAX_PARTITIONS}"
            )
        if not 0.5 <= ttl <= 300:
            raise InvalidInputError(f"lease ttl is {ttl} s; it must be between 0.5 and 300 s")
        self.js = js
        self.bucket = bucket
        self.member = "".join(c if c.isalnum() or c in "-_" else "_" for c in member)
        self.partitions = partitions
        self.ttl = ttl
        self.on_change = on_change
        self._revisions: dict[int, int] = {}  # partition -> revision of our lease entry
        self._kv: KeyValue | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def owned(self) -> frozenset[int]:
        return frozenset(self._revisions)

    async def start(self) -> None:
        """Open (or create) the bucket, take a first share and keep renewing in the
        background."""
        try:
            self._kv = await self.js.key_value(self.bucket)
        except nats.js.errors.BucketNotFoundError:
            self._kv = await self.js.create_key_value(
                KeyValueConfig(bucket=self.bucket, history=1, ttl=self.ttl)
            )
        await self.tick()
        self._task = asyncio.create_task(self._run(), name=f"leases-{self.member}")

    async def stop(self, *, release: bool = True) -> None:
        """Stop renewing; with ``release`` (a clean stop) give every lease back at once."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if release and self._kv is not None:
            for partition, revision in sorted(self._revisions.items()):
                await self._release(partition, revision)
            with contextlib.suppress(Exception):
                await self._kv.delete(f"member.{self.member}")
        self._set({})

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                await self.tick()
            except (nats.errors.Error, TimeoutError) as error:
                logger.warning("partition leases of %s: %r; retrying", self.member, error)

    async def tick(self) -> None:
        """Renew, then move towards the fair share."""
        kv = self._kv
        assert kv is not None, "start() first"
        await kv.put(f"member.{self.member}", b"")
        revisions = dict(self._revisions)
        for partition, revision in sorted(self._revisions.items()):
            try:
                revisions[partition] = await kv.update(
                    f"p{partition}", self.member.encode(), last=revision
                )
            except _LOST:
                revisions.pop(partition)
                logger.warning("%s lost the lease of partition %d", self.member, partition)
        members = 0
        with contextlib.suppress(nats.js.errors.NoKeysError):
            members = sum(1 for key in await kv.keys() if key.startswith("member."))
        share = math.ceil(self.partitions / max(members, 1))
        for partition in sorted(revisions, reverse=True)[: max(len(revisions) - share, 0)]:
            await self._release(partition, revisions.pop(partition))
        for partition in range(self.partitions):
            if len(revisions) >= share:
                break
            if partition in revisions:
                continue
            try:
                revisions[partition] = await kv.create(f"p{partition}", self.member.encode())
            except nats.js.errors.KeyWrongLastSequenceError:
                continue  # held by another member
        self._set(revisions)

    async def _release(self, partition: int, revision: int) -> None:
        assert self._kv is not None
        with contextlib.suppress(*_LOST):
            await self._kv.delete(f"p{partition}", last=revision)

    def _set(self, revisions: dict[int, int]) -> None:
        before = self.owned
        self._revisions = revisions
        if self.owned != before and self.on_change is not None:
            self.on_change(self.owned)
