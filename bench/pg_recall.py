"""``Profile.recall`` at thinking_level "low" in a profile of ≥ 10,000 memories with PostgreSQL
read models, against embedding the query and a numpy top-k over the same profile's memory
vectors read from PostgreSQL (as :mod:`bench.memory` does on SQLite)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import memstream
from bench.harness import Row, bulk_settings
from bench.memory import MEMORIES, QUERIES, RECALL_RATIO_TARGET, measure_recall, recall_row
from bench.postgres import needs_postgres, scratch_database, settle
from memstream.workers.embeddings import load_embedder

NAME = "pg_recall"
TITLE = f"recall (low) in a profile of {MEMORIES:,} memories on PostgreSQL"


async def measure(server: str) -> Row:
    embedder = load_embedder()
    embedder.encode(["warm-up"])
    with (
        scratch_database(server) as url,
        tempfile.TemporaryDirectory(prefix="memstream-bench-pg-recall-") as tmp,
    ):
        settings = bulk_settings().with_(database_url=url)
        async with memstream.connect(data_dir=Path(tmp), settings=settings) as client:
            recall = await measure_recall(client, embedder, MEMORIES, QUERIES, lambda: settle(url))
    return recall_row(
        TITLE,
        recall,
        None,
        "; PostgreSQL read models, VACUUM ANALYZE after the fill (what autovacuum does within "
        "a minute)",
    )


async def run() -> Row | list[Row]:
    return await needs_postgres(TITLE, f"≤ {RECALL_RATIO_TARGET:g}×", measure)
