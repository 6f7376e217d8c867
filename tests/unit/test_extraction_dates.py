"""Time expressions resolved against an anchor: event times, query windows, rendering."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from memstream.domain.extraction.dates import (
    find_time_mentions,
    render_date,
    resolve_event_time,
)
from memstream.domain.extraction.query_windows import query_window
from memstream.domain.extraction.summaries import resolve_dates

# Monday 8 May 2023, 13:56 UTC (the first LoCoMo session's date).
MONDAY = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def day(year: int, month: int, d: int) -> datetime:
    return datetime(year, month, d, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I went to a support group yesterday", day(2023, 5, 7)),
        ("I'm tired today", day(2023, 5, 8)),
        ("Tonight we cook", day(2023, 5, 8)),
        ("See you tomorrow", day(2023, 5, 9)),
        ("We partied last night", day(2023, 5, 7)),
        ("the day before yesterday it snowed", day(2023, 5, 6)),
        ("I saw her two days ago", day(2023, 5, 6)),
        ("I started 3 weeks ago", day(2023, 4, 17)),
        ("a couple of days ago we met", day(2023, 5, 6)),
        ("I'll be back in two weeks", day(2023, 5, 22)),
        ("It opens in 3 days", day(2023, 5, 11)),
    ],
)
def test_relative_days(text: str, expected: datetime) -> None:
    assert resolve_event_time(text, MONDAY) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I was busy last week", day(2023, 5, 1)),
        ("We fly next week", day(2023, 5, 15)),
        ("Busy this week", day(2023, 5, 8)),
        ("We're camping this weekend", day(2023, 5, 13)),
        ("I hiked last weekend", day(2023, 5, 6)),
        ("It was cold last month", day(2023, 4, 1)),
        ("I moved last year", day(2022, 1, 1)),
        ("We'll marry next year", day(2024, 1, 1)),
    ],
)
def test_relative_weeks_months_years(text: str, expected: datetime) -> None:
    assert resolve_event_time(text, MONDAY) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Finish the report by Friday", day(2023, 5, 12)),
        ("I ran a race last Saturday", day(2023, 5, 6)),
        ("Let's meet next Monday", day(2023, 5, 15)),
        ("I went to the zoo on Friday", day(2023, 5, 5)),
        ("I will call on Wednesday", day(2023, 5, 10)),
        ("The party is on Monday", day(2023, 5, 8)),
        ("I saw him last Monday", day(2023, 5, 1)),
    ],
)
def test_weekdays(text: str, expected: datetime) -> None:
    assert resolve_event_time(text, MONDAY) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("We met on 7 May 2023", day(2023, 5, 7)),
        ("We met on May 7, 2023", day(2023, 5, 7)),
        ("the 3rd of June 2021 was hot", day(2021, 6, 3)),
        ("Deadline 2023-06-30", day(2023, 6, 30)),
        ("It happened in May 2022", day(2022, 5, 1)),
        ("I graduated in 2022", day(2022, 1, 1)),
        ("We're going camping in June", day(2023, 6, 1)),
        ("I visited Rome in December", day(2022, 12, 1)),
        ("My birthday is on June 4", day(2023, 6, 4)),
    ],
)
def test_absolute_dates(text: str, expected: datetime) -> None:
    assert resolve_event_time(text, MONDAY) == expected


def test_texts_without_a_time_resolve_to_none() -> None:
    # Given texts with no time expression ("may" as a verb, a bare number)
    for text in ["I may go later", "I have 3 cats", "March forward!", "Fridays are fun"]:
        # Then no event time is resolved
        assert resolve_event_time(text, MONDAY) is None, text


def test_month_and_year_boundaries() -> None:
    # Given an anchor on New Year's Day (a Sunday)
    new_year = datetime(2023, 1, 1, 9, tzinfo=UTC)
    # Then "yesterday" is in the previous year, "last month" is December, "last week" starts
    # on the Monday of the previous ISO week
    assert resolve_event_time("yesterday", new_year) == day(2022, 12, 31)
    assert resolve_event_time("last month", new_year) == day(2022, 12, 1)
    assert resolve_event_time("last week", new_year) == day(2022, 12, 19)
    assert resolve_event_time("next month", datetime(2023, 12, 15, tzinfo=UTC)) == day(2024, 1, 1)
    assert resolve_event_time("3 months ago", datetime(2023, 2, 10, tzinfo=UTC)) == day(2022, 11, 1)


def test_leap_day() -> None:
    # Given an anchor the day after a leap day
    march_first = datetime(2024, 3, 1, 12, tzinfo=UTC)
    # Then "yesterday" is 29 February, and "29 February 2024" is a valid date
    assert resolve_event_time("yesterday", march_first) == day(2024, 2, 29)
    assert resolve_event_time("on 29 February 2024", march_first) == day(2024, 2, 29)
    # And a day that does not exist falls back to the month it names
    assert resolve_event_time("on 29 February 2023", march_first) == day(2023, 2, 1)


def test_anchor_in_another_timezone_is_converted_to_utc() -> None:
    # Given an anchor at 01:00 on 9 May in UTC+3 (22:00 on 8 May UTC)
    anchor = datetime(2023, 5, 9, 1, tzinfo=timezone(timedelta(hours=3)))
    # Then "today" is 8 May UTC
    assert resolve_event_time("today", anchor) == day(2023, 5, 8)


def test_mentions_carry_span_granularity_and_preposition() -> None:
    # Given a text with two expressions
    text = "I started last week and finish by Friday"
    mentions = find_time_mentions(text, MONDAY)
    # Then both are found in order with their granularity and preposition
    assert [text[m.span[0] : m.span[1]] for m in mentions] == ["last week", "by Friday"]
    assert [m.granularity for m in mentions] == ["week", "day"]
    assert mentions[1].preposition == "by"
    assert mentions[0].end - mentions[0].start == timedelta(days=7)


@pytest.mark.parametrize(
    ("granularity", "with_prep", "without_prep"),
    [
        ("day", "on 7 May 2023", "7 May 2023"),
        ("week", "in the week of 7 May 2023", "the week of 7 May 2023"),
        ("month", "in May 2023", "May 2023"),
        ("year", "in 2023", "2023"),
    ],
)
def test_render_date_is_granularity_aware(
    granularity: str, with_prep: str, without_prep: str
) -> None:
    start = day(2023, 5, 7)
    assert render_date(start, granularity, True) == with_prep  # type: ignore[arg-type]
    assert render_date(start, granularity, False) == without_prep  # type: ignore[arg-type]


# Wednesday 10 May 2023, noon.
WEDNESDAY = datetime(2023, 5, 10, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("what did I do last week", day(2023, 5, 1), day(2023, 5, 8)),
        ("what happened yesterday?", day(2023, 5, 9), day(2023, 5, 10)),
        ("what happened in May 2023", day(2023, 5, 1), day(2023, 6, 1)),
        ("what did we discuss last month", day(2023, 4, 1), day(2023, 5, 1)),
        ("what did I do recently", day(2023, 4, 10), day(2023, 5, 11)),
        ("what happened in the past 3 days", day(2023, 5, 8), day(2023, 5, 11)),
        ("What did Caroline do in 2022?", day(2022, 1, 1), day(2023, 1, 1)),
        ("what did I do on Friday", day(2023, 5, 5), day(2023, 5, 6)),
        ("what do I have to do by Friday", day(2023, 5, 10), day(2023, 5, 13)),
        ("what did I do in March", day(2023, 3, 1), day(2023, 4, 1)),
        ("What did I do in June?", day(2022, 6, 1), day(2022, 7, 1)),
        ("anything this week?", day(2023, 5, 8), day(2023, 5, 15)),
    ],
)
def test_query_window(query: str, start: datetime, end: datetime) -> None:
    window = query_window(query, WEDNESDAY)
    assert window is not None
    assert (window.start, window.end) == (start, end)


def test_query_without_time_has_no_window() -> None:
    assert query_window("What is my favourite colour?", WEDNESDAY) is None
    assert query_window("Where does Caroline live?", WEDNESDAY) is None


def test_a_month_after_of_is_resolved_and_rendered_without_a_second_preposition() -> None:
    # Given a deadline phrased as "the end of April", written in March 2024
    march = datetime(2024, 3, 14, tzinfo=UTC)
    text = "I need to find an apartment by the end of April."
    # Then it resolves to April 2024 and the summary keeps "the end of"
    assert resolve_event_time(text, march) == day(2024, 4, 1)
    assert resolve_dates(text, march) == "I need to find an apartment by the end of April 2024."
