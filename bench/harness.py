"""Shared benchmark machinery: a private nats-server per benchmark, result rows, timing."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext, api

from memstream.client import Memstream, open_memstream
from memstream.settings import Settings
from memstream.workers.runtime.nats_server import SYNC_ALWAYS, NatsServerProcess

RAW_STREAM = "RAW"
RAW_SUBJECT = "raw.bench"
ACK_TIMEOUT = 10.0  # every wait on an acknowledgement is bounded
# JetStream's fsync policies the write benchmarks compare: memstream's default (a write is on
# disk before the server acknowledges it) and nats-server's own default interval (it
# acknowledges first and syncs every 2 minutes).
LAZY_SYNC = "2m"
SYNCS = (SYNC_ALWAYS, LAZY_SYNC)


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the results table."""

    benchmark: str
    ours: str
    baseline: str
    ratio: str
    target: str
    passed: bool
    notes: str = ""

    def show(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        line = (
            f"{self.benchmark}: ours {self.ours} | baseline {self.baseline} | "
            f"ratio {self.ratio} | target {self.target} → {verdict}"
        )
        return line + (f"\n    {self.notes}" if self.notes else "")


@dataclass(frozen=True, slots=True)
class BenchEnv:
    """A temp dir with its own nats-server, and settings for a memstream client of it."""

    root: Path
    server: NatsServerProcess
    settings: Settings

    async def memstream(self, *, workers: bool = True) -> Memstream:
        return await open_memstream(self.settings, workers=workers)

    async def raw_client(self) -> Client:
        return await nats.connect(self.server.url, name="bench-raw")


@contextlib.asynccontextmanager
async def bench_env(name: str, *, sync: str = SYNC_ALWAYS) -> AsyncIterator[BenchEnv]:
    """Start a private ``nats-server -js`` in a temp dir for one benchmark, with JetStream's
    fsync policy ``sync`` (memstream's default unless a benchmark compares policies)."""
    with tempfile.TemporaryDirectory(prefix=f"memstream-bench-{name}-") as tmp:
        root = Path(tmp)
        server = await asyncio.to_thread(
            NatsServerProcess.start, root / "nats", log_path=root / "nats.log", sync=sync
        )
        settings = Settings(
            data_dir=root / "data",
            nats_url=server.url,
            read_timeout=600.0,  # bulk loads wait for the projector far longer than a request
            write_timeout=ACK_TIMEOUT,
            nats_sync=sync,
        )
        try:
            yield BenchEnv(root, server, settings)
        finally:
            await asyncio.to_thread(server.stop)


def bulk_settings() -> Settings:
    """Settings from the environment with the read timeout of a bulk load: an ingest of 500
    messages waits for their embeddings far longer than a request waits for a read."""
    return Settings.from_env().with_(read_timeout=600.0)


async def raw_stream(client: Client, name: str = RAW_STREAM) -> JetStreamContext:
    """A plain file-backed stream for raw nats-py baselines (no memstream in the way)."""
    js = client.jetstream(timeout=ACK_TIMEOUT)
    await js.add_stream(
        api.StreamConfig(
            name=name,
            subjects=[f"{name.lower()}.>"],
            storage=api.StorageType.FILE,
            retention=api.RetentionPolicy.LIMITS,
        )
    )
    return js


async def publish_window(
    client: Client, subject: str, payloads: Sequence[bytes], window: int = 1000
) -> None:
    """Publish with ``publish_async``, at most ``window`` unacknowledged, every wait bounded.

    nats-py 2.16's ``publish_async`` future may never resolve when the server rejects a message,
    so the stall on a full window and the final wait both have timeouts.
    """
    js = client.jetstream(timeout=ACK_TIMEOUT, publish_async_max_pending=window)
    futures = [await js.publish_async(subject, data, wait_stall=ACK_TIMEOUT) for data in payloads]
    await asyncio.wait_for(asyncio.gather(*futures), ACK_TIMEOUT)


def sync_name(sync: str) -> str:
    """How a row names a fsync policy: ``sync always`` or ``sync_interval 2m``."""
    return "sync always" if sync == SYNC_ALWAYS else f"sync_interval {sync}"


def fsync_latencies(directory: Path, count: int = 200, size: int = 700) -> list[float]:
    """Seconds of each of ``count`` fsyncs of a file in ``directory``, each after appending
    ``size`` bytes to it (about one event): the disk's own cost of a log that syncs every
    write, measured beside the servers that pay it."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    record = b"x" * size
    samples = []
    try:
        for _ in range(count):
            os.write(fd, record)
            start = time.perf_counter()
            os.fsync(fd)
            samples.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()
    return samples


async def timed(action: Callable[[], Awaitable[object]]) -> float:
    """Seconds one awaited call takes."""
    start = time.perf_counter()
    await action()
    return time.perf_counter() - start


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (``fraction`` in 0..1)."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def median(samples: Sequence[float]) -> float:
    return percentile(samples, 0.5)


def paired_ratio(ours: Sequence[float], baseline: Sequence[float]) -> float:
    """Median of per-round ratios of interleaved rounds: drift of the machine between rounds
    (other processes, page cache, the server's own work) cancels within each pair."""
    return median([o / b for o, b in zip(ours, baseline, strict=True)])


@dataclass(frozen=True, slots=True)
class QueryFigures:
    """Per-query medians of interleaved rounds, summed over a set of queries."""

    ours: float  # mean of the per-query medians, seconds
    baseline: float
    ratio: float  # of the total times
    geometric: float  # geometric mean of the per-query ratios
    detail: str  # "'query' ours/baseline" in ms, per query


def query_figures(
    ours: Mapping[str, Sequence[float]], baseline: Mapping[str, Sequence[float]]
) -> QueryFigures:
    """Figures of queries timed in interleaved rounds (the same keys in both)."""
    ours_medians = {q: median(v) for q, v in ours.items()}
    raw_medians = {q: median(baseline[q]) for q in ours}
    ratios = [ours_medians[q] / raw_medians[q] for q in ours]
    return QueryFigures(
        sum(ours_medians.values()) / len(ours),
        sum(raw_medians.values()) / len(ours),
        sum(ours_medians.values()) / sum(raw_medians.values()),
        math.exp(sum(math.log(r) for r in ratios) / len(ratios)),
        "; ".join(f"{q!r} {ours_medians[q] * 1000:.2f}/{raw_medians[q] * 1000:.2f}" for q in ours),
    )


def per_second(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}/s"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"
