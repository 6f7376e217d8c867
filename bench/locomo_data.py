"""LoCoMo conversations as the memory benchmarks use them: turns as messages, questions with
their evidence turns, and the scores of a ranking of turns (evidence recall@k, hit@k, MRR)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Licensed for evaluation only: read in place, never copied into the repository.
DATA = ROOT.parent / "shared" / "eval" / "locomo-dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
ADVERSARIAL = 5
DEPTH = 10  # candidates scored per question: recall@5, recall@10, hit@10, MRR@10

_SESSION = re.compile(r"session_(\d+)")
_DIA_ID = re.compile(r"D\d+:\d+")


@dataclass(frozen=True, slots=True)
class Turn:
    dia_id: str
    session_id: str
    role: str  # speaker_a → "user", speaker_b → "assistant"
    content: str  # "Speaker: text [image: caption]"
    timestamp: datetime


@dataclass(frozen=True, slots=True)
class Session:
    session_id: str
    date: datetime
    turns: tuple[Turn, ...]

    def messages(self) -> list[dict[str, Any]]:
        return [
            {"role": t.role, "content": t.content, "timestamp": t.timestamp} for t in self.turns
        ]


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    category: int
    evidence: tuple[str, ...]  # known dia ids only


@dataclass(frozen=True, slots=True)
class Conversation:
    sample_id: str
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]
    skipped_evidence: int  # malformed or unknown evidence ids (or parts of one) left out

    @property
    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s.turns]

    @property
    def last_date(self) -> datetime:
        return self.sessions[-1].date

    def dia_ids(self) -> dict[tuple[str, str], tuple[str, ...]]:
        """(session_id, content) → the dia ids of the turns with that text (a repeated text in
        one session is one message: memstream's message identity is its session, role, text)."""
        found: dict[tuple[str, str], tuple[str, ...]] = {}
        for turn in self.turns:
            key = (turn.session_id, turn.content)
            found[key] = (*found.get(key, ()), turn.dia_id)
        return found


def parse_date(text: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` → an aware UTC datetime."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def load(path: Path = DATA, limit: int | None = None) -> list[Conversation]:
    """The conversations of ``path`` (the first ``limit`` of them)."""
    samples = json.loads(path.read_text())
    return [_conversation(s) for s in samples[:limit]]


def _conversation(sample: Mapping[str, Any]) -> Conversation:
    sample_id = str(sample["sample_id"])
    body = sample["conversation"]
    speaker_a = body["speaker_a"]
    numbers = sorted(
        int(m.group(1))
        for key, value in body.items()
        if (m := _SESSION.fullmatch(key)) and isinstance(value, list) and value
    )
    sessions = []
    for number in numbers:
        session_id = f"{sample_id}-s{number}"
        date = parse_date(body[f"session_{number}_date_time"])
        turns = tuple(
            Turn(
                dia_id=turn["dia_id"],
                session_id=session_id,
                role="user" if turn["speaker"] == speaker_a else "assistant",
                content=_content(turn),
                timestamp=date,
            )
            for turn in body[f"session_{number}"]
        )
        sessions.append(Session(session_id, date, turns))
    known = {t.dia_id for s in sessions for t in s.turns}
    questions = []
    skipped = 0
    for item in sample["qa"]:
        evidence: list[str] = []
        for raw in item.get("evidence") or ():
            # A few ids are malformed ("D8:6; D9:17", "D"): keep the well-formed known parts.
            parts = [p for p in re.split(r"[;,\s]+", str(raw)) if p]
            good = [p for p in parts if _DIA_ID.fullmatch(p) and p in known]
            skipped += len(parts) - len(good) if parts else 1
            evidence += [p for p in good if p not in evidence]
        questions.append(Question(str(item["question"]), int(item["category"]), tuple(evidence)))
    return Conversation(sample_id, tuple(sessions), tuple(questions), skipped)


def _content(turn: Mapping[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    return f"{text} [image: {caption}]" if caption else text


@dataclass(frozen=True, slots=True)
class Scored:
    """One question's scores for one method."""

    category: int
    recall_5: float
    recall_10: float
    hit_10: float
    reciprocal_rank: float  # of the first of the top 10 covering any evidence turn
    turns_10: int  # distinct turns the top 10 candidates cover
    top_score: float | None


def score(
    question: Question, ranking: Sequence[Iterable[str]], top_score: float | None = None
) -> Scored:
    """Scores of a ranking of candidates, best first, each given as the dia ids it covers."""
    evidence = set(question.evidence)
    covered: list[set[str]] = []
    union: set[str] = set()
    for turns in ranking[:DEPTH]:
        union |= set(turns)
        covered.append(set(union))
    reciprocal = next(
        (1 / rank for rank, turns in enumerate(ranking[:DEPTH], 1) if evidence & set(turns)), 0.0
    )

    def recall(k: int) -> float:
        if not covered or not evidence:
            return 0.0
        return len(evidence & covered[min(k, len(covered)) - 1]) / len(evidence)

    return Scored(
        question.category,
        recall(5),
        recall(10),
        float(recall(10) > 0),
        reciprocal,
        len(union),
        top_score,
    )


@dataclass(frozen=True, slots=True)
class Summary:
    count: int
    recall_5: float
    recall_10: float
    hit_10: float
    mrr: float
    turns_10: float
    top_score: float | None


def summarise(scores: Sequence[Scored]) -> Summary:
    n = len(scores)
    if not n:
        return Summary(0, 0.0, 0.0, 0.0, 0.0, 0.0, None)
    tops = [s.top_score for s in scores if s.top_score is not None]
    return Summary(
        n,
        sum(s.recall_5 for s in scores) / n,
        sum(s.recall_10 for s in scores) / n,
        sum(s.hit_10 for s in scores) / n,
        sum(s.reciprocal_rank for s in scores) / n,
        sum(s.turns_10 for s in scores) / n,
        sum(tops) / len(tops) if tops else None,
    )


def by_category(scores: Sequence[Scored]) -> dict[str, Summary]:
    """Summaries for each of the categories 1–4 and ``"all"`` of them."""
    table = {
        f"{c} {name}": summarise([s for s in scores if s.category == c])
        for c, name in CATEGORIES.items()
    }
    table["all"] = summarise([s for s in scores if s.category in CATEGORIES])
    return table
