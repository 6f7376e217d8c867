"""A client usable from any thread and any event loop (issue 36, item 2): a call made on a loop
other than the client's own runs on the client's loop and is awaited without blocking either;
a client whose loop is blocked fails fast, before anything is stored."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from memstream import home_loop
from memstream.client import Memstream, open_memstream
from memstream.domain.errors import UnavailableError
from memstream.settings import Settings
from memstream.sync import LoopThread


@pytest.fixture
def homed(settings: Settings) -> Iterator[tuple[Memstream, LoopThread]]:
    """A client connected on an event loop running in a thread of its own."""
    thread = LoopThread("test-home")
    ms = thread.run(open_memstream(settings, workers=True))
    try:
        yield ms, thread
    finally:
        thread.run(ms.close())
        thread.stop()


def _message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_a_call_on_another_loop_runs_on_the_clients_loop_at_once(
    homed: tuple[Memstream, LoopThread],
) -> None:
    ms, _ = homed
    session = ms.session("other-loop")

    async def turn(i: int) -> float:
        started = time.perf_counter()
        await session.append_message(_message(f"turn {i}"))
        return time.perf_counter() - started

    # asyncio.run: a new loop each time, as Runner.run_sync makes one per run.
    times = [asyncio.run(turn(i)) for i in range(5)]
    history = asyncio.run(session.get_history())
    assert [m["parts"][0]["text"] for m in history] == [f"turn {i}" for i in range(5)]
    assert max(times) < 1.0, times  # was 5.0 s each: a future of one loop awaited on another


def test_writers_on_many_threads_and_loops_each_store_once(
    homed: tuple[Memstream, LoopThread],
) -> None:
    ms, _ = homed
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        async def write() -> None:
            for i in range(10):
                await ms.session(f"t{n}").append_message(_message(f"{n}.{i}"))

        try:
            asyncio.run(write())
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    for n in range(4):
        history = asyncio.run(ms.session(f"t{n}").get_history())
        assert [m["parts"][0]["text"] for m in history] == [f"{n}.{i}" for i in range(10)]


def test_a_blocked_client_loop_fails_fast_and_stores_nothing(
    homed: tuple[Memstream, LoopThread], monkeypatch: pytest.MonkeyPatch
) -> None:
    ms, thread = homed
    monkeypatch.setattr(home_loop, "TAKE_UP_SECONDS", 0.5)
    outcome: list[BaseException | None] = []

    def caller() -> None:
        try:
            asyncio.run(ms.session("blocked").append_message(_message("lost?")))
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    async def block_own_loop() -> float:
        # The client's loop waits, synchronously, for a thread that calls the client.
        started = time.perf_counter()
        other = threading.Thread(target=caller)
        other.start()
        other.join(30)
        return time.perf_counter() - started

    waited = thread.run(block_own_loop())
    assert waited < 5, waited  # not a hang
    assert len(outcome) == 1
    assert isinstance(outcome[0], UnavailableError), outcome
    assert "did not take the call up" in str(outcome[0])
    assert "connect_sync" in str(outcome[0])  # names the fix
    # Nothing ran: the session is empty, and the client still works.
    assert asyncio.run(ms.session("blocked").get_history()) == []
    asyncio.run(ms.session("blocked").append_message(_message("stored")))
    assert len(asyncio.run(ms.session("blocked").get_history())) == 1


def test_a_client_whose_loop_is_not_running_is_refused_at_once(settings: Settings) -> None:
    loop = asyncio.new_event_loop()
    try:
        ms = loop.run_until_complete(open_memstream(settings, workers=True))
        started = time.perf_counter()
        with pytest.raises(UnavailableError, match="not running"):
            asyncio.run(ms.session("idle").append_message(_message("x")))
        assert time.perf_counter() - started < 1
        loop.run_until_complete(ms.close())
    finally:
        loop.close()
    with pytest.raises(UnavailableError, match="closed"):
        asyncio.run(ms.session("idle").get_history())


def test_subscribe_from_another_loop(homed: tuple[Memstream, LoopThread]) -> None:
    ms, _ = homed
    session = ms.session("followed")

    async def follow() -> list[str]:
        seen: list[str] = []
        events = session.subscribe(after_seq=0)
        async for event in events:
            seen.append(type(event).__name__)
            if len(seen) == 2:
                break
        await events.aclose()  # type: ignore[attr-defined]
        return seen

    asyncio.run(session.append_message(_message("a")))
    asyncio.run(session.append_message(_message("b")))
    assert asyncio.run(follow()) == ["MessageAppended", "MessageAppended"]


def test_tools_execute_from_another_loop(homed: tuple[Memstream, LoopThread]) -> None:
    ms, thread = homed
    session = ms.session("tools").with_context("notes", description="Notes")

    async def tools() -> Any:
        return await session.tools()

    toolset = thread.run(tools())  # made on the client's loop, as an agent would get them
    result = asyncio.run(toolset.execute("set_context", {"label": "notes", "content": "hi"}))
    assert not result.startswith("Error"), result
    block = asyncio.run(session.tools())  # and from another loop again
    assert "set_context" in block
    assert thread.run(_block_content(session)) == "hi"


async def _block_content(session: Any) -> str:
    await session.tools()
    block = session.get_context_block("notes")
    return str(block.content)
