"""A memstream session as a LangChain chat message history (``memstream[langchain]``).

:class:`MemstreamChatMessageHistory` is a ``BaseChatMessageHistory`` with sync and async
methods. Each LangChain message is one message of the session (role ``user``, ``assistant``,
``system``, ``tool``, or a ``ChatMessage``'s own role) whose parts hold its text, content
blocks and tool calls or tool result; its other fields (ids, ``additional_kwargs``,
``response_metadata``, usage, …) are kept under the message's ``langchain`` key, so that the
very message comes back. Messages other clients appended read as LangChain messages too::

    history = MemstreamChatMessageHistory("chat-1", ms)          # ms: memstream.connect()
    chain = RunnableWithMessageHistory(model, lambda session_id: history)

Both kinds of methods work from any thread and event loop, with an async client or one of
:func:`memstream.connect_sync`, but for one case: on an async client's own event loop, a sync
method would block the loop it waits for, so ``add_messages`` and ``clear`` are refused there
at once (naming the fix), and ``messages`` is read without waiting when it can be.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)

from memstream.domain.errors import InvalidInputError, UnavailableError
from memstream.domain.limits import BATCH_MAX_MESSAGES
from memstream.home_loop import caller_loop, run_now, wait_home
from memstream.sync import async_client

if TYPE_CHECKING:
    from memstream.client import Memstream
    from memstream.sync import SyncMemstream

# The message-level record of a LangChain message's other fields: {"type", "data", ...}.
KEY = "langchain"
META = "providerMetadata"
PROVIDER = "langchain"
TOOL_PART = "dynamic-tool"
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_TYPES = {"user": "human", "assistant": "ai", "system": "system", "developer": "system"}


class MemstreamChatMessageHistory(BaseChatMessageHistory):
    """The chat history of the memstream session ``session_id`` of ``client`` (a connected
    async client, or one of :func:`memstream.connect_sync`), usable from any thread and event
    loop (see :mod:`memstream.home_loop`)."""

    def __init__(self, session_id: str, client: Memstream | SyncMemstream) -> None:
        self.session_id = session_id
        self._client = async_client(client)
        self._session = self._client.session(session_id)

    # -- sync ----------------------------------------------------------------------------------

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The history's messages. On the client's own event loop (which this thread would
        block) it is read from the read model when that has this client's writes, as it
        does unless the projector is elsewhere and behind."""
        if caller_loop() is self._client.core.loop:
            done, history = run_now(self._session.get_history())
            if not done:
                raise UnavailableError(
                    "the sync messages of MemstreamChatMessageHistory, read on its async "
                    "client's own event loop, cannot wait for the read model to catch up "
                    "with this client's writes: use aget_messages() there, or a client of "
                    "memstream.connect_sync()"
                )
            return [to_langchain(message) for message in history or ()]
        return [to_langchain(message) for message in self._blocking("get_history")]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        for chain in _chains(messages):
            self._blocking("append_messages", chain)

    def clear(self) -> None:
        self._blocking("clear_messages")

    # -- async ---------------------------------------------------------------------------------

    async def aget_messages(self) -> list[BaseMessage]:
        return [to_langchain(message) for message in await self._session.get_history()]

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        for chain in _chains(messages):
            await self._session.append_messages(chain)

    async def aclear(self) -> None:
        await self._session.clear_messages()

    # -- plumbing ------------------------------------------------------------------------------

    def _blocking(self, method: str, *args: Any) -> Any:
        """A session method's result, waited for by this thread (on the client's loop: a
        write would wait for itself, so it is refused at once, naming the fix)."""
        if caller_loop() is self._client.core.loop:
            raise InvalidInputError(
                f"the sync {method} of MemstreamChatMessageHistory cannot wait on the event "
                "loop of its async client: use aget_messages/aadd_messages/aclear there, or a "
                "client of memstream.connect_sync()"
            )
        return wait_home(self._client.core.loop, lambda: getattr(self._session, method)(*args))


def _chains(messages: Sequence[BaseMessage]) -> list[list[dict[str, Any]]]:
    """The stored form of ``messages`` in chains of up to 500 (a batch's calls name its
    results)."""
    names: dict[str, str] = {}
    stored = [from_langchain(message, names) for message in messages]
    return [stored[i : i + BATCH_MAX_MESSAGES] for i in range(0, len(stored), BATCH_MAX_MESSAGES)]


def from_langchain(
    message: BaseMessage, tool_names: dict[str, str] | None = None
) -> dict[str, Any]:
    """The stored form of a LangChain message.

    Raises:
        InvalidInputError: ``message`` is not a LangChain message.
    """
    if not isinstance(message, BaseMessage):
        raise InvalidInputError(
            f"message must be a LangChain BaseMessage, not {type(message).__name__}"
        )
    names = {} if tool_names is None else tool_names
    data = message.model_dump(exclude_defaults=True)
    data.pop("type", None)
    content = data.pop("content", "")
    record: dict[str, Any] = {"type": message.type}
    parts: list[dict[str, Any]] = []
    if isinstance(message, ToolMessage):
        call_id = data.pop("tool_call_id")
        parts.append(
            {
                "type": TOOL_PART,
                "toolName": message.name or names.get(call_id, "unknown"),
                "toolCallId": call_id,
                "state": "output-error" if message.status == "error" else "output-available",
                "output": content,
            }
        )
    elif isinstance(content, str):
        parts.append({"type": "text", "text": content})
    else:
        record["content"] = "list"
        for block in content:
            if (
                isinstance(block, Mapping)
                and block.get("type") == "text"
                and isinstance(block.get("text"), str)
            ):
                rest = {k: v for k, v in block.items() if k not in ("type", "text")}
                part: dict[str, Any] = {"type": "text", "text": block["text"]}
                if rest:
                    part[META] = {PROVIDER: rest}
                parts.append(part)
            else:
                parts.append({"type": "data-langchain", "data": block})
    if isinstance(message, AIMessage) and data.get("tool_calls"):
        for call in data.pop("tool_calls"):
            names[str(call.get("id"))] = str(call.get("name"))
            parts.append(
                {
                    "type": TOOL_PART,
                    "toolName": call.get("name"),
                    "toolCallId": call.get("id"),
                    "state": "input-available",
                    "input": call.get("args"),
                }
            )
    if data:
        record["data"] = data
    role = (
        message.role if isinstance(message, ChatMessage) else _ROLES.get(message.type, message.type)
    )
    return {"id": uuid.uuid4().hex, "role": role, "parts": parts, KEY: record}


def to_langchain(message: Mapping[str, Any]) -> BaseMessage:
    """A stored message as a LangChain message: the one it came from, or (appended by other
    means) a ``HumanMessage``/``AIMessage``/``SystemMessage``/``ToolMessage``/``ChatMessage``
    of its text and tool parts."""
    parts = [p for p in message.get("parts") or () if isinstance(p, Mapping)]
    record = message.get(KEY)
    if isinstance(record, Mapping) and isinstance(record.get("type"), str):
        data = dict(record.get("data") or {})
        kind = record["type"]
        if kind == "tool":
            result = next((p for p in parts if p.get("type") == TOOL_PART), {})
            data["content"] = result.get("output", "")
            data["tool_call_id"] = result.get("toolCallId", "")
        else:
            data["content"] = _content(parts, list_shape=record.get("content") == "list")
            calls = [_call(p) for p in parts if p.get("type") == TOOL_PART and "input" in p]
            if calls:
                data["tool_calls"] = calls
        return messages_from_dict([{"type": kind, "data": data}])[0]
    return _generic(message, parts)


def _content(parts: list[Mapping[str, Any]], *, list_shape: bool) -> Any:
    if not list_shape:
        return "".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")
    blocks: list[Any] = []
    for part in parts:
        if part.get("type") == "text":
            meta = part.get(META)
            rest = meta.get(PROVIDER, {}) if isinstance(meta, Mapping) else {}
            blocks.append({"type": "text", "text": part.get("text", ""), **rest})
        elif part.get("type") == "data-langchain":
            blocks.append(part.get("data"))
    return blocks


def _call(part: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": part.get("toolName"),
        "args": part.get("input"),
        "id": part.get("toolCallId"),
        "type": "tool_call",
    }


def _generic(message: Mapping[str, Any], parts: list[Mapping[str, Any]]) -> BaseMessage:
    role = str(message.get("role"))
    text = "\n".join(
        str(p["text"]) for p in parts if p.get("type") == "text" and isinstance(p.get("text"), str)
    )
    tools = [
        p
        for p in parts
        if isinstance(p.get("type"), str)
        and (p["type"] == TOOL_PART or p["type"].startswith("tool-"))
    ]
    if role == "tool" and tools:
        result = tools[0]
        output = result.get("output", result.get("result", ""))
        return ToolMessage(
            content=output if isinstance(output, str) else json.dumps(output, ensure_ascii=False),
            tool_call_id=str(result.get("toolCallId", "")),
        )
    kind = _TYPES.get(role)
    if kind == "ai":
        calls = [
            {
                "name": str(p.get("toolName") or str(p["type"])[5:] or "unknown"),
                "args": p["input"]
                if isinstance(p.get("input"), dict)
                else {"input": p.get("input")},
                "id": str(p.get("toolCallId", "")),
                "type": "tool_call",
            }
            for p in tools
            if "input" in p
        ]
        return AIMessage(content=text, tool_calls=calls)
    if kind == "human":
        return HumanMessage(content=text)
    if kind == "system":
        return SystemMessage(content=text)
    return ChatMessage(role=role, content=text)
