"""LangChain chat history on memstream (issue 15, item 3): every message type comes back equal,
sync and async methods, and a real ``RunnableWithMessageHistory`` chain keeps its turns."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("langchain_core", reason="the langchain extra (memstream[langchain])")

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from memstream.client import Memstream
from memstream.domain.errors import InvalidInputError
from memstream.integrations.langchain import MemstreamChatMessageHistory
from memstream.settings import Settings
from memstream.sync import async_client, connect_sync

pytestmark = pytest.mark.both_backends


def _transcript() -> list[BaseMessage]:
    return [
        SystemMessage(content="You are terse."),
        HumanMessage(content="Weather in Lisbon?", id="h1", name="alice"),
        AIMessage(
            content="",
            tool_calls=[{"name": "weather", "args": {"city": "Lisbon"}, "id": "call_1"}],
            usage_metadata={"input_tokens": 12, "output_tokens": 7, "total_tokens": 19},
            response_metadata={"model_name": "gpt-x", "finish_reason": "tool_calls"},
            id="run-1",
        ),
        ToolMessage(content="21 °C", tool_call_id="call_1", artifact={"raw": [21]}),
        ToolMessage(content="no such city", tool_call_id="call_2", status="error"),
        AIMessage(
            content=[
                {"type": "text", "text": "21 °C and clear."},
                {"type": "reasoning", "reasoning": "simple"},
            ],
            additional_kwargs={"refusal": None},
        ),
        HumanMessage(
            content=[
                {"type": "text", "text": "And here?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/p.png"}},
            ]
        ),
        ChatMessage(role="critic", content="Be shorter."),
    ]


async def test_every_message_type_comes_back_equal_async(ms: Memstream) -> None:
    history = MemstreamChatMessageHistory("lc-async", ms)
    assert isinstance(history, BaseChatMessageHistory)
    await history.aadd_messages(_transcript())
    assert await history.aget_messages() == _transcript()
    # stored as session messages: searchable, tool result named from its call
    session = ms.session("lc-async")
    assert [h["role"] for h in await session.search("clear")] == ["assistant"]
    tool = [m for m in await session.get_history() if m["role"] == "tool"]
    assert [m["parts"][0]["toolName"] for m in tool] == ["weather", "unknown"]
    await history.aclear()
    assert await history.aget_messages() == []


async def test_sync_methods_from_another_thread_with_an_async_client(ms: Memstream) -> None:
    history = MemstreamChatMessageHistory("lc-thread", ms)

    def use() -> list[BaseMessage]:
        history.add_user_message("hi")
        history.add_ai_message("hello")
        return history.messages

    assert await asyncio.to_thread(use) == [HumanMessage(content="hi"), AIMessage(content="hello")]
    # On the client's own loop: a read is served from the read model, which has this client's
    # writes; a write would wait for the loop it blocks, so it is refused at once.
    await history.aadd_messages([HumanMessage(content="again")])
    assert history.messages[-1] == HumanMessage(content="again")
    started = time.perf_counter()
    with pytest.raises(InvalidInputError, match="use aget_messages/aadd_messages/aclear"):
        history.add_user_message("blocked")
    assert time.perf_counter() - started < 0.5
    assert len(await history.aget_messages()) == 3


def test_async_methods_on_loops_other_than_the_clients(settings: Settings) -> None:
    # The async client on a loop of its own thread; each call made on a new loop (asyncio.run).
    with connect_sync(settings=settings, workers=True) as ms:
        history = MemstreamChatMessageHistory("lc-loops", async_client(ms))
        asyncio.run(history.aadd_messages([HumanMessage(content="one")]))
        assert asyncio.run(history.aget_messages()) == [HumanMessage(content="one")]
        history.add_ai_message("two")  # this thread has no loop: it waits for the client's
        assert [m.content for m in history.messages] == ["one", "two"]


def test_sync_and_async_methods_with_a_sync_client(settings: Settings) -> None:
    with connect_sync(settings=settings, workers=True) as ms:
        history = MemstreamChatMessageHistory("lc-sync", ms)
        history.add_messages(_transcript())
        assert history.messages == _transcript()
        assert asyncio.run(history.aget_messages()) == _transcript()
        # messages appended by other means read as LangChain messages
        ms.session("lc-sync").append_message({"role": "user", "content": "plain"})
        assert history.messages[-1] == HumanMessage(content="plain")
        history.clear()
        assert history.messages == []


async def test_a_chat_model_loop_keeps_its_turns(ms: Memstream) -> None:
    # A LangChain model fed from the history and its replies stored back (the pattern
    # RunnableWithMessageHistory, now deprecated in langchain-core, automated).
    model = FakeMessagesListChatModel(
        responses=[AIMessage(content="Lisbon it is."), AIMessage(content="Porto next.")]
    )
    history = MemstreamChatMessageHistory("lc-chain", ms)
    for question in ("Where to?", "Then?"):
        asked = HumanMessage(content=question)
        reply = await model.ainvoke([*await history.aget_messages(), asked])
        await history.aadd_messages([asked, reply])
    texts = [m.content for m in await history.aget_messages()]
    assert texts == ["Where to?", "Lisbon it is.", "Then?", "Porto next."]
    # the log holds them: the session API reads the same history
    assert [m["parts"][0]["text"] for m in await ms.session("lc-chain").get_history()] == texts


async def test_bad_messages_are_refused_whole(ms: Memstream) -> None:
    history = MemstreamChatMessageHistory("lc-bad", ms)
    with pytest.raises(InvalidInputError, match="must be a LangChain BaseMessage, not dict"):
        await history.aadd_messages([HumanMessage(content="ok"), {"role": "user"}])  # type: ignore[list-item]
    assert await history.aget_messages() == []
