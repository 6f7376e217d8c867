"""A projector of a partitioned stream, shared out between processes by partition leases.

``memstream worker projector --partitions`` runs one: it joins the group of its read-model
copy's projectors (a NATS KV bucket of leases, see
:class:`~memstream.workers.leases.PartitionLeases`) and runs, in this process, one
:class:`~memstream.workers.projector.ProjectorWorker` per partition it holds the lease of, each
with its durable consumer (``projector-<copy>-p<n>``, filtered on ``<prefix>.*.*.*.<n>``) and its
tracking rows (``<projection>@<n>``, see :class:`~memstream.projections.tracking.TrackingRows`).
When a member dies its leases expire and the others take its partitions over; each resumes
from the partition's tracking rows.

Leases keep two projectors from doing the same work; they are not what keeps the read model
right. A partition's batch locks its tracking rows and skips what they say is applied, in the
transaction that writes the rows (on both backends), so a projector that still runs a
partition it lost (cut off from NATS) applies nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Sequence
from typing import Any

from memstream.domain.errors import InvalidInputError, MemstreamError
from memstream.projections.ports import ReadModelCopy
from memstream.projections.registry import PARTITIONABLE
from memstream.projections.tracking import TrackingRows
from memstream.workers.leases import DEFAULT_TTL, PartitionLeases, lease_bucket
from memstream.workers.log.event_log import EventLog
from memstream.workers.position import Demand
from memstream.workers.projector import ProjectorWorker, projector_consumer

logger = logging.getLogger(__name__)

# How soon a partition whose projector could not start (its previous owner still holds its
# projector lock, e.g. it is finishing a batch) is tried again.
RETRY_SECONDS = 1.0


def default_member() -> str:
    """This process's name in its group: host, pid and a random part."""
    return f"{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class PartitionedProjector:
    """The projectors of the partitions this process holds the leases of (see the module
    docstring). ``options`` go to each :class:`ProjectorWorker`."""

    def __init__(
        self,
        log: EventLog,
        copy: ReadModelCopy,
        projections: Sequence[str],
        *,
        member: str | None = None,
        ttl: float = DEFAULT_TTL,
        **options: Any,
    ) -> None:
        unfit = [p for p in projections if p not in PARTITIONABLE]
        if unfit:
            raise InvalidInputError(
                f"projections {', '.join(unfit)} cannot be projected by partition (only "
                f"{', '.join(PARTITIONABLE)}): run them in a worker without --partitions"
            )
        self.log = log
        self.copy = copy
        self.projections = tuple(projections)
        self.member = member or default_member()
        self.ttl = ttl
        self.options = options
        self.workers: dict[int, ProjectorWorker] = {}
        self.leases: PartitionLeases | None = None
        self.count = 0
        self._wanted: frozenset[int] = frozenset()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def owned(self) -> frozenset[int]:
        """The partitions projected here now."""
        return frozenset(self.workers)

    async def start(self) -> None:
        """Join the group and start projecting this member's share.

        Raises:
            InvalidInputError: the stream has no partitions.
        """
        self.count = await self.log.partitions()
        if not self.count:
            raise InvalidInputError(
                f"stream {self.log.stream!r} has no partitions: --partitions needs a stream "
                "created with MEMSTREAM_STREAM_PARTITIONS (or memstream --stream-partitions)"
            )
        group = projector_consumer(self.copy_id(), self.projections)
        self.leases = PartitionLeases(
            self.log.js,
            lease_bucket(self.log.stream, group),
            self.member,
            self.count,
            ttl=self.ttl,
            on_change=self._on_change,
        )
        self._task = asyncio.create_task(self._follow(), name=f"partitions-{self.member}")
        await self.leases.start()

    def copy_id(self) -> str:
        reader = self.copy.reader(on_damage=_raise)
        try:
            return reader.copy_id()
        finally:
            reader.close()

    def _on_change(self, owned: frozenset[int]) -> None:
        logger.info(
            "projector %s: partitions %s of %d",
            self.member,
            ",".join(map(str, sorted(owned))) or "none",
            self.count,
        )
        self._wanted = owned
        self._changed.set()

    async def _follow(self) -> None:
        """Start and stop partitions' projectors as the leases change."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            try:
                retry = await self._reconcile()
            except asyncio.CancelledError:
                raise
            except Exception:  # e.g. the read model unreachable: try again, never give up
                logger.exception("projector %s: could not follow its partitions", self.member)
                retry = True
            if retry:
                loop = asyncio.get_running_loop()
                loop.call_later(RETRY_SECONDS, self._changed.set)

    async def _reconcile(self) -> bool:
        """Make the projectors running here those of the partitions held; True when one could
        not start yet."""
        for partition in sorted(set(self.workers) - self._wanted):
            worker = self.workers.pop(partition)
            await worker.close()  # commits the batch in hand, gives up the locks
        retry = False
        for partition in sorted(self._wanted - set(self.workers)):
            options = dict(self.options)
            if options.get("demand") is not None:
                # Its own: what readers await of the other partitions does not press it.
                options["demand"] = Demand()
            try:
                worker = ProjectorWorker.open(
                    self.log,
                    self.copy,
                    self.projections,
                    rows=TrackingRows(self.count, frozenset({partition})),
                    **options,
                )
            except MemstreamError as error:  # its last owner still finishes: again soon
                logger.info("projector %s: partition %d: %s", self.member, partition, error)
                retry = True
                continue
            worker.start()
            self.workers[partition] = worker
        return retry

    async def stop(self) -> None:
        """Stop every partition's projector (each commits the batch in hand), then give the
        leases back at once (the others take the partitions at their next tick)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for partition in sorted(self.workers):
            await self.workers.pop(partition).close()
        if self.leases is not None:
            await self.leases.stop(release=True)


def _raise(error: Exception) -> Any:
    raise error
