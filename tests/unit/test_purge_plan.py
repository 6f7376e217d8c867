"""The pure parts of ``admin purge``: the grace period's syntax and limit, and the purge event
(sequences and counts only, split so that one event names at most 10,000 subjects)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memstream.domain.errors import InvalidInputError
from memstream.domain.purge_log import PURGE_EVENT_MAX_SUBJECTS, PurgeLog
from memstream.workers.admin.purge import PurgeUnit, _chunks, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0s", timedelta(0)),
        ("90m", timedelta(minutes=90)),
        ("30d", timedelta(days=30)),
        ("1d12h", timedelta(days=1, hours=12)),
        ("2w", timedelta(weeks=2)),
        (" 12h ", timedelta(hours=12)),
    ],
)
def test_a_grace_period_is_counts_of_units(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "30", "d", "-1d", "1y", "1.5d", "30 d", "1d 2h", "P30D"])
def test_anything_else_is_refused_naming_the_option_and_the_value(text: str) -> None:
    with pytest.raises(InvalidInputError, match=r"--older-than .* is not a duration"):
        parse_duration(text)


def test_a_grace_period_over_a_hundred_years_is_refused() -> None:
    assert parse_duration("36500d") == timedelta(days=36_500)
    with pytest.raises(InvalidInputError, match=r"--older-than '36501d' is over the limit"):
        parse_duration("36501d")


def test_the_purge_event_holds_sequences_and_counts_only() -> None:
    log = PurgeLog.empty("default")
    assert (
        log.record(
            sequences=[],
            subjects=0,
            events=0,
            sessions=0,
            profiles=0,
            older_than="0s",
            deleted_before="2026-01-01T00:00:00Z",
        )
        == []
    )
    (event,) = log.record(
        sequences=[9, 3, 5],
        subjects=3,
        events=12,
        sessions=1,
        profiles=0,
        older_than="30d",
        deleted_before="2026-01-01T00:00:00Z",
    )
    assert event.sequences == [3, 5, 9]
    assert event.originator_version == 1
    fields = set(vars(event)) - {"originator_id", "originator_version", "timestamp"}
    assert fields == {
        "sequences",
        "subjects",
        "events",
        "sessions",
        "profiles",
        "older_than",
        "deleted_before",
    }
    with pytest.raises(InvalidInputError, match="at most 10000 subjects, not 10001"):
        log.record(
            sequences=list(range(1, PURGE_EVENT_MAX_SUBJECTS + 2)),
            subjects=PURGE_EVENT_MAX_SUBJECTS + 1,
            events=0,
            sessions=0,
            profiles=0,
            older_than="0s",
            deleted_before="2026-01-01T00:00:00Z",
        )


def test_a_large_purge_is_recorded_in_events_of_at_most_10000_subjects() -> None:
    when = datetime(2026, 1, 1, tzinfo=UTC)

    def unit(index: int, subjects: int) -> PurgeUnit:
        named = tuple((f"ms.default.block.{index}-{n}", index * 10 + n, 1) for n in range(subjects))
        return PurgeUnit("session", "default", f"s{index}", when, named)

    units = [unit(i, 3) for i in range(7000)]
    chunks = list(_chunks(units))
    assert [sum(len(u.subjects) for u in chunk) for chunk in chunks] == [9999, 9999, 1002]
    assert [u for chunk in chunks for u in chunk] == units
