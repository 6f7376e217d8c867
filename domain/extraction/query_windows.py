"""The time window a recall query names ("last week", "in May 2023", "recently"), relative to a
reference date."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Final

from memstream.domain.extraction.date_rules import Tense, number_value
from memstream.domain.extraction.dates import find_time_mentions, guess_tense
from memstream.domain.extraction.model import TimeWindow

RECENT_DAYS: Final = 30
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

_RECENT: Final = re.compile(
    r"\b(?:recently|lately|these days|nowadays|of late|in recent (?:days|weeks)|"
    r"the other day)\b",
    re.IGNORECASE,
)
_ROLLING: Final = re.compile(
    r"\b(?:in|during|over|within|for)?\s*the\s+(?:past|last|previous)\s+"
    r"(?:(?P<n>\d{1,3}|a couple of|a few|few|several|two|three|four|five|six|seven|eight|nine|"
    r"ten|eleven|twelve)\s+)?(?P<unit>day|week|month|year)s?\b",
    re.IGNORECASE,
)


def query_window(query: str, reference: datetime) -> TimeWindow | None:
    """The UTC window ``[start, end)`` that ``query`` names relative to ``reference``, or ``None``.

    Calendar expressions name calendar periods ("last week" → Monday of the previous week to
    Monday of this week; "yesterday" → that day; "in May 2023" → that month); "the past N days"
    and "recently" (the last 30 days) are rolling windows ending with the reference day.
    Ambiguous expressions ("on Friday", "in May") are read as past unless the query looks ahead.
    """
    reference = reference.replace(tzinfo=UTC) if reference.tzinfo is None else reference
    reference = reference.astimezone(UTC)
    day_end = datetime(reference.year, reference.month, reference.day, tzinfo=UTC) + timedelta(
        days=1
    )
    rolling = _ROLLING.search(query)
    if rolling is not None:
        count = number_value(rolling["n"]) if rolling["n"] else 1
        return TimeWindow(start=_back(day_end, rolling["unit"].lower(), count or 1), end=day_end)
    tense: Tense = "future" if guess_tense(query) == "future" else "past"
    mentions = find_time_mentions(query, reference, tense=tense)
    if mentions:
        first = mentions[0]
        if first.preposition in {"since", "after", "from"}:
            return TimeWindow(start=first.start, end=day_end)
        if first.preposition in {"by", "until", "till", "before"}:
            # A deadline: everything from the reference day (or, looking back, ever) up to it.
            start = day_end - timedelta(days=1) if tense == "future" else _EPOCH
            return TimeWindow(start=min(start, first.start), end=first.end)
        return TimeWindow(start=first.start, end=first.end)
    if _RECENT.search(query):
        return TimeWindow(start=day_end - timedelta(days=RECENT_DAYS + 1), end=day_end)
    return None


def _back(end: datetime, unit: str, count: int) -> datetime:
    if unit == "day":
        return end - timedelta(days=count)
    if unit == "week":
        return end - timedelta(days=7 * count)
    if unit == "month":
        return end - timedelta(days=30 * count)
    return end - timedelta(days=365 * count)
