"""The OpenAI Agents SDK session on memstream (issue 15, item 2): the SDK's own protocol check,
and every item type it stores round-tripped — compared with the SDK's own ``SQLiteSession``
doing the same operations."""

from __future__ import annotations

import asyncio
import copy
import json
import sys
from asyncio.subprocess import PIPE
from pathlib import Path
from typing import Any

import pytest
from support.deployment import deployment_env

agents = pytest.importorskip("agents", reason="the openai-agents extra (memstream[agents])")

from agents import SQLiteSession  # noqa: E402
from agents.memory import Session as AgentsSession  # noqa: E402
from agents.memory import SessionSettings  # noqa: E402
from openai.types.responses import (  # noqa: E402
    EasyInputMessageParam,
    ResponseFunctionToolCallParam,
    ResponseOutputMessageParam,
    ResponseReasoningItemParam,
)
from openai.types.responses.response_input_item_param import FunctionCallOutput  # noqa: E402

from memstream.client import Memstream, open_memstream  # noqa: E402
from memstream.domain.errors import InvalidInputError  # noqa: E402
from memstream.integrations.openai_agents import MemstreamSession  # noqa: E402

pytestmark = pytest.mark.both_backends


def _items() -> list[Any]:
    """One turn of an agent run as the SDK stores it: the user's input, reasoning, two tool
    calls and their outputs, a hosted tool call, and the final output message."""
    user = EasyInputMessageParam(role="user", content="What's the weather in Lisbon and Porto?")
    reasoning = ResponseReasoningItemParam(
        id="rs_1",
        type="reasoning",
        summary=[{"type": "summary_text", "text": "Two cities: call the tool twice."}],
        encrypted_content="gAAAA...",
    )
    call_a = ResponseFunctionToolCallParam(
        type="function_call",
        call_id="call_1",
        name="weather",
        arguments='{"city":"Lisbon"}',
        id="fc_1",
        status="completed",
    )
    call_b = ResponseFunctionToolCallParam(
        type="function_call", call_id="call_2", name="weather", arguments='{"city": "Porto"}'
    )
    out_a = FunctionCallOutput(type="function_call_output", call_id="call_1", output="21 °C, clear")
    out_b = FunctionCallOutput(
        type="function_call_output",
        call_id="call_2",
        output=[{"type": "input_text", "text": "18 °C, fog"}],
    )
    search = {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "Porto fog"},
    }
    answer = ResponseOutputMessageParam(
        id="msg_1",
        type="message",
        role="assistant",
        status="completed",
        content=[
            {"type": "output_text", "text": "Lisbon 21 °C; Porto 18 °C in fog.", "annotations": []}
        ],
    )
    image = {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "And this place?"},
            {"type": "input_image", "image_url": "https://example.com/x.png", "detail": "auto"},
            {"type": "input_file", "file_id": "file-1"},
        ],
    }
    return [user, reasoning, call_a, call_b, out_a, out_b, search, answer, image]


async def test_it_is_an_agents_sdk_session(ms: Memstream) -> None:
    session = MemstreamSession("agents-protocol", ms)
    assert isinstance(session, AgentsSession)  # the SDK's own runtime protocol check
    assert session.session_id == "agents-protocol"


async def test_every_item_type_round_trips_like_the_sdks_own_session(ms: Memstream) -> None:
    ours = MemstreamSession("agents-items", ms)
    theirs = SQLiteSession("agents-items")
    items = _items()
    for session in (ours, theirs):
        await session.add_items(copy.deepcopy(items[:4]))
        await session.add_items(copy.deepcopy(items[4:]))
    assert await ours.get_items() == await theirs.get_items() == items
    for limit in (0, 1, 3, 100):
        assert await ours.get_items(limit) == await theirs.get_items(limit)
    # the latest item comes off, and the one before it next
    assert await ours.pop_item() == await theirs.pop_item() == items[-1]
    assert await ours.pop_item() == await theirs.pop_item() == items[-2]
    await ours.add_items([copy.deepcopy(items[-1])])
    await theirs.add_items([copy.deepcopy(items[-1])])
    assert await ours.get_items() == await theirs.get_items()
    await ours.clear_session()
    await theirs.clear_session()
    assert await ours.get_items() == await theirs.get_items() == []
    assert await ours.pop_item() is None


async def test_items_are_session_messages_others_can_search_and_pair(ms: Memstream) -> None:
    ours = MemstreamSession("agents-search", ms)
    await ours.add_items(copy.deepcopy(_items()))
    session = ms.session("agents-search")
    assert [h["content"] for h in await session.search("fog")] == [
        "Lisbon 21 °C; Porto 18 °C in fog."
    ]
    outputs = [m for m in await session.get_history() if m["role"] == "tool"]
    assert [m["parts"][0]["toolName"] for m in outputs] == ["weather", "weather"]
    # messages appended by other means read as the SDK would take them
    await session.append_message({"role": "user", "content": "Thanks"})
    assert (await ours.get_items(1)) == [{"role": "user", "content": "Thanks"}]


async def test_session_settings_limit_and_bad_items(ms: Memstream) -> None:
    ours = MemstreamSession("agents-limit", ms, session_settings=SessionSettings(limit=2))
    await ours.add_items(copy.deepcopy(_items()))
    assert await ours.get_items() == _items()[-2:]
    before = await ours.get_items(100)
    bad = [
        {"role": "user", "content": "ok"},
        {"type": "function_call", "call_id": "c", "name": "f"},
    ]
    with pytest.raises(InvalidInputError, match="function_call item: arguments must be a string"):
        await ours.add_items(bad)
    assert await ours.get_items(100) == before  # nothing of the batch was written
    with pytest.raises(InvalidInputError, match="limit must be an integer"):
        await ours.get_items("3")  # type: ignore[arg-type]


async def test_session_settings_as_the_sdks_own_sessions_take_them(ms: Memstream) -> None:
    for settings, limit in ((None, None), ({"limit": 2}, 2), (SessionSettings(limit=3), 3)):
        ours = MemstreamSession("agents-settings", ms, session_settings=settings)
        theirs = SQLiteSession("agents-settings", session_settings=settings)
        assert ours.session_settings == theirs.session_settings
        assert isinstance(ours.session_settings, SessionSettings)
        assert ours.session_settings.limit == limit
    with pytest.raises(TypeError):
        SQLiteSession("x", session_settings={"limt": 2})
    with pytest.raises(TypeError):
        MemstreamSession("x", ms, session_settings={"limt": 2})
    ours = MemstreamSession("agents-settings", ms, session_settings={"limit": 1})
    await ours.add_items([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert await ours.get_items() == [{"role": "user", "content": "b"}]
    assert await ours.get_items(-1) == []  # as the SDK's: a non-positive limit gives nothing


def test_a_sync_client_serves_the_session_from_any_loop(settings: Any) -> None:
    import asyncio

    from memstream.sync import connect_sync

    with connect_sync(settings=settings, workers=True) as client:
        ours = MemstreamSession("agents-sync", client)

        async def turn(text: str) -> list[Any]:
            await ours.add_items([{"role": "user", "content": text}])
            return await ours.get_items()

        assert asyncio.run(turn("a")) == [{"role": "user", "content": "a"}]
        assert asyncio.run(turn("b"))[-1] == {"role": "user", "content": "b"}
        assert asyncio.run(ours.pop_item()) == {"role": "user", "content": "b"}


async def test_concurrent_pops_each_take_a_different_message(ms: Memstream) -> None:
    ours = MemstreamSession("pops", ms)
    await ours.add_items([{"role": "user", "content": f"m{i}"} for i in range(6)])
    # A second client (its own aggregate cache, as another process has) pops too.
    other_client = await open_memstream(ms.settings, workers=False)
    try:
        theirs = MemstreamSession("pops", other_client)
        popped = await asyncio.gather(*(s.pop_item() for s in [ours, theirs] * 5))
    finally:
        await other_client.close()
    contents = [item["content"] for item in popped if item is not None]
    assert sorted(contents) == [f"m{i}" for i in range(6)]  # each exactly once
    assert popped.count(None) == 4
    assert await ours.get_items() == []


# Another process: once told to on stdin, pops COUNT items of SESSION concurrently and prints
# their contents as JSON.
_POPPER = """
import asyncio, json, sys
import memstream
from memstream.integrations.openai_agents import MemstreamSession

async def main():
    async with memstream.connect(workers=False) as ms:
        session = MemstreamSession(sys.argv[1], ms)
        await session.get_items()  # connected and read: then wait for the signal to pop
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        popped = await asyncio.gather(*(session.pop_item() for _ in range(int(sys.argv[2]))))
        print(json.dumps([None if p is None else p["content"] for p in popped]))

asyncio.run(main())
"""


@pytest.mark.sqlite_only  # the other process reads this data dir's read models
async def test_pops_from_two_processes_take_each_item_once(ms: Memstream, tmp_path: Path) -> None:
    ours = MemstreamSession("pops-apart", ms)
    await ours.add_items([{"role": "user", "content": f"m{i}"} for i in range(12)])
    script = tmp_path / "popper.py"
    script.write_text(_POPPER, encoding="utf-8")
    env = deployment_env(ms.settings)
    other = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        "pops-apart",
        "8",
        env=env,
        stdin=PIPE,
        stdout=PIPE,
        stderr=PIPE,
    )
    assert other.stdin is not None
    assert other.stdout is not None
    assert await asyncio.wait_for(other.stdout.readline(), 120) == b"ready\n"
    other.stdin.write(b"go\n")  # both processes pop at once
    await other.stdin.drain()
    mine = await asyncio.gather(*(ours.pop_item() for _ in range(8)))
    out, err = await asyncio.wait_for(other.communicate(), 120)
    assert other.returncode == 0, err.decode()[-3000:]
    theirs = json.loads(out.decode().strip().splitlines()[-1])
    contents = [item["content"] for item in mine if item is not None]
    contents += [content for content in theirs if content is not None]
    assert sorted(contents) == sorted(f"m{i}" for i in range(12))  # each exactly once
    assert await ours.get_items() == []
