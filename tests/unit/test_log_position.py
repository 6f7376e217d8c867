"""A copy's tracking rows against the log: lost and replaced tails named, purges tolerated."""

from __future__ import annotations

from memstream.workers.log.event_log import event_identity
from memstream.workers.log.log_position import check_copy


class FakeLog:
    """A log of ``end`` events, each identified as ``e<seq>`` unless ``events`` says otherwise
    (``None``: the event was erased)."""

    def __init__(self, end: int, events: dict[int, str | None] | None = None) -> None:
        self.end = end
        self.events = events or {}
        self.asked: list[int] = []

    async def stream_last_seq(self) -> int:
        return self.end

    async def identity_at(self, seq: int) -> str | None:
        self.asked.append(seq)
        if seq > self.end:
            return None
        return self.events.get(seq, f"e{seq}")


async def test_a_copy_at_or_behind_the_log_with_the_same_events_stands_on_it() -> None:
    log = FakeLog(150)
    marks = [("sessions", 150, "e150"), ("vectors", 120, "e120"), ("context", 150, "e150")]
    assert await check_copy(log, marks) is None
    # one look per distinct sequence
    assert sorted(log.asked) == [120, 150]


async def test_an_empty_copy_is_not_checked() -> None:
    assert await check_copy(FakeLog(0), []) is None


async def test_a_log_that_ends_before_the_copy_is_a_lost_tail_named_by_its_range() -> None:
    gap = await check_copy(FakeLog(100), [("sessions", 150, "e150"), ("vectors", 90, "e90")])
    assert gap is not None
    assert (gap.tracked, gap.log_end, gap.first, gap.replaced) == (150, 100, 101, False)
    assert gap.rows == ("sessions",)
    assert gap.describe() == (
        "read model ahead of the log: tracked 150, log ends at 100: "
        "events 101-150 are not in the log"
    )
    assert gap.refusal("db").endswith("; run `memstream projections rebuild`")


async def test_another_event_at_a_tracked_sequence_is_a_replaced_tail() -> None:
    # Given a log that lost 101..150 and took 60 other events at 101..160
    log = FakeLog(160, {seq: f"other{seq}" for seq in range(101, 161)})
    gap = await check_copy(log, [("sessions", 150, "e150"), ("vectors", 90, "e90")])
    assert gap is not None
    assert gap.replaced
    assert (gap.tracked, gap.log_end, gap.first) == (150, 160, 150)
    assert "holds another event at 150" in gap.describe()


async def test_an_erased_event_at_a_tracked_sequence_is_checked_against_the_end_only() -> None:
    # (memstream admin purge deletes events: the log no longer holds them, on purpose)
    assert await check_copy(FakeLog(150, {150: None}), [("sessions", 150, "e150")]) is None


async def test_a_row_without_an_identity_is_checked_against_the_end_only() -> None:
    log = FakeLog(150, {150: "x"})
    assert await check_copy(log, [("sessions", 150, None)]) is None
    assert log.asked == []
    assert await check_copy(log, [("sessions", 151, None)]) is not None


def test_an_event_is_identified_by_its_message_id_else_by_its_payload() -> None:
    assert event_identity(b"{}", {"Nats-Msg-Id": "cmd-1:0"}) == "cmd-1:0"
    digest = event_identity(b'{"a": 1}', {})
    assert digest.startswith("sha256:")
    assert digest == event_identity(b'{"a": 1}', None)
    assert digest != event_identity(b'{"a": 2}', {})
