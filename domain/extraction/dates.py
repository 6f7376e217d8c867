"""Time expressions in text ("yesterday", "last Friday", "7 May 2023", "in two weeks"), resolved
against an anchor datetime into UTC spans, and rendered back as absolute dates."""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Final

from memstream.domain.extraction.date_rules import RULES, Granularity, Tense
from memstream.domain.extraction.vocabulary import is_past_tense, tokens

_FUTURE_CUES: Final = re.compile(
    r"\b(?:will|won't|shall|gonna|going to|'ll|plan(?:s|ning)? to|planning|next|tomorrow|"
    r"upcoming|coming up|can't wait|looking forward|hope to|intend to|about to|due|by)\b|'ll\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class TimeMention:
    """A time expression found in a text: the UTC span ``[start, end)`` it names, how precise it
    is, where it stands in the text (``span``, including a leading preposition) and that
    preposition (lower case, ``""`` if none)."""

    start: datetime
    end: datetime
    granularity: Granularity
    span: tuple[int, int]
    preposition: str


def find_time_mentions(
    text: str, anchor: datetime, tense: Tense | None = None
) -> list[TimeMention]:
    """All time expressions of ``text`` resolved against ``anchor``, in text order.

    Args:
        text: the text to scan.
        anchor: when the text was written (naive datetimes are taken as UTC).
        tense: how to read ambiguous expressions ("on Friday", "in May"); guessed from the
            text's verbs when ``None``.
    """
    today = _utc(anchor).date()
    guessed = tense if tense is not None else guess_tense(text)
    candidates: list[TimeMention] = []
    for pattern, resolve in RULES:
        for match in pattern.finditer(text):
            resolved = resolve(match, today, guessed)
            if resolved is None:
                continue
            start, end, granularity = resolved
            groups = match.groupdict()
            prep = (groups.get("prep") or groups.get("of") or "").lower()
            candidates.append(
                TimeMention(
                    start=_midnight(start),
                    end=_midnight(end),
                    granularity=granularity,
                    span=(match.start(), match.end()),
                    preposition=prep,
                )
            )
    candidates.sort(key=lambda m: (m.span[0], -(m.span[1] - m.span[0])))
    chosen: list[TimeMention] = []
    for mention in candidates:
        if not chosen or mention.span[0] >= chosen[-1].span[1]:
            chosen.append(mention)
    return chosen


def resolve_event_time(text: str, anchor: datetime) -> datetime | None:
    """The start (UTC) of the time the first time expression of ``text`` names, else ``None``.

    Example: ``"I went to a support group yesterday"`` anchored 2023-05-08 13:56 UTC →
    2023-05-07 00:00 UTC; ``"by Friday"`` → the first Friday on or after the anchor.
    """
    mentions = find_time_mentions(text, anchor)
    return mentions[0].start if mentions else None


def render_date(start: datetime, granularity: Granularity, preposition: bool = True) -> str:
    """An absolute, granularity-aware rendering: "on 7 May 2023", "in May 2023", "in 2022"."""
    day = f"{start.day} {calendar.month_name[start.month]} {start.year}"
    bare, prep = {
        "day": (day, "on"),
        "week": (f"the week of {day}", "in"),
        "weekend": (f"the weekend of {day}", "on"),
        "month": (f"{calendar.month_name[start.month]} {start.year}", "in"),
        "year": (str(start.year), "in"),
    }[granularity]
    return f"{prep} {bare}" if preposition else bare


def render_mention(mention: TimeMention) -> str:
    """The replacement text for a mention: keeps "by"/"since"-like prepositions ("by 12 May
    2023"), otherwise uses the granularity's own ("on 7 May 2023")."""
    if mention.preposition == "of":  # "the end of April": the "of" stays outside the span
        return render_date(mention.start, mention.granularity, False)
    if mention.preposition in {"", "on", "in", "at", "during", "over"}:
        return render_date(mention.start, mention.granularity)
    return f"{mention.preposition} {render_date(mention.start, mention.granularity, False)}"


def guess_tense(text: str) -> Tense:
    """ "future" if ``text`` has a future cue ("will", "next", "going to"...), else "past" if it
    has a past-tense verb, else "neutral"."""
    if _FUTURE_CUES.search(text):
        return "future"
    if any(is_past_tense(word) for word in tokens(text)):
        return "past"
    return "neutral"


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)
