"""Typed shapes of the public API's messages and results (``TypedDict``: plain dicts at run
time, checked by type checkers).

A stored message is the reference shape of spec §1.1 — the AI SDK's ``UIMessage``: ``id``,
``role``, ``parts`` and optional ``created_at``; any other key it was given is kept and comes
back (a type checker sees only these). ``append_message`` also takes the chat-style
convenience and OpenAI / Anthropic messages (see :mod:`memstream.formats`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Required, TypedDict


class MessagePart(TypedDict, total=False):
    """One part: ``type`` and the fields of its kind (``text``; ``reasoning``; a tool part's
    ``toolCallId``, ``toolName``, ``state``, ``input``, ``output``/``result``; a file's
    ``mediaType`` and ``url``; a ``data-*`` part's ``data``; ``providerMetadata``)."""

    type: Required[str]
    text: str
    reasoning: str
    toolCallId: str
    toolName: str
    state: str
    input: Any
    output: Any
    result: Any
    errorText: str
    mediaType: str
    url: str
    data: Any
    providerMetadata: dict[str, Any]


class SessionMessage(TypedDict, total=False):
    """A stored message (the reference shape)."""

    id: Required[str]
    role: Required[str]
    parts: Required[list[MessagePart]]
    created_at: str


class ChatMessage(TypedDict, total=False):
    """The chat-style convenience, and an OpenAI Chat Completions message."""

    id: str
    role: Required[str]
    content: str | list[dict[str, Any]] | None
    name: str
    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str
    reasoning_content: str


class AnthropicMessage(TypedDict, total=False):
    """An Anthropic Messages message."""

    id: str
    role: Required[str]
    content: Required[str | list[dict[str, Any]]]


# What append_message takes.
MessageInput = SessionMessage | ChatMessage | AnthropicMessage | Mapping[str, Any]


class SearchHit(TypedDict):
    """A search result of a session: the message's id, role, indexed text and time."""

    id: str
    role: str
    content: str
    created_at: str


class SessionSearchHit(SearchHit):
    """A search result across sessions (``SessionManager.search``)."""

    session_id: str


__all__ = [
    "AnthropicMessage",
    "ChatMessage",
    "MessageInput",
    "MessagePart",
    "SearchHit",
    "SessionMessage",
    "SessionSearchHit",
]
