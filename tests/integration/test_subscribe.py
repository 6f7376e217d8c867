"""Session.subscribe(): typed domain events of one session, straight from the log."""

from __future__ import annotations

import asyncio

import pytest

from memstream.client import Memstream
from memstream.domain.errors import InvalidInputError
from memstream.domain.session import SessionAggregate


async def test_subscribe_yields_typed_events_of_this_session_only(ms: Memstream) -> None:
    # Given a session with one message and a subscriber from the beginning of the log
    session = ms.session("watched")
    await session.append_message({"id": "m1", "role": "user", "content": "first"})
    received: list[object] = []

    async def collect() -> None:
        async for event in session.subscribe(after_seq=0):
            received.append(event)
            if len(received) == 3:
                return

    task = asyncio.create_task(collect())
    # When more events happen in this session and in another one
    await ms.session("other").append_message({"id": "x", "role": "user", "content": "noise"})
    await session.update_message({"id": "m1", "role": "user", "content": "edited"})
    await session.delete_messages(["m1"])
    await asyncio.wait_for(task, 10)
    # Then the subscriber got exactly this session's events, typed and in order
    assert [type(e).__name__ for e in received] == [
        "MessageAppended",
        "MessageUpdated",
        "MessagesDeleted",
    ]
    assert isinstance(received[0], SessionAggregate.MessageAppended)
    assert received[0].message_id == "m1"
    assert received[2].message_ids == ["m1"]


async def test_subscribe_and_block_lookups_refuse_arguments_of_the_wrong_type(
    ms: Memstream,
) -> None:
    session = ms.session("typed")
    for bad in ("x", -1, 1.5, True):
        with pytest.raises(InvalidInputError, match="after_seq"):
            await anext(aiter(session.subscribe(bad)))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="label must be a string, not list"):
        session.get_context_block(["x"])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="label must be a string, not list"):
        session.remove_context(["x"])  # type: ignore[arg-type]
