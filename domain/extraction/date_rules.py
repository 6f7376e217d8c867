"""The patterns of time expressions and how each resolves against an anchor day into a
``[start, end)`` span of days with a granularity."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, timedelta
from typing import Final, Literal

Granularity = Literal["day", "week", "weekend", "month", "year"]
Tense = Literal["past", "future", "neutral"]

MONTHS: Final = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
WEEKDAYS: Final = {
    name: number
    for number, names in enumerate(
        [
            ("monday", "mon"),
            ("tuesday", "tue", "tues"),
            ("wednesday", "wed"),
            ("thursday", "thu", "thurs"),
            ("friday", "fri"),
            ("saturday", "sat"),
            ("sunday", "sun"),
        ]
    )
    for name in names
}
_NUMBER_WORDS: Final = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "a couple": 2,
    "couple of": 2,
    "a few": 3,
    "few": 3,
    "several": 3,
}
_MONTH: Final = "|".join(sorted(MONTHS, key=len, reverse=True))
_WEEKDAY: Final = "|".join(sorted((w for w in WEEKDAYS if len(w) > 3), key=len, reverse=True))
_NUMBER: Final = r"\d{1,3}|a couple of|a couple|couple of|a few|few|several|" + "|".join(
    w for w in _NUMBER_WORDS if " " not in w and w != "few"
)
_PREP: Final = (
    r"(?:\b(?P<prep>on|by|in|at|during|since|until|till|before|after|from|around|over)\s+)?"
)
# Month words that are also ordinary words must be capitalised to count as months.
_AMBIGUOUS_MONTHS: Final = frozenset({"may", "march", "mar", "jan", "sep", "oct", "dec", "aug"})


def monday_of(day: date) -> date:
    """The Monday of ``day``'s ISO week."""
    return day - timedelta(days=day.weekday())


def add_months(day: date, months: int) -> date:
    """The first day of the month ``months`` after ``day``'s month (negative: before)."""
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def span_end(start: date, granularity: Granularity) -> date:
    """The exclusive end of the period of ``granularity`` starting at ``start``."""
    if granularity == "day":
        return start + timedelta(days=1)
    if granularity == "week":
        return start + timedelta(days=7)
    if granularity == "weekend":
        return start + timedelta(days=2)
    if granularity == "month":
        return add_months(start, 1)
    return date(start.year + 1, 1, 1)


def number_value(word: str) -> int | None:
    """The value of a small number written as digits or words ("3", "three", "a couple of")."""
    word = " ".join(word.lower().split())
    if word.isdigit():
        return int(word)
    return _NUMBER_WORDS.get(word)


Resolved = tuple[date, date, Granularity] | None
_Resolver = Callable[[re.Match[str], date, Tense], Resolved]


def _period(start: date, granularity: Granularity) -> Resolved:
    return start, span_end(start, granularity), granularity


def _safe_date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _month_ok(match: re.Match[str], group: str) -> bool:
    word = match.group(group)
    return word.lower() not in _AMBIGUOUS_MONTHS or word[0].isupper()


def _iso(match: re.Match[str], today: date, tense: Tense) -> Resolved:
    day = _safe_date(int(match["y"]), int(match["m"]), int(match["d"]))
    return None if day is None else _period(day, "day")


def _day_month(match: re.Match[str], today: date, tense: Tense) -> Resolved:
    if not _month_ok(match, "month"):
        return None
    month = MONTHS[match["month"].lower()]
    if match["year"]:
        day = _safe_date(int(match["year"]), month, int(match["d"]))
    else:
        day = _safe_date(today.year, month, int(match["d"]))
        if day is None and month == 2:
            day = _safe_date(today.year - today.year % 4, month, int(match["d"]))
        if day is not None and tense == "past" and day > today:
            day = _safe_date(day.year - 1, month, day.day)
        elif day is not None and tense == "future" and day < today:
            day = _safe_date(day.year + 1, month, day.day)
    return None if day is None else _period(day, "day")


def _month_year(match: re.Match[str], today: date, tense: Tense) -> Resolved:
    if not _month_ok(match, "month"):
        return None
    return _period(date(int(match["year"]), MONTHS[match["month"].lower()], 1), "month")


def _month(match: re.Match[str], today: date, tense: Tense) -> Resolved:
    if not _month_ok(match, "month"):
        return None
    month = MONTHS[match["month"].lower()]
    groups = match.groupdict()
    which = (groups.get("which") or "").lower()
    if not which and not groups.get("prep") and not groups.get("of"):
        return None  # a bare "May" is too often a name or a verb
    year = today.year
    if which == "last":
        year -= 1 if month >= today.month else 0
    elif which == "next":
        year += 1 if month <= today.month else 0
    elif tense == "past" and month > today.month:
        year -= 1
    elif tense == "future" and month < today.month:
        year += 1
    return _period(date(year, month, 1), "month")


def _year(match: re.Match[str], today: date, tense: Tense) -> Resolved:
    return _period(date(int(match["year"]), 1, 1), "year")


def _relative_day(match: re.Match[str], today: date, tense: Tense) -> Resolved:
    word = " ".join(match["word"].lower().split())
    base = word.split()[0] if word.startswith(("yesterday", "tomorrow")) else word
    offset = {
        "the day before yesterday": -2,
        "the day after tomorrow": 2,
        "yesterday": -1,
        "last night": -1,
        "tomorrow": 1,
    }.get(base, 0)
    return _period(today + timedelta(days=offset), "day")


def _ago(match: re.Match[str], today: date, tense: Tense) -> Resolved:
    count = number_value(match["n"])
    if count is None:
        return None
    sign = 1 if match["in"] else -1
    return _shift(today, match["unit"].lower(), sign * count)


def _shift(today: date, unit: str, count: int) -> Resolved:
    if unit == "day":
        return _period(today + timedelta(days=count), "day")
    if unit == "week":
        return _period(today + timedelta(days=7 * count), "week")
    if unit == "weekend":
        saturday = monday_of(today) + timedelta(days=5 + 7 * count)
        return _period(saturday, "weekend")
    if unit == "month":
        return _period(add_months(today, count), "month")
    return _period(date(today.year + count, 1, 1), "year")


def _relative_unit(match: re.Match[str], today: date, tense: Tense) -> Resolved:
    which = " ".join(match["which"].lower().split())
    unit = match["unit"].lower()
    if which in {"the past", "this past", "past"} and unit == "week":
        return today - timedelta(days=7), today + timedelta(days=1), "week"
    step = {"last": -1, "previous": -1, "past": -1, "this past": -1, "the past": -1}.get(which, 0)
    if which in {"next", "coming", "upcoming", "the following", "the coming"}:
        step = 1
    if unit == "day":
        return None
    if unit == "week":
        return _period(monday_of(today) + timedelta(days=7 * step), "week")
    return (
        _shift(today, unit, step)
        if unit != "year"
        else _period(date(today.year + step, 1, 1), "year")
    )


def _the_weekend(match: re.Match[str], today: date, tense: Tense) -> Resolved:
    saturday = monday_of(today) + timedelta(days=5)
    if tense == "past" and saturday >= today:
        saturday -= timedelta(days=7)
    return _period(saturday, "weekend")


def _weekday(match: re.Match[str], today: date, tense: Tense) -> Resolved:
    target = WEEKDAYS[match["day"].lower()]
    which = (match["which"] or "").lower()
    ahead = (target - today.weekday()) % 7  # 0..6 days to the next such day (0 = today)
    if which in {"last", "past"} or (not which and tense == "past"):
        back = (today.weekday() - target) % 7 or 7
        return _period(today - timedelta(days=back), "day")
    if which == "next":
        return _period(today + timedelta(days=ahead or 7), "day")
    if which == "this" and tense == "past":
        return _period(today - timedelta(days=(today.weekday() - target) % 7), "day")
    return _period(today + timedelta(days=ahead), "day")


_I = re.IGNORECASE
RULES: Final[tuple[tuple[re.Pattern[str], _Resolver], ...]] = (
    (re.compile(_PREP + r"\b(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})\b", _I), _iso),
    (
        re.compile(
            _PREP + rf"\b(?:the\s+)?(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?"
            rf"(?P<month>{_MONTH})\b\.?(?:,?\s+(?P<year>\d{{4}})\b)?",
            _I,
        ),
        _day_month,
    ),
    (
        re.compile(
            _PREP + rf"\b(?P<month>{_MONTH})\.?\s+(?:the\s+)?(?P<d>\d{{1,2}})(?:st|nd|rd|th)?"
            r"(?!\d)\b(?:,?\s+(?P<year>\d{4})\b)?",
            _I,
        ),
        _day_month,
    ),
    (re.compile(_PREP + rf"\b(?P<month>{_MONTH})\.?,?\s+(?P<year>\d{{4}})\b", _I), _month_year),
    (
        re.compile(
            _PREP + rf"\b(?:(?P<which>last|next|this|early|mid|late)[\s-]+)?(?P<month>{_MONTH})\b",
            _I,
        ),
        _month,
    ),
    # "the end of April", "the first week of May": the month after "of".
    (re.compile(rf"(?<=\b(?P<of>of) )(?P<month>{_MONTH})\b(?!\s+\d)", _I), _month),
    (
        re.compile(
            r"(?:\b(?P<prep>in|since|during|from|by|until|around|before|after|of)\s+"
            r"(?:the\s+year\s+|early\s+|late\s+|mid-?)?)(?P<year>(?:19|20)\d{2})\b(?![-/:]\d)",
            _I,
        ),
        _year,
    ),
    (
        re.compile(
            r"\b(?P<word>the day before yesterday|the day after tomorrow|"
            r"(?:yesterday|tomorrow)(?:\s+(?:morning|afternoon|evening|night))?|last night|"
            r"today|tonight|this morning|this afternoon|this evening|earlier today)\b",
            _I,
        ),
        _relative_day,
    ),
    (
        re.compile(
            rf"\b(?:(?P<in>in)\s+)?(?P<n>{_NUMBER})\s+(?P<unit>day|week|weekend|month|year)s?"
            r"(?(in)|\s+ago)\b",
            _I,
        ),
        _ago,
    ),
    (
        re.compile(
            _PREP + r"\b(?P<which>this past|the past|last|past|previous|next|this|coming|"
            r"upcoming|the following|the coming)\s+(?P<unit>week|weekend|month|year)\b",
            _I,
        ),
        _relative_unit,
    ),
    (re.compile(r"\b(?P<prep>on|over|at)\s+the\s+weekend\b", _I), _the_weekend),
    (
        re.compile(
            _PREP + rf"\b(?:(?P<which>last|next|this|coming|past)\s+)?(?P<day>{_WEEKDAY})\b",
            _I,
        ),
        _weekday,
    ),
)
