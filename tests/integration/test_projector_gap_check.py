"""The projector's check that its consumer skipped none of its events (``_check_no_gap``), on
a real server: through the direct gets, and through the leader when the replica answering the
direct gets trails it (a stand-in log whose direct gets find nothing: a real follower cannot be
made to trail on demand)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from memstream.client import Memstream, open_memstream
from memstream.projections.ports import ReadModelRewound
from memstream.settings import Settings
from memstream.workers.log.event_log import EventLog, LogEntry
from memstream.workers.projector import ProjectorWorker


class TrailingLog(EventLog):
    """The same stream, its direct gets answered by a replica that holds none of it yet."""

    async def read_batch(
        self, filter_subject: str, start_seq: int, batch: int = 1000
    ) -> tuple[list[LogEntry], int]:
        return [], 0


@dataclass
class Projecting:
    """What the check reads of its projector."""

    log: EventLog
    filter_subject: str
    _committed: int
    durable: str = "no-such-consumer"

    async def check(self, first: int) -> None:
        await ProjectorWorker._check_no_gap(self, first)  # type: ignore[arg-type]


@pytest.fixture
async def log_of_two_sessions(settings: Settings) -> AsyncIterator[tuple[Memstream, list[int]]]:
    """A log whose sessions ``s`` and ``t`` got one message each in turn (s, t, s, t, …);
    the sequences of ``s``'s events."""
    ms = await open_memstream(settings, workers=False)
    try:
        ours = []
        for index in range(4):
            ours.append(await ms.session("s").append_message(_message(f"s{index}")))
            await ms.session("t").append_message(_message(f"t{index}"))
        yield ms, ours
    finally:
        await ms.close()


def _projector_of_s(ms: Memstream, trailing: bool, committed: int) -> Projecting:
    """A projector of session ``s`` that committed up to ``committed``, reading the log
    through ``ms`` or (``trailing``) through a replica that holds none of it yet."""
    log = TrailingLog(ms.core.nats, ms.core.log.stream, ms.settings.subject_prefix)
    subject = ms.core.commands.session_subject("s")
    return Projecting(log if trailing else ms.core.log, subject, _committed=committed)


def _message(id: str) -> dict[str, object]:
    return {"id": id, "role": "user", "content": id}


@pytest.mark.parametrize("trailing", [False, True], ids=["direct", "leader"])
async def test_a_skipped_event_of_its_own_rewinds_the_projector(
    log_of_two_sessions: tuple[Memstream, list[int]], trailing: bool
) -> None:
    ms, ours = log_of_two_sessions
    projector = _projector_of_s(ms, trailing, committed=ours[0])
    # When the consumer delivers s's fourth event after the first was committed
    # Then the second and third were skipped: the projector binds again from the second
    with pytest.raises(ReadModelRewound, match=f"from {ours[1]}"):
        await projector.check(ours[3])


@pytest.mark.parametrize("trailing", [False, True], ids=["direct", "leader"])
async def test_other_subjects_in_between_are_no_gap(
    log_of_two_sessions: tuple[Memstream, list[int]], trailing: bool
) -> None:
    ms, ours = log_of_two_sessions
    projector = _projector_of_s(ms, trailing, committed=ours[1])
    # When the consumer delivers s's third event after the second was committed (one event of
    # t lies between them), then nothing was skipped
    await projector.check(ours[2])
    # and neither when it delivers the event right after the committed one
    await projector.check(ours[1] + 1)
