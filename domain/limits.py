"""Input limits, checked before anything is published; errors name the input, limit and value."""

from __future__ import annotations

import re
from typing import Final

from memstream.domain.errors import InvalidInputError

MESSAGE_MAX_BYTES: Final = 1024 * 1024
ACTOR_MAX_CHARS: Final = 128
MESSAGE_ID_MAX_CHARS: Final = 256
SESSION_ID_MAX_CHARS: Final = 256
MEMORY_SESSION_ID_MAX_CHARS: Final = 64
# The most partitions a stream may have (a durable consumer, a lease and tracking rows each).
MAX_PARTITIONS: Final = 1024
NAMESPACE_MAX_CHARS: Final = 32
PROFILE_NAME_MAX_CHARS: Final = 100
CONTEXT_LABEL_MAX_CHARS: Final = 64
SEARCH_QUERY_MAX_BYTES: Final = 4096
SEARCH_LIMIT_MAX: Final = 500
BATCH_MAX_MESSAGES: Final = 500
INGEST_CONTENT_MAX_BYTES: Final = 32 * 1024
RECALL_QUERY_MAX_BYTES: Final = 1024
LIST_LIMIT_MAX: Final = 500

_NAMESPACE_RE: Final = re.compile(r"[a-z0-9_-]+")


def require_str(name: str, value: object) -> str:
    """Return ``value`` if it is a ``str``, else raise ``InvalidInputError`` naming ``name``."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, not {type(value).__name__}")
    return value


def utf8_size(name: str, text: str) -> int:
    """UTF-8 length of ``text``; lone surrogates (not encodable, so not storable) are refused."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise InvalidInputError(
            f"{name} is not valid Unicode: lone surrogate at index {error.start}"
        ) from None


def storable(text: str) -> bool:
    """Whether ``text`` can be stored at all (lone surrogates cannot be encoded as UTF-8): an id
    that is not storable names nothing, so a read of it finds nothing."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_chars(name: str, value: object, *, minimum: int, maximum: int) -> str:
    """Check a string's length in characters against ``[minimum, maximum]``."""
    text = require_str(name, value)
    if len(text) < minimum:
        raise InvalidInputError(f"{name} is {len(text)} characters; the minimum is {minimum}")
    if len(text) > maximum:
        raise InvalidInputError(f"{name} is {len(text)} characters; the limit is {maximum}")
    utf8_size(name, text)
    return text


def check_bytes(name: str, value: object, *, minimum: int, maximum: int) -> str:
    """Check a string's UTF-8 length in bytes against ``[minimum, maximum]``."""
    text = require_str(name, value)
    size = utf8_size(name, text)
    if size < minimum:
        raise InvalidInputError(f"{name} is {size} bytes; the minimum is {minimum}")
    if size > maximum:
        raise InvalidInputError(f"{name} is {size} bytes; the limit is {maximum}")
    return text


def check_int(name: str, value: object, *, minimum: int, maximum: int) -> int:
    """Check an integer argument (``bool`` is refused) against ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{name} must be an integer, not {type(value).__name__}")
    if not minimum <= value <= maximum:
        raise InvalidInputError(f"{name} is {value}; it must be between {minimum} and {maximum}")
    return value


def search_query(value: object) -> str | None:
    """A search query to run, or ``None`` for one that matches nothing.

    Any string is a query (spec Part A.5): only a non-string is refused. A query over
    ``SEARCH_QUERY_MAX_BYTES`` matches nothing rather than being cut (cutting could widen an
    AND of terms); lone surrogates, which no stored text can contain, separate words like any
    other character that is not a letter or digit.
    """
    text = require_str("query", value)
    if text.isascii():
        return text if len(text) <= SEARCH_QUERY_MAX_BYTES else None
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) > SEARCH_QUERY_MAX_BYTES:
        return None
    return encoded.decode("utf-8", "replace")  # a lone surrogate becomes U+FFFD (x3)


STREAM_NAME_MAX_CHARS: Final = 255
# JetStream stream names: printable, no whitespace, and none of . * > / \ (they become subjects
# and file names).
_STREAM_NAME_RE: Final = re.compile(r"[^\s.*>/\\\x00-\x1f\x7f]+")


def check_stream_name(value: object) -> str:
    """Validate a JetStream stream name (``MEMSTREAM_STREAM``)."""
    name = check_chars("stream", value, minimum=1, maximum=STREAM_NAME_MAX_CHARS)
    if not _STREAM_NAME_RE.fullmatch(name):
        raise InvalidInputError(
            f"stream {name!r} is not a JetStream stream name (no whitespace and none of . * > / \\)"
        )
    return name


SUBJECT_PREFIX_MAX_CHARS: Final = 32
_SUBJECT_PREFIX_RE: Final = re.compile(r"[A-Za-z0-9_-]+")


def check_subject_prefix(value: object) -> str:
    """Validate the first token of every subject memstream writes (``MEMSTREAM_SUBJECT_PREFIX``):
    1–32 characters of ``[A-Za-z0-9_-]``, so that it is one NATS subject token."""
    prefix = check_chars("subject_prefix", value, minimum=1, maximum=SUBJECT_PREFIX_MAX_CHARS)
    if not _SUBJECT_PREFIX_RE.fullmatch(prefix):
        raise InvalidInputError(
            f"subject_prefix {prefix!r} may contain only [A-Za-z0-9_-] (one NATS subject token)"
        )
    return prefix


def check_namespace(value: object) -> str:
    """Validate a namespace name: 1–32 characters of ``[a-z0-9_-]``."""
    name = check_chars("namespace", value, minimum=1, maximum=NAMESPACE_MAX_CHARS)
    if not _NAMESPACE_RE.fullmatch(name):
        raise InvalidInputError(f"namespace {name!r} may contain only [a-z0-9_-]")
    return name


def check_actor(value: object) -> str:
    """Validate who is recorded as causing events (``Ms-Actor``): 1–128 printable
    characters (a NATS header value: no control characters, so no line breaks)."""
    actor = check_chars("actor", value, minimum=1, maximum=ACTOR_MAX_CHARS)
    if not actor.isprintable():
        raise InvalidInputError(f"actor {actor!r} must be printable, without control characters")
    return actor


def check_session_id(value: object) -> str:
    """Validate a Session API session id (``""`` is the default session)."""
    session_id = check_chars("session_id", value, minimum=0, maximum=SESSION_ID_MAX_CHARS)
    if "\x00" in session_id:
        raise InvalidInputError("session_id must not contain NUL characters")
    return session_id


def check_message_id(value: object, name: str = "message id") -> str:
    """Validate a message id: 1–256 characters."""
    return check_chars(name, value, minimum=1, maximum=MESSAGE_ID_MAX_CHARS)
