"""A fake OpenAI-compatible endpoint: a minimal HTTP/1.1 server answering from a script."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest


@dataclass
class Reply:
    status: int = 200
    body: str | bytes = ""
    headers: dict[str, str] = field(default_factory=dict)


def completion(content: object) -> Reply:
    return Reply(
        200, json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]})
    )


HANG = "hang"  # the server reads the request and never answers
DROP = "drop"  # the server closes the connection without an answer


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class FakeLLM:
    """A minimal HTTP/1.1 server on a random local port that answers from a script, in order
    (the last entry repeats), and records every request."""

    def __init__(self, *script: Reply | str) -> None:
        self.script = list(script)
        self.requests: list[Request] = []
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def url(self, userinfo: str = "") -> str:
        return f"http://{userinfo}127.0.0.1:{self.port}/v1"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        for task in list(self._handlers):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._answer(reader, writer)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self._handlers.discard(task)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, path, _ = request_line.split(" ", 2)
        headers = {}
        for line in header_lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        self.requests.append(Request(method, path, headers, body))
        step = self.script[min(len(self.requests), len(self.script)) - 1]
        if step == HANG:
            await asyncio.sleep(3600)
        if not isinstance(step, Reply):
            return
        payload = step.body.encode() if isinstance(step.body, str) else step.body
        lines = [f"HTTP/1.1 {step.status} Status", "Content-Type: application/json"]
        lines += [f"{name}: {value}" for name, value in step.headers.items()]
        lines += [f"Content-Length: {len(payload)}", "Connection: close", "", ""]
        writer.write("\r\n".join(lines).encode() + payload)
        await writer.drain()


@pytest.fixture
async def llm() -> AsyncIterator[Callable[..., Awaitable[FakeLLM]]]:
    """Start fake servers answering from a script; stopped after the test."""
    servers: list[FakeLLM] = []

    async def serve(*script: Reply | str) -> FakeLLM:
        server = FakeLLM(*script)
        await server.start()
        servers.append(server)
        return server

    yield serve
    for server in servers:
        await server.stop()
