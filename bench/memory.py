"""Agent Memory costs: ingest throughput end to end, recall latency over 10,000 memories, and
the process's peak RSS. Run: ``python -m bench.memory [--baselines-only]``.

(a) ``Profile.ingest`` (wait=True: extraction, embeddings, indexing; one call per session) of
LoCoMo turns against ``Embedder.encode`` of the same texts (what any embedding store pays).
(b) ``Profile.recall`` at thinking_level "low" in a profile holding ≥ 10,000 memories (from
seeded synthetic messages, each a fact, event, preference or task) against embedding the query
and a numpy top-k over the same profile's memory vectors; distinct queries, so no query cache.
(c) the peak RSS of this process (``getrusage``) against the peak after loading the model and
running the baselines alone (nats-server is another process, not counted).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

import memstream
from bench.harness import Row, bulk_settings, median, ms, percentile
from bench.locomo_data import Conversation, load
from bench.memory_payloads import messages, questions
from memstream.agent_memory import Profile
from memstream.client import Memstream
from memstream.workers.embedding_models import BUNDLED_MODEL
from memstream.workers.embeddings import Embedder, load_embedder

NAME = "memory"
TITLE = "Agent Memory: ingest throughput, recall latency at 10,000 memories, peak RSS"
NAMESPACE = "bench"
INGEST_CONVERSATIONS = 1  # LoCoMo conversations ingested for (a): 419 turns
INGEST_TARGET = 0.5  # ours ≥ 0.5× the messages/s of encoding them alone
MEMORIES = 10_000
BATCH = 500  # messages per ingest call (the limit)
QUERIES = 200
K = 10
RECALL_RATIO_TARGET = 3.0
RECALL_P50_TARGET = 0.030
RSS_TARGET_MIB = 2048


@dataclass(frozen=True, slots=True)
class Baselines:
    encode_rate: float  # texts/s, Embedder.encode of the ingested turns
    encode_runs: tuple[float, ...]
    mean_chars: float  # of the ingested turns
    rss_mib: float  # peak RSS after loading the model and running the baselines


@dataclass(frozen=True, slots=True)
class Recall:
    fill_seconds: float
    fill_messages: int
    memories: int
    recall: tuple[float, ...]  # seconds per query, ours
    topk: tuple[float, ...]  # seconds per query, the baseline on the same profile's vectors
    candidates: float  # mean candidates per recall


@dataclass(frozen=True, slots=True)
class Ours:
    ingest_rate: float  # messages/s
    ingest_messages: int
    memories_from_turns: int
    recall: Recall
    rss_mib: float


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def turn_texts(conversations: Sequence[Conversation]) -> list[str]:
    return [t.content for c in conversations for t in c.turns]


def encode_rate(embedder: Embedder, texts: Sequence[str]) -> float:
    start = time.perf_counter()
    embedder.encode(texts)
    return len(texts) / (time.perf_counter() - start)


def measure_baselines(conversations: Sequence[Conversation]) -> tuple[Embedder, Baselines]:
    embedder = load_embedder()
    texts = turn_texts(conversations)
    embedder.encode(texts[:64])  # warm-up
    runs = (encode_rate(embedder, texts), encode_rate(embedder, texts))
    mean_chars = sum(map(len, texts)) / len(texts)
    return embedder, Baselines(median(runs), runs, mean_chars, peak_rss_mib())


def topk(matrix: npt.NDArray[np.float32], query: npt.NDArray[np.float32], k: int) -> list[int]:
    """The baseline's search: exact cosine top-k with numpy alone."""
    scores = matrix @ query
    best = np.argpartition(-scores, k)[:k]
    return [int(i) for i in best[np.argsort(-scores[best])]]


async def count_memories(profile: Profile) -> int:
    total, cursor = 0, None
    while True:
        page = await profile.list(limit=500, cursor=cursor)
        total += len(page["memories"])
        cursor = page.get("cursor")
        if cursor is None:
            return total


async def measure_ours(
    conversations: Sequence[Conversation],
    embedder: Embedder,
    memories: int = MEMORIES,
    queries: int = QUERIES,
) -> Ours:
    with tempfile.TemporaryDirectory(prefix="memstream-bench-memory-") as tmp:
        async with memstream.connect(data_dir=Path(tmp), settings=bulk_settings()) as client:
            memory = client.agent_memory(NAMESPACE)
            # (a) one ingest call per LoCoMo session, each waiting until recallable
            turns = await memory.get_profile("locomo")
            start = time.perf_counter()
            for conversation in conversations:
                for session in conversation.sessions:
                    await turns.ingest(session.messages(), session_id=session.session_id)
            ingest_seconds = time.perf_counter() - start
            ingested = sum(len(c.turns) for c in conversations)
            from_turns = await count_memories(turns)

            recall = await measure_recall(client, embedder, memories, queries)
            return Ours(ingested / ingest_seconds, ingested, from_turns, recall, peak_rss_mib())


async def measure_recall(
    client: Memstream,
    embedder: Embedder,
    memories: int,
    queries: int,
    after_fill: Callable[[], object] | None = None,
) -> Recall:
    """A profile of ≥ ``memories`` memories (then ``after_fill()``, not timed), then
    ``queries`` recalls against the baseline, interleaved (alternating which goes first)."""
    profile = await client.agent_memory(NAMESPACE).get_profile("facts")
    synthetic = messages(2 * memories)
    start = time.perf_counter()
    sent = held = 0
    while held < memories and sent < len(synthetic):
        for offset in range(sent, min(sent + 4 * BATCH, len(synthetic)), BATCH):
            batch = synthetic[offset : offset + BATCH]
            await profile.ingest(batch, session_id=f"facts-{offset // BATCH:03d}")
            sent += len(batch)
        held = await count_memories(profile)
    fill_seconds = time.perf_counter() - start
    if after_fill is not None:
        after_fill()
    ids, blobs = client.core.reads.memory_queries.vectors(
        NAMESPACE, "facts", "memory", BUNDLED_MODEL
    )
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(ids), -1)
    matrix = matrix.astype(np.float32)
    ours: list[float] = []
    raw: list[float] = []
    candidates = 0
    for index, query in enumerate(questions(queries)):
        for first in (index % 2 == 0, index % 2 == 1):
            start = time.perf_counter()
            if first:
                result = await profile.recall(query, thinking_level="low")
                ours.append(time.perf_counter() - start)
                candidates += len(result["candidates"])
            else:
                topk(matrix, embedder.encode([query])[0], K)
                raw.append(time.perf_counter() - start)
    return Recall(fill_seconds, sent, held, tuple(ours), tuple(raw), candidates / queries)


def recall_row(title: str, recall: Recall, p50_target: float | None, notes: str = "") -> Row:
    """The recall row: the ratio of p50s against :data:`RECALL_RATIO_TARGET`, and the p50
    against ``p50_target`` when one is given."""
    p50, p99 = median(recall.recall), percentile(recall.recall, 0.99)
    raw50, raw99 = median(recall.topk), percentile(recall.topk, 0.99)
    target = f"≤ {RECALL_RATIO_TARGET:g}×"
    passed = p50 / raw50 <= RECALL_RATIO_TARGET
    if p50_target is not None:
        target += f" and p50 ≤ {ms(p50_target)}"
        passed = passed and p50 <= p50_target
    return Row(
        title,
        f"p50 {ms(p50)}, p99 {ms(p99)}",
        f"query embedding + numpy top-{K} p50 {ms(raw50)}, p99 {ms(raw99)}",
        f"{p50 / raw50:.2f}× (p50)",
        target,
        passed,
        f"{len(recall.recall)} distinct queries interleaved with the baseline (alternating "
        f"which goes first), mean {recall.candidates:.1f} candidates; the baseline searches "
        f"the same profile's {recall.memories:,} memory vectors from the read model; filled with "
        f"{recall.fill_messages:,} synthetic messages (~90 chars each, 500 per ingest) in "
        f"{recall.fill_seconds:.0f} s{notes}",
    )


def rows(baselines: Baselines, ours: Ours) -> list[Row]:
    ingest_ratio = ours.ingest_rate / baselines.encode_rate
    return [
        Row(
            "Agent Memory ingest (wait=True) of LoCoMo turns",
            f"{ours.ingest_rate:,.1f} msg/s",
            f"Embedder.encode {baselines.encode_rate:,.1f} texts/s",
            f"{ingest_ratio:.2f}×",
            f"≥ {INGEST_TARGET}×",
            ingest_ratio >= INGEST_TARGET,
            f"{ours.ingest_messages} turns of {INGEST_CONVERSATIONS} LoCoMo conversations "
            f"(mean {baselines.mean_chars:.0f} chars), one ingest "
            f"per session, each waiting until recallable (extraction, embeddings, indexing); "
            f"{ours.memories_from_turns} memories; baseline: encode of the same texts, batch "
            f"64, runs {', '.join(f'{r:.1f}' for r in baselines.encode_runs)} texts/s",
        ),
        recall_row(
            f"recall (low) in a profile of {ours.recall.memories:,} memories",
            ours.recall,
            RECALL_P50_TARGET,
        ),
        Row(
            "peak RSS of the process (Agent Memory benchmarks)",
            f"{ours.rss_mib:,.0f} MiB",
            f"model loaded + baselines {baselines.rss_mib:,.0f} MiB",
            f"{ours.rss_mib / baselines.rss_mib:.2f}×",
            f"≤ {RSS_TARGET_MIB:,} MiB",
            ours.rss_mib <= RSS_TARGET_MIB,
            "getrusage ru_maxrss of this process (workers in-process, nats-server apart); in a "
            "full `python -m bench` run it includes the earlier benchmarks' peaks",
        ),
    ]


async def run() -> list[Row]:
    conversations = load(limit=INGEST_CONVERSATIONS)
    embedder, baselines = measure_baselines(conversations)
    ours = await measure_ours(conversations, embedder)
    return rows(baselines, ours)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    parser.add_argument("--baselines-only", action="store_true", help="run without memstream")
    parser.add_argument("--memories", type=int, default=MEMORIES, help="memories for recall")
    parser.add_argument("--queries", type=int, default=QUERIES, help="recall calls timed")
    arguments = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    conversations = load(limit=INGEST_CONVERSATIONS)
    embedder, baselines = measure_baselines(conversations)
    print(
        f"encode of {len(turn_texts(conversations))} turns: "
        f"{', '.join(f'{r:.1f}' for r in baselines.encode_runs)} texts/s; "
        f"peak RSS {baselines.rss_mib:.0f} MiB"
    )
    if arguments.baselines_only:
        return 0
    result = asyncio.run(
        measure_ours(conversations, embedder, arguments.memories, arguments.queries)
    )
    report = rows(baselines, result)
    for row in report:
        print(row.show())
    return 0 if all(r.passed for r in report) else 1


if __name__ == "__main__":
    sys.exit(main())
