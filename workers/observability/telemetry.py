"""Prometheus metrics of this process (``--metrics-port``; ``prometheus-client``).

One :class:`Telemetry` per process, made at first use (nothing at import): command latency and
conflicts are recorded where commands run; the workers' figures are read from their own
counters when Prometheus scrapes (:class:`WorkerCollector`), so a batch costs nothing more
than a clock reading. A projector's lag is the log's last sequence minus its position, the last
sequence asked of the stream once a second while metrics are served (the indexer's counts from
the last Agent Memory event, as ``memstream status`` does).

Metrics (all prefixed ``memstream_``): ``events_applied_total``, ``events_skipped_total``,
``batches_total``, ``batch_failures_total``, ``dead_letters_total``,
``projection_position``, ``projection_lag_events`` (per projection), ``batch_seconds``
(histogram), ``extractions_total``, ``extraction_failures_total``, ``command_seconds``
(histogram, by aggregate kind) and ``command_conflicts_total`` (a write that lost a race
and decided again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from memstream.domain.errors import InvalidInputError
from memstream.projections.ports import BATCH_BUCKETS
from memstream.projections.registry import INDEXER_PROJECTIONS
from memstream.workers.observability.metrics_hooks import hooks

if TYPE_CHECKING:
    from memstream.workers.extractor import ExtractorWorker
    from memstream.workers.projector import ProjectorWorker

logger = logging.getLogger(__name__)
# How often a served process asks the log for its last sequence (for the lag).
LAG_INTERVAL = 1.0
COMMAND_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)

_lock = threading.Lock()
_telemetry: Telemetry | None = None


def telemetry() -> Telemetry:
    """This process's telemetry (made at the first call)."""
    global _telemetry
    if _telemetry is None:
        with _lock:
            if _telemetry is None:
                _telemetry = Telemetry()
    return _telemetry


class Telemetry:
    """The registry and the metrics recorded where things happen."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.command_seconds = Histogram(
            "memstream_command_seconds",
            "Time to decide and append a command's events to the log, by aggregate kind.",
            ["kind"],
            buckets=COMMAND_BUCKETS,
            registry=self.registry,
        )
        self.command_conflicts = Counter(
            "memstream_command_conflicts",
            "Commands that lost a race for their subject and were decided again.",
            registry=self.registry,
        )
        self.workers = WorkerCollector()
        self.registry.register(self.workers)
        self.served: tuple[str, int] | None = None
        self._kinds: dict[str, Any] = {}
        hooks.observer = self

    def command(self, kind: str, seconds: float) -> None:
        child = self._kinds.get(kind)
        if child is None:
            child = self._kinds[kind] = self.command_seconds.labels(kind)
        child.observe(seconds)

    def conflict(self) -> None:
        self.command_conflicts.inc()

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` over HTTP on ``host:port`` (0: any free port) in a daemon
        thread; the port it listens on.

        Raises:
            InvalidInputError: the port cannot be bound.
        """
        if not 0 <= port <= 65535:
            raise InvalidInputError(f"--metrics-port is {port}; it must be 0 to 65535")
        try:
            server, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as error:
            raise InvalidInputError(
                f"--metrics-port {port}: cannot listen on {host}:{port} ({error.strerror})"
            ) from None
        bound = int(server.server_address[1])
        self.served = (host, bound)
        logger.info("metrics on http://%s:%d/metrics", host, bound)
        return bound


class WorkerCollector(Collector):
    """The figures of this process's workers, read at each scrape."""

    def __init__(self) -> None:
        self._sources: list[Callable[[], Iterable[Any]]] = []
        self._ends: weakref.WeakKeyDictionary[Any, tuple[int, int]] = weakref.WeakKeyDictionary()

    def watch(self, source: Callable[[], Iterable[Any]]) -> None:
        """Report the workers ``source()`` gives at each scrape (``None`` ones are skipped): a
        client's projector, indexer and extractor, say, whichever instances run then."""
        self._sources.append(source)

    def _workers(self) -> tuple[list[ProjectorWorker], list[ExtractorWorker]]:
        from memstream.workers.extractor import ExtractorWorker
        from memstream.workers.projector import ProjectorWorker

        projectors: list[ProjectorWorker] = []
        extractors: list[ExtractorWorker] = []
        for source in self._sources:
            for worker in source():
                if isinstance(worker, ProjectorWorker):
                    projectors.append(worker)
                elif isinstance(worker, ExtractorWorker):
                    extractors.append(worker)
        return projectors, extractors

    def describe(self) -> Iterator[Any]:
        return iter(())  # (the families depend on the workers watched)

    def collect(self) -> Iterator[Any]:
        counters = {
            name: CounterMetricFamily(f"memstream_{name}", text, labels=["consumer", "projections"])
            for name, text in (
                (
                    "events_applied",
                    "Events applied to the read models (by at least one projection).",
                ),
                ("events_skipped", "Events delivered again and skipped (already applied)."),
                ("batches", "Batches committed."),
                ("batch_failures", "Batches that failed and were retried."),
                ("dead_letters", "Events recorded as dead letters (one per projection)."),
            )
        }
        position = GaugeMetricFamily(
            "memstream_projection_position",
            "The log sequence each projection has applied.",
            labels=["projection"],
        )
        lag = GaugeMetricFamily(
            "memstream_projection_lag_events",
            "Log sequences behind the log's end (the indexer: behind its last memory event).",
            labels=["projection"],
        )
        seconds = HistogramMetricFamily(
            "memstream_batch_seconds",
            "Time to apply and commit a batch.",
            labels=["consumer", "projections"],
        )
        projectors, extractors = self._workers()
        for worker in projectors:
            stats, consumer = worker.stats, worker.durable
            names = ",".join(worker.store.projections)
            for name, value in (
                ("events_applied", stats.applied),
                ("events_skipped", stats.skipped),
                ("batches", stats.batches),
                ("batch_failures", stats.transient_failures),
                ("dead_letters", stats.dead_lettered),
            ):
                counters[name].add_metric([consumer, names], value)
            committed = worker.committed
            last, memory_last = self._ends.get(worker, (committed, committed))
            for projection in worker.store.projections:
                end = memory_last if projection in INDEXER_PROJECTIONS else last
                position.add_metric([projection], committed)
                lag.add_metric([projection], max(0, end - committed))
            cumulative, buckets = 0, []
            for bound, count in zip(BATCH_BUCKETS, stats.batch_buckets, strict=False):
                cumulative += count
                buckets.append((_bound(bound), cumulative))
            buckets.append(("+Inf", stats.timed_batches))
            seconds.add_metric([consumer, names], buckets, stats.batch_seconds)
        yield from counters.values()
        yield from (position, lag, seconds)
        extracted = CounterMetricFamily(
            "memstream_extractions", "Sources whose memories were extracted.", labels=["consumer"]
        )
        failed = CounterMetricFamily(
            "memstream_extraction_failures", "Extractions that failed.", labels=["consumer"]
        )
        for extractor in extractors:
            extracted.add_metric([extractor.durable], extractor.extracted)
            failed.add_metric([extractor.durable], extractor.failed)
        yield from (extracted, failed)

    async def follow_ends(self, interval: float = LAG_INTERVAL) -> None:
        """Ask the log for its last sequences every ``interval`` seconds, for the lag."""
        while True:
            for worker in self._workers()[0]:
                with contextlib.suppress(Exception):  # the log away: the last answer stands
                    info = await worker.log.js.stream_info(worker.log.stream)
                    last = int(info.state.last_seq)
                    memory = last
                    if set(worker.store.projections) & set(INDEXER_PROJECTIONS):
                        prefix = worker.log.subject_prefix
                        memory = await worker.log.last_seq(f"{prefix}.*.profile.*")
                    self._ends[worker] = (last, memory)
            await asyncio.sleep(interval)


def _bound(value: float) -> str:
    return repr(float(value))
