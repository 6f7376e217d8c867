"""The walking skeleton end to end: append through the log, read from the read model."""

from __future__ import annotations

from memstream.client import Memstream


async def test_append_then_read_your_writes(ms: Memstream) -> None:
    # Given a session
    session = ms.session("chat-1")
    # When two messages are appended
    await session.append_message(
        {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]}
    )
    await session.append_message({"id": "m2", "role": "assistant", "content": "Hello"})
    # Then the history shows both, in order, immediately
    history = await session.get_history()
    assert [m["id"] for m in history] == ["m1", "m2"]
    assert history[1]["parts"] == [{"type": "text", "text": "Hello"}]
