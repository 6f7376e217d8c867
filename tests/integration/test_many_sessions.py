"""No cliff at many sessions: a session is decided on the read model plus the events after it.

A new process's first commands on a long session read none of its events from the log when the
read model has them all (and only the missing ones when it does not); a writer over more
sessions than it caches stays correct.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from support.processes import script_json

from memstream.client import Memstream, open_memstream
from memstream.settings import Settings
from memstream.workers.log.aggregate_store import CACHE_SIZE, GUARDED_DECISIONS

SCRIPT = Path(__file__).resolve().parents[1] / "support" / "session_process.py"
LONG = 3_000  # messages that process A appends


def _process(*args: str, script: Path = SCRIPT) -> dict[str, Any]:
    """Run a support script (tests/support/session_process.py by default) and read its JSON."""
    result: dict[str, Any] = script_json(script, *args)
    return result


def _args(mode: str, settings: Settings, data_dir: Path) -> list[str]:
    return [mode, str(settings.nats_url), settings.stream, str(data_dir), "long"]


async def test_a_new_process_decides_its_first_appends_without_reading_the_session(
    settings: Settings,
) -> None:
    # Given process A, which appended 3,000 messages (with a side branch) and exited
    filled = await asyncio.to_thread(_process, *_args("fill", settings, settings.data_dir), "3000")
    # When process B, a new process on the same data dir, runs its first commands
    result = await asyncio.to_thread(_process, *_args("first", settings, settings.data_dir))
    # Then the append of an existing id was a no-op, the omitted parent was A's latest leaf,
    # the deep parent was found and the unknown one refused
    assert result["existing"] == result["before"] == filled["stream_last_seq"]
    assert result["parents"] == {
        "new-leaf": filled["last"],
        "new-branch": "m00500",
    }
    assert result["omitted"] == result["before"] + 1
    assert result["deep"] == result["before"] + 2
    assert "no-such-parent" in result["refused"]
    # And B read no event of the session from the log: the read model had them all
    assert result["entries_read"] == 0


async def test_a_process_with_an_empty_read_model_reads_the_events_it_lacks(
    settings: Settings, tmp_path: Path
) -> None:
    # Given process A, which appended 3,000 messages and exited
    await asyncio.to_thread(_process, *_args("fill", settings, settings.data_dir), "3000")
    # When process B runs its first commands with a read-model copy of its own, still empty
    # (a remote client with no projector)
    result = await asyncio.to_thread(_process, *_args("first", settings, tmp_path / "copy"))
    # Then it decides exactly as on a complete read model
    assert result["parents"] == {"new-leaf": "m02999", "new-branch": "m00500"}
    assert "no-such-parent" in result["refused"]
    # by reading the session's events from the log (9 events: 2 chains, 2 appends, 5 chains)
    assert result["entries_read"] == 9


async def _histories(ms: Memstream, sessions: list[str]) -> dict[str, list[str]]:
    await ms.sync("sessions")  # both writers' events, not only this client's
    return {s: [m["id"] for m in await ms.session(s).get_history()] for s in sessions}


async def test_a_writer_over_more_sessions_than_it_caches_stays_correct(
    ms: Memstream, settings: Settings
) -> None:
    # Given 1,000 sessions, four times as many as a writer caches, and a second writer
    sessions = [f"s{i:04d}" for i in range(1000)]
    assert len(sessions) > 3 * CACHE_SIZE
    other = await open_memstream(settings, workers=False)
    try:
        # When both append round-robin over all of them, each message under the latest leaf,
        # the second writer every third round (so the first one's sessions move behind its back)
        for round_ in range(6):
            writer = other if round_ % 3 == 2 else ms
            for name in sessions:
                message = {"id": f"{name}-{round_}", "role": "user", "content": f"r{round_}"}
                await writer.session(name).append_message(message)
            # and each writer re-appends an id that exists (a no-op) in some sessions
            for name in sessions[::97]:
                await writer.session(name).append_message(
                    {"id": f"{name}-0", "role": "user", "content": "again"}
                )
        # Then every session is one chain of its six messages, in order
        histories = await _histories(ms, sessions)
        assert histories == {s: [f"{s}-{r}" for r in range(6)] for s in sessions}
    finally:
        await other.close()
    # And the writer's cache stayed bounded
    assert len(ms.core.commands.sessions._cache) == CACHE_SIZE


CONTEXT_SCRIPT = Path(__file__).resolve().parents[1] / "support" / "context_process.py"


def _context_process(*args: str) -> dict[str, Any]:
    return _process(*args, script=CONTEXT_SCRIPT)


async def test_a_new_process_decides_on_a_long_written_block_without_reading_it(
    settings: Settings,
) -> None:
    # Given process A, which appended 400 lines to a block (each write carries the whole block)
    # and wrote 400 entries of a search block, and exited
    args = (str(settings.nats_url), settings.stream, str(settings.data_dir), "400")
    filled = await asyncio.to_thread(_context_process, "fill", *args)
    # When process B, a new process on the same data dir, runs its first context commands
    result = await asyncio.to_thread(_context_process, "first", *args)
    # Then the append joined the whole content, an unchanged entry was a no-op, a changed one
    # was written
    before, after_append, after_same, after_change = result["seqs"]
    assert before == filled["stream_last_seq"]
    assert result["lines"] == 401
    assert result["content_tail"].endswith("line 399\nlast line")
    assert (after_append, after_same, after_change) == (before + 1, before + 1, before + 2)
    # And B read none of the 800 events of the block and the search block from the log
    assert result["entries_read"] == 0


async def test_a_read_your_writes_loop_keeps_deciding_without_readings(settings: Settings) -> None:
    # Given a client whose projector runs in its process, appending to one session and reading
    # its history after each append (an agent loop: the read model has each write before the
    # next decision)
    ms = await open_memstream(settings, workers=True)
    try:
        session = ms.session("loop")
        snapshots = ms.core.commands.sessions.snapshots
        assert snapshots is not None
        readings = 0
        reading = snapshots.reading

        def counted() -> Any:
            nonlocal readings
            readings += 1
            return reading()

        snapshots.reading = counted  # type: ignore[method-assign]
        appends = 4 * GUARDED_DECISIONS
        for n in range(appends):
            await session.append_message({"id": f"m{n}", "role": "user", "content": f"turn {n}"})
            assert (await session.get_history())[-1]["id"] == f"m{n}"
        # Then the session was read whole only once per GUARDED_DECISIONS decisions (plus its
        # first restore), not on every decision once the first GUARDED_DECISIONS were used up
        assert readings <= appends // GUARDED_DECISIONS + 1, readings
        assert await session.get_path_length() == appends
    finally:
        await ms.close()
