"""LoCoMo evidence recall of ``Profile.recall`` against BM25 and MiniLM over the raw turns.

Each conversation goes into its own profile, a session per LoCoMo session, dated as LoCoMo dates
it; each question of categories 1–4 is recalled with ``reference_date`` the last session's date,
and the candidates' provenance (memory → source messages → turns) is scored against the
question's evidence turns. The baselines rank the same turn texts in the same run: SQLite FTS5
``bm25()`` (porter unicode61, the question as an OR of its terms) and exact cosine over the
bundled MiniLM's vectors. Run: ``python -m bench.locomo [--baselines-only]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import memstream
from bench.harness import Row, bulk_settings
from bench.locomo_data import (
    ADVERSARIAL,
    DEPTH,
    Conversation,
    Question,
    Scored,
    Summary,
    by_category,
    load,
    score,
    summarise,
)
from memstream.agent_memory import Profile
from memstream.projections.vector_search import VectorIndex
from memstream.workers.embeddings import load_embedder

NAME = "locomo"
TITLE = "LoCoMo evidence recall@10 of recall (low) vs BM25 / MiniLM over turns"
TARGET_RECALL = 0.70
TARGET_MARGIN = 0.05  # over the better baseline, overall and per category
LEVELS = ("low", "medium")
BASELINES = ("bm25", "minilm")
NAMESPACE = "locomo"


# A ranking: candidates best first, each the dia ids it covers, and the top candidate's score.
Ranking = tuple[list[tuple[str, ...]], float | None]


@dataclass
class Results:
    """Per method: the scored questions of categories 1–4 and the top scores of category 5."""

    scored: dict[str, list[Scored]] = field(default_factory=dict)
    adversarial: dict[str, list[float]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)  # seconds, for the notes

    def add(self, method: str, question: Question, ranking: Ranking) -> None:
        turns, top = ranking
        if question.category == ADVERSARIAL:
            self.adversarial.setdefault(method, []).append(0.0 if top is None else top)
        elif question.evidence:
            self.scored.setdefault(method, []).append(score(question, turns, top))


def fts_or_query(text: str) -> str | None:
    """The question as an FTS5 OR of its distinct terms, each a quoted string."""
    terms = dict.fromkeys(t.lower() for t in re.findall(r"\w+", text))
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms) or None


def bm25_baseline(conversation: Conversation, results: Results) -> None:
    turns = conversation.turns
    connection = sqlite3.connect(":memory:")
    try:
        connection.execute(
            "CREATE VIRTUAL TABLE turns USING fts5(content, tokenize = 'porter unicode61')"
        )
        connection.executemany(
            "INSERT INTO turns (rowid, content) VALUES (?, ?)",
            [(i, t.content) for i, t in enumerate(turns)],
        )
        for question in conversation.questions:
            expression = fts_or_query(question.text)
            rows = (
                connection.execute(
                    "SELECT rowid, bm25(turns) FROM turns WHERE turns MATCH ? "
                    "ORDER BY bm25(turns), rowid LIMIT ?",
                    (expression, DEPTH),
                ).fetchall()
                if expression
                else []
            )
            # bm25() is lower-is-better and unbounded: no comparable top score.
            results.add("bm25", question, ([(turns[i].dia_id,) for i, _ in rows], None))
    finally:
        connection.close()


def minilm_baseline(conversation: Conversation, results: Results) -> None:
    embedder = load_embedder()
    turns = conversation.turns
    index = VectorIndex([t.dia_id for t in turns], embedder.encode([t.content for t in turns]))
    for question in conversation.questions:
        hits = index.search(embedder.encode_query(question.text), DEPTH)
        results.add("minilm", question, ([(i,) for i, _ in hits], hits[0][1] if hits else None))


def run_baselines(conversations: Sequence[Conversation], results: Results) -> None:
    for method, baseline in (("bm25", bm25_baseline), ("minilm", minilm_baseline)):
        start = time.perf_counter()
        for conversation in conversations:
            baseline(conversation, results)
        results.timings[method] = time.perf_counter() - start


async def run_memstream(
    conversations: Sequence[Conversation], results: Results, levels: Sequence[str] = LEVELS
) -> None:
    """Ingest every conversation into its own profile and score ``recall`` at each level."""
    with tempfile.TemporaryDirectory(prefix="memstream-bench-locomo-") as tmp:
        async with memstream.connect(data_dir=Path(tmp), settings=bulk_settings()) as ms:
            memory = ms.agent_memory(NAMESPACE)
            ingest = recall = 0.0
            recalls = 0
            for conversation in conversations:
                profile = await memory.get_profile(conversation.sample_id)
                start = time.perf_counter()
                for session in conversation.sessions:
                    await profile.ingest(session.messages(), session_id=session.session_id)
                ingest += time.perf_counter() - start
                provenance = _Provenance(profile, conversation)
                for level in levels:
                    for question in conversation.questions:
                        start = time.perf_counter()
                        answer = await profile.recall(
                            question.text,
                            thinking_level=level,
                            reference_date=conversation.last_date,
                        )
                        recall += time.perf_counter() - start
                        recalls += 1
                        candidates = answer["candidates"]
                        turns = [await provenance.turns(c["id"]) for c in candidates[:DEPTH]]
                        top = float(candidates[0]["score"]) if candidates else None
                        results.add(f"ours-{level}", question, (turns, top))
            results.timings["ingest"] = ingest
            results.timings["recall"] = recall / max(recalls, 1)
            results.timings["messages"] = sum(len(c.turns) for c in conversations)


class _Provenance:
    """Memory id → the dia ids of its source messages (cached: candidates repeat)."""

    def __init__(self, profile: Profile, conversation: Conversation) -> None:
        self._profile = profile
        self._dia_ids = conversation.dia_ids()
        self._by_content: dict[str, tuple[str, ...]] = {}
        for (_, content), ids in self._dia_ids.items():
            self._by_content[content] = self._by_content.get(content, ()) + ids
        self._memories: dict[str, tuple[str, ...]] = {}
        self._messages: dict[str, tuple[str, ...]] = {}

    async def turns(self, memory_id: str) -> tuple[str, ...]:
        if memory_id not in self._memories:
            memory = await self._profile.get(memory_id)
            found: dict[str, None] = {}
            for message_id in memory.get("source_message_ids") or ():
                found.update(dict.fromkeys(await self._message_turns(message_id)))
            self._memories[memory_id] = tuple(found)
        return self._memories[memory_id]

    async def _message_turns(self, message_id: str) -> tuple[str, ...]:
        if message_id not in self._messages:
            message = await self._profile.get_message(message_id)
            key = (message["session_id"], message["content"])
            self._messages[message_id] = self._dia_ids.get(key) or self._by_content.get(
                message["content"], ()
            )
        return self._messages[message_id]


def table(results: Results) -> str:
    """The per-category table of every method, then ours − the better baseline."""
    summaries = {m: by_category(s) for m, s in results.scored.items()}
    categories = list(next(iter(summaries.values()))) if summaries else []
    lines = [
        f"{'category':<15} {'method':<12} {'n':>4} {'R@5':>6} {'R@10':>6} {'hit@10':>7} "
        f"{'MRR':>6} {'turns@10':>9}"
    ]
    for category in categories:
        for method, by in summaries.items():
            s = by[category]
            lines.append(
                f"{category:<15} {method:<12} {s.count:>4} {s.recall_5:>6.3f} {s.recall_10:>6.3f} "
                f"{s.hit_10:>7.3f} {s.mrr:>6.3f} {s.turns_10:>9.2f}"
            )
    ours = [m for m in summaries if m.startswith("ours-")]
    baselines = [m for m in summaries if m in BASELINES]
    if ours and baselines:
        lines.append("")
        lines.append("recall@10, ours − the better baseline (points):")
        for method in ours:
            margins = ", ".join(
                f"{c}: {_margin(summaries, method, c) * 100:+.1f}" for c in categories
            )
            lines.append(f"  {method}: {margins}")
    if results.adversarial:
        relevant = {m: summarise(s).top_score for m, s in results.scored.items()}
        lines.append("")
        lines.append("mean top score, category 5 (adversarial) vs categories 1–4:")
        for method, tops in results.adversarial.items():
            answered = relevant.get(method)
            if answered is not None:
                lines.append(
                    f"  {method}: {sum(tops) / len(tops):.3f} vs {answered:.3f} "
                    f"({len(tops)} questions)"
                )
    return "\n".join(lines)


def _margin(summaries: dict[str, dict[str, Summary]], method: str, category: str) -> float:
    best = max(summaries[b][category].recall_10 for b in BASELINES if b in summaries)
    return summaries[method][category].recall_10 - best


def row(results: Results, conversations: Sequence[Conversation]) -> Row:
    summaries = {m: by_category(s) for m, s in results.scored.items()}
    ours = summaries["ours-low"]
    overall = ours["all"]
    margins = {c: _margin(summaries, "ours-low", c) for c in ours}
    best = max(BASELINES, key=lambda b: summaries[b]["all"].recall_10)
    passed = overall.recall_10 >= TARGET_RECALL and all(
        m >= TARGET_MARGIN for m in margins.values()
    )
    per_category = "; ".join(
        f"{c} ours {ours[c].recall_10:.3f} / BM25 {summaries['bm25'][c].recall_10:.3f} / "
        f"MiniLM {summaries['minilm'][c].recall_10:.3f}"
        for c in ours
        if c != "all"
    )
    other = "; ".join(
        f"{m} R@10 {s['all'].recall_10:.3f} MRR {s['all'].mrr:.3f}"
        for m, s in summaries.items()
        if m.startswith("ours-") and m != "ours-low"
    )
    timings = results.timings
    return Row(
        TITLE,
        f"{overall.recall_10:.3f} (MRR {overall.mrr:.3f})",
        f"BM25 {summaries['bm25']['all'].recall_10:.3f}, "
        f"MiniLM {summaries['minilm']['all'].recall_10:.3f}",
        f"{margins['all'] * 100:+.1f} pts vs {best} "
        f"({overall.recall_10 / summaries[best]['all'].recall_10:.2f}×)",
        f"≥ {TARGET_RECALL:.2f} and ≥ +{TARGET_MARGIN * 100:.0f} pts over the better baseline, "
        f"overall and per category",
        passed,
        f"{len(conversations)} conversations, {overall.count} questions of categories 1–4; "
        f"recall@10 per category: {per_category}; ours turns covered by the top 10 "
        f"{overall.turns_10:.1f} (baselines 10); {other}; ingest "
        f"{timings.get('messages', 0):.0f} turns in {timings.get('ingest', 0):.1f} s, "
        f"recall {timings.get('recall', 0) * 1000:.1f} ms mean; "
        f"{sum(c.skipped_evidence for c in conversations)} malformed evidence ids skipped",
    )


async def measure(
    limit: int | None = None, levels: Sequence[str] = LEVELS, baselines_only: bool = False
) -> tuple[Results, list[Conversation]]:
    conversations = load(limit=limit)
    results = Results()
    run_baselines(conversations, results)
    if not baselines_only:
        await run_memstream(conversations, results, levels)
    return results, conversations


async def run() -> Row:
    results, conversations = await measure()
    print(table(results), flush=True)
    return row(results, conversations)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.locomo", description=__doc__)
    parser.add_argument("--baselines-only", action="store_true", help="run without memstream")
    parser.add_argument("--limit-conversations", type=int, default=None, metavar="N")
    parser.add_argument(
        "--levels", default=",".join(LEVELS), help="thinking levels to recall at (low first)"
    )
    arguments = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    levels = [level.strip() for level in arguments.levels.split(",") if level.strip()]
    results, conversations = asyncio.run(
        measure(arguments.limit_conversations, levels, arguments.baselines_only)
    )
    print(table(results))
    if arguments.baselines_only or "low" not in levels:
        return 0
    result = row(results, conversations)
    print(result.show())
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
