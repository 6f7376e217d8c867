"""Chat formats in and out of a session (see :mod:`memstream.domain.chat_formats`).

``append_message``/``append_messages`` take OpenAI Chat Completions and Anthropic Messages
messages as they are; :func:`to_openai` and :func:`to_anthropic` give a history back in either
shape (a message that came in that shape comes back exactly), and :func:`from_openai` /
:func:`from_anthropic` convert one message explicitly::

    await session.append_messages(openai_messages)
    response = client.chat.completions.create(
        model=..., messages=to_openai(await session.get_history())
    )
"""

from memstream.domain.chat_formats import from_anthropic, from_openai, to_anthropic, to_openai

__all__ = ["from_anthropic", "from_openai", "to_anthropic", "to_openai"]
