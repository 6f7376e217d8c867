"""Message builders shared by the tests."""

from __future__ import annotations

from typing import Any


def msg(message_id: str, text: str | None = None, role: str = "user") -> dict[str, Any]:
    """A one-text-part message in the reference shape (text defaults to ``m message <id>``)."""
    return {
        "id": message_id,
        "role": role,
        "parts": [
            {"type": "text", "text": text if text is not None else f"m message {message_id}"}
        ],
    }


def ids(messages: list[dict[str, Any]]) -> list[str]:
    """The ids of messages, in order."""
    return [m["id"] for m in messages]
