"""What the Agent Memory API accepts (spec memory.md Part A), checked before anything is
published: profile names, memory session ids, ingested messages, recall options, list limits.

Every error names the input, the limit and the value. A message's identity is its content
address: ``sha256(session_id, role, content)``, never its timestamp.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from memstream.domain.errors import InvalidInputError
from memstream.domain.limits import (
    BATCH_MAX_MESSAGES,
    INGEST_CONTENT_MAX_BYTES,
    LIST_LIMIT_MAX,
    MEMORY_SESSION_ID_MAX_CHARS,
    PROFILE_NAME_MAX_CHARS,
    RECALL_QUERY_MAX_BYTES,
    check_bytes,
    check_chars,
    check_int,
    require_str,
)

INGEST_ROLES: Final = ("system", "user", "assistant")
THINKING_LEVELS: Final = ("low", "medium", "high")
RESPONSE_LENGTHS: Final = ("short", "medium", "long")
MEMORY_ID_MAX_CHARS: Final = 128
REMEMBER_MAX_BYTES: Final = INGEST_CONTENT_MAX_BYTES
_ID_CHARS: Final = 32  # hex digits of a content address (128 bits)
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class IngestMessage:
    """A checked message of an ingest, with its content address."""

    id: str
    session_id: str
    role: str
    content: str
    timestamp: datetime

    def as_dict(self) -> dict[str, str]:
        """The message as an event carries it (the timestamp in ISO 8601, UTC)."""
        return {
            "id": self.id,
            "role": self.role,
            "content": self.content,
            "timestamp": iso(self.timestamp),
        }


def iso(moment: datetime) -> str:
    """``moment`` in ISO 8601 UTC with ``Z``."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_time(name: str, value: object) -> datetime:
    """A datetime or an ISO 8601 string as an aware UTC datetime (naive → UTC).

    Raises:
        InvalidInputError: neither, or not a valid ISO 8601 time.
    """
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInputError(f"{name} {value[:64]!r} is not an ISO 8601 time") from None
    else:
        raise InvalidInputError(
            f"{name} must be a datetime or an ISO 8601 string, not {type(value).__name__}"
        )
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def check_profile_name(value: object) -> str:
    """A profile name: 1–100 characters, no control characters."""
    name = check_chars("profile name", value, minimum=1, maximum=PROFILE_NAME_MAX_CHARS)
    if _CONTROL.search(name):
        raise InvalidInputError(f"profile name {name!r} must not contain control characters")
    return name


def check_memory_session_id(value: object) -> str:
    """An Agent Memory session id: 1–64 characters, no control characters."""
    session_id = check_chars("session_id", value, minimum=1, maximum=MEMORY_SESSION_ID_MAX_CHARS)
    if _CONTROL.search(session_id):
        raise InvalidInputError(f"session_id {session_id!r} must not contain control characters")
    return session_id


def check_memory_id(value: object) -> str:
    """A memory id as given to ``get``/``delete``/``history`` (1–128 characters)."""
    return check_chars("memory_id", value, minimum=1, maximum=MEMORY_ID_MAX_CHARS)


def check_message_ref(value: object) -> str:
    """A raw message id as given to ``get_message``."""
    return check_chars("message_id", value, minimum=1, maximum=MEMORY_ID_MAX_CHARS)


def message_id(session_id: str, role: str, content: str) -> str:
    """The content address of a message: ``sha256(session_id, role, content)`` (128 bits)."""
    digest = hashlib.sha256()
    for part in (session_id, role, content):
        data = part.encode("utf-8")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()[:_ID_CHARS]


def derived_session_id(messages: Sequence[tuple[str, str]]) -> str:
    """The session id of an ingest that names none: derived from its messages' content."""
    digest = hashlib.sha256()
    for role, content in messages:
        for part in (role, content):
            data = part.encode("utf-8")
            digest.update(len(data).to_bytes(8, "big"))
            digest.update(data)
    return "s-" + digest.hexdigest()[:_ID_CHARS]


def check_ingest(
    messages: object, session_id: object, now: datetime
) -> tuple[str, list[IngestMessage]]:
    """The session id and the checked messages of an ingest (``now`` stamps messages without a
    timestamp). Duplicates within the call are kept once.

    Raises:
        InvalidInputError: a Part A limit (1–500 messages, roles, content ≤ 32 KB UTF-8,
            timestamps, session_id 1–64 characters).
    """
    if isinstance(messages, str | bytes | dict) or not isinstance(messages, Sequence):
        raise InvalidInputError(
            f"messages must be a list of messages, not {type(messages).__name__}"
        )
    count = len(messages)
    if count < 1:
        raise InvalidInputError("messages is empty; an ingest needs at least 1 message")
    if count > BATCH_MAX_MESSAGES:
        raise InvalidInputError(
            f"messages holds {count} messages; the limit is {BATCH_MAX_MESSAGES} per ingest"
        )
    checked: list[tuple[str, str, datetime]] = []
    for index, message in enumerate(messages):
        name = f"messages[{index}]"
        if not isinstance(message, dict):
            raise InvalidInputError(f"{name} must be a dict, not {type(message).__name__}")
        unknown = set(message) - {"role", "content", "timestamp"}
        if unknown:
            raise InvalidInputError(
                f"{name} has unknown field {sorted(map(str, unknown))[0]!r}; "
                "a message has role, content and timestamp"
            )
        role = require_str(f"{name}.role", message.get("role"))
        if role not in INGEST_ROLES:
            raise InvalidInputError(
                f"{name}.role is {role[:32]!r}; it must be one of {', '.join(INGEST_ROLES)}"
            )
        content = check_bytes(
            f"{name}.content", message.get("content"), minimum=0, maximum=INGEST_CONTENT_MAX_BYTES
        )
        stamp = message.get("timestamp")
        timestamp = now if stamp is None else parse_time(f"{name}.timestamp", stamp)
        checked.append((role, content, timestamp))
    if session_id is None:
        sid = derived_session_id([(role, content) for role, content, _ in checked])
    else:
        sid = check_memory_session_id(session_id)
    seen: set[str] = set()
    result: list[IngestMessage] = []
    for role, content, timestamp in checked:
        mid = message_id(sid, role, content)
        if mid not in seen:
            seen.add(mid)
            result.append(IngestMessage(mid, sid, role, content, timestamp))
    return sid, result


def check_remember(content: object, session_id: object) -> tuple[str, str | None]:
    """The content and session id of a ``remember``: content 1 byte – 32 KB UTF-8."""
    text = check_bytes("content", content, minimum=1, maximum=REMEMBER_MAX_BYTES)
    if not text.strip():
        raise InvalidInputError("content is blank; there is nothing to remember")
    return text, None if session_id is None else check_memory_session_id(session_id)


def check_recall(
    query: object, thinking_level: object, response_length: object
) -> tuple[str, str, str]:
    """A recall's query (1–1,024 UTF-8 bytes), thinking level and response length."""
    text = check_bytes("query", query, minimum=1, maximum=RECALL_QUERY_MAX_BYTES)
    if thinking_level not in THINKING_LEVELS:
        raise InvalidInputError(
            f"thinking_level is {thinking_level!r}; it must be one of {', '.join(THINKING_LEVELS)}"
        )
    if response_length not in RESPONSE_LENGTHS:
        raise InvalidInputError(
            f"response_length is {response_length!r}; "
            f"it must be one of {', '.join(RESPONSE_LENGTHS)}"
        )
    return text, str(thinking_level), str(response_length)


def check_list_limit(value: object) -> int:
    """A page size for ``list``: 1–500."""
    return check_int("limit", value, minimum=1, maximum=LIST_LIMIT_MAX)
