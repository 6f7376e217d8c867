"""``memstream mcp`` (issue 15, item 5): the session and memory tools served to the ``mcp``
package's own client, over stdio (the server a separate process the client launches) and over
streamable HTTP; what the tools write is in the log for every other client."""

from __future__ import annotations

import asyncio
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra (memstream[mcp])")

from mcp import Client, StdioServerParameters
from support.processes import MEMSTREAM, clean_env, json_of, memstream, stop

MODEL_ENV = {"HF_HUB_OFFLINE": "1"}


def _stdio(data_dir: Path, *args: str) -> StdioServerParameters:
    env = clean_env(MEMSTREAM_DATA_DIR=str(data_dir), **MODEL_ENV)
    return StdioServerParameters(command=MEMSTREAM, args=["mcp", *args], env=env)


def _text(result: Any) -> str:
    return "".join(part.text for part in result.content)


async def test_with_no_options_it_serves_a_memory_block_and_session_search(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = clean_env(MEMSTREAM_DATA_DIR=str(data))
    memstream(env, "append", "trip", "--text", "Take tram 28 to Alfama")
    async with Client(_stdio(data)) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert names == {"set_context", "session_search"}
        written = await client.call_tool(
            "set_context", {"label": "memory", "content": "Likes trams; vegetarian"}
        )
        assert not written.is_error
        assert _text(written).startswith("Written to memory.")
        found = await client.call_tool("session_search", {"query": "tram"})
        assert _text(found) == "[user] Take tram 28 to Alfama"
        # a tool's failure is a result marked as an error, not a protocol error
        bad = await client.call_tool("set_context", {"label": "nope", "content": "x"})
        assert bad.is_error
        assert _text(bad).startswith("Error:")
        unknown = await client.call_tool("drop_tables", {})
        assert unknown.is_error
        assert "unknown tool 'drop_tables'" in _text(unknown)
    # the block is in the log: another process reads it
    blocks = json_of(env, "context", "list", "--session", "")
    assert [(b["label"], b["content"]) for b in blocks] == [("memory", "Likes trams; vegetarian")]


async def test_a_session_with_blocks_and_a_profile_serves_the_memory_tools(tmp_path: Path) -> None:
    data = tmp_path / "data"
    args = (
        "--session",
        "chat-1",
        "--context",
        "notes:50",
        "--context",
        "facts",
        "--profile",
        "alice",
    )
    async with Client(_stdio(data, *args)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == {
            "set_context",
            "session_search",
            "remember",
            "recall",
            "list",
            "forget",
        }
        assert tools["set_context"].input_schema["properties"]["label"]["enum"] == [
            "notes",
            "facts",
        ]
        too_long = await client.call_tool(
            "set_context", {"label": "notes", "content": "word " * 200}
        )
        assert too_long.is_error  # the block's 50-token limit
        stored = await client.call_tool("remember", {"content": "Alice is allergic to peanuts"})
        assert _text(stored).startswith("Remembered ")
        memory_id = _text(stored).split()[1].rstrip(":")
        listed = await client.call_tool("list", {})
        assert memory_id in _text(listed)
        recalled = await client.call_tool("recall", {"query": "What is Alice allergic to?"})
        assert "peanuts" in _text(recalled)
        forgot = await client.call_tool("forget", {"memory_id": memory_id})
        assert _text(forgot) == f"Forgot {memory_id}."
        assert _text(await client.call_tool("list", {})) == "No memories."
        empty = await client.call_tool("remember", {"content": "  "})
        assert empty.is_error


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("w") as out:
        return subprocess.Popen([MEMSTREAM, *args], env=env, stdout=out, stderr=subprocess.STDOUT)


async def test_streamable_http(tmp_path: Path) -> None:
    port = _free_port()
    env = clean_env(MEMSTREAM_DATA_DIR=str(tmp_path / "data"), **MODEL_ENV)
    server = _start(env, tmp_path / "mcp.log", "mcp", "--http", str(port))
    try:
        names: set[str] = set()
        for _ in range(200):
            try:
                async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                    names = {tool.name for tool in (await client.list_tools()).tools}
                    done = await client.call_tool(
                        "set_context", {"label": "memory", "content": "over HTTP"}
                    )
                    assert not done.is_error
                break
            except Exception:  # not listening yet
                if server.poll() is not None:
                    raise
                await asyncio.sleep(0.1)
        assert names == {"set_context", "session_search"}
    finally:
        assert stop(server) == 0, (tmp_path / "mcp.log").read_text()


def test_bad_options_are_refused_before_serving(tmp_path: Path) -> None:
    env = clean_env(MEMSTREAM_DATA_DIR=str(tmp_path / "data"))
    bad = memstream(env, "mcp", "--context", "", expect=1)
    assert "--context ''" in bad.stderr
    long_id = memstream(env, "mcp", "--session", "s" * 300, expect=1)
    assert "session_id is 300 characters; the limit is 256" in long_id.stderr
