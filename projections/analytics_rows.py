"""Rows of the analytics read model as ``memstream stats`` and the API give them (both
backends)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from memstream.projections.analytics_projector import COST_SCALE, MEMORY_TYPES

# The columns of one day's row, after namespace, day, model and source.
FIELDS = (
    "sessions",
    "messages",
    "input_tokens",
    "output_tokens",
    "cost",
    "memories",
    "remembered",
    "ingested_messages",
    "ingested_bytes",
)


def _empty(namespace: str, day: str, model: str, source: str) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "day": day,
        "model": model,
        "source": source,
        "sessions": 0,
        "messages": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cost": 0.0,
        "memories": {**dict.fromkeys(MEMORY_TYPES, 0), "other": 0},
        "remembered": 0,
        "ingested_messages": 0,
        "ingested_bytes": 0,
    }


def daily_rows(
    counters: Iterable[Sequence[Any]], sessions: Iterable[Sequence[Any]]
) -> list[dict[str, Any]]:
    """One row per (namespace, day, model, source) from counter rows ``(namespace, day,
    model, source, metric, value)`` and session counts ``(namespace, first day, model, source,
    sessions)``, ordered by day, namespace, model, source."""
    rows: dict[tuple[str, str, str, str], dict[str, Any]] = {}

    def row(namespace: str, day: str, model: str, source: str) -> dict[str, Any]:
        key = (namespace, day, model, source)
        if key not in rows:
            rows[key] = _empty(*key)
        return rows[key]

    for namespace, day, model, source, metric, value in counters:
        target = row(namespace, day, model, source)
        if metric == "cost_nanos":
            target["cost"] = int(value) / COST_SCALE
        elif metric.startswith("memories_"):
            target["memories"][metric.removeprefix("memories_")] = int(value)
        else:
            target[metric] = int(value)
    for namespace, day, model, source, count in sessions:
        row(namespace, day, model, source)["sessions"] = int(count)
    return [rows[key] for key in sorted(rows, key=lambda k: (k[1], k[0], k[2], k[3]))]


DIMENSIONS = ("day", "namespace", "model", "source")


def grouped(rows: Iterable[dict[str, Any]], by: Sequence[str]) -> list[dict[str, Any]]:
    """``rows`` (as :func:`daily_rows` gives them) summed over the dimensions not in ``by``
    (a subset of :data:`DIMENSIONS`), in ``by`` order."""
    sums: dict[tuple[str, ...], dict[str, Any]] = {}
    for row in rows:
        key = tuple(str(row[d]) for d in by)
        target = sums.get(key)
        if target is None:
            target = sums[key] = {d: row[d] for d in by}
            for name in FIELDS:
                value = row[name]
                target[name] = dict(value) if isinstance(value, dict) else value
            continue
        for name in FIELDS:
            value = row[name]
            if isinstance(value, dict):
                for kind, count in value.items():
                    target[name][kind] = target[name].get(kind, 0) + count
            else:
                target[name] += value
    for target in sums.values():
        target["cost"] = round(target["cost"], 9)
    return [sums[key] for key in sorted(sums)]
