"""Context aggregates: writable block documents and search indexes, with the reference's rules.

A writable context block (the built-in provider used when a block is given none) is one
:class:`ContextDocument` per (label, session id); it is shown under the reference's key,
``label`` or ``label_<session id>`` (§2.2). A search block's entries live in one
:class:`SearchIndex` per block key. Both decide on their own state, so
an append or an upsert is never computed from a stale read model.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any, Final, Protocol

from eventsourcing.domain import Aggregate

from memstream.domain.aggregates import empty_aggregate, next_event
from memstream.domain.errors import InvalidInputError
from memstream.domain.limits import (
    CONTEXT_LABEL_MAX_CHARS,
    MESSAGE_MAX_BYTES,
    check_bytes,
    check_chars,
)
from memstream.domain.tokens import estimate_string_tokens

_NAMESPACE = uuid.UUID("0b5e0c3c-7d55-4a4f-9d0e-5f2b5c1f3e11")
# A search block's key (default: its label) has room for a ``label_<session id>``: 64 + 1 + 256.
CONTEXT_KEY_MAX_CHARS: Final = 321
ENTRY_KEY_MAX_CHARS: Final = 256
# Content travels in one event; the same bound as a message keeps it under the payload limit.
CONTENT_MAX_BYTES: Final = MESSAGE_MAX_BYTES


def check_label(value: object) -> str:
    """A context block label: 1–64 characters, no NUL."""
    label = check_chars("label", value, minimum=1, maximum=CONTEXT_LABEL_MAX_CHARS)
    if "\x00" in label:
        raise InvalidInputError("label must not contain NUL characters")
    return label


def check_key(value: object, name: str = "key") -> str:
    """A storage key of a block or a search index: 1–321 characters."""
    return check_chars(name, value, minimum=1, maximum=CONTEXT_KEY_MAX_CHARS)


def check_content(value: object, name: str = "content") -> str:
    """Block or entry content: a string of at most 1 MiB UTF-8."""
    return check_bytes(name, value, minimum=0, maximum=CONTENT_MAX_BYTES)


def storage_key(label: str, session_id: str | None) -> str:
    """The reference's key of a session's built-in block (§2.2): ``label`` or ``label_<id>``.

    Shown to users; not an identity: label ``memory`` of session ``x`` and label ``memory_x``
    of the default session share it, so documents are identified by :func:`document_id`.
    """
    return f"{label}_{session_id}" if session_id else label


def document_id(label: str, session_id: str | None) -> str:
    """The unambiguous identity of a built-in block (labels and session ids hold no NUL)."""
    return f"{label}\x00{session_id or ''}"


def prompt_store_key(session_id: str) -> str:
    """The reference's key for a session's cached prompt (shown by the CLI)."""
    return storage_key("_system_prompt", session_id)


def joined_content(old: str, addition: str) -> str:
    """Append semantics of §6.4: a newline between, unless ``old`` is empty or ``addition``
    already starts with one."""
    separator = "\n" if old and not addition.startswith("\n") else ""
    return old + separator + addition


def check_max_tokens(label: str, content: str, max_tokens: int | None) -> int:
    """Return the token estimate of ``content``; refuse it above ``max_tokens`` (0 included).

    Raises:
        InvalidInputError: ``Block "<label>" exceeds maxTokens: <tokens> > <max>``.
    """
    tokens = estimate_string_tokens(content)
    if max_tokens is not None and tokens > max_tokens:
        raise InvalidInputError(f'Block "{label}" exceeds maxTokens: {tokens} > {max_tokens}')
    return tokens


def _aggregate_id(kind: str, namespace: str, key: str) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"{namespace}\x00{kind}\x00{key}")


def block_aggregate_id(namespace: str, identity: str) -> uuid.UUID:
    """The deterministic aggregate id of a built-in block (``identity``: :func:`document_id`)."""
    return _aggregate_id("block", namespace, identity)


def search_aggregate_id(namespace: str, key: str) -> uuid.UUID:
    """The deterministic aggregate id of a search block."""
    return _aggregate_id("search", namespace, key)


class ContextDocument(Aggregate):
    """The content of one built-in writable block: ``label`` of session ``session_id``."""

    class Event(Aggregate.Event):
        key: str

    class ContextBlockWritten(Event):
        """The block's whole content was set (a replace, or an append already joined)."""

        label: str
        session_id: str | None
        content: str

        def apply(self, aggregate: Any) -> None:
            aggregate.content = self.content

    class ContextBlockDeleted(Event):
        """The block was removed (its session was deleted): it reads as never written."""

        label: str
        session_id: str | None

        def apply(self, aggregate: Any) -> None:
            aggregate.content = None

    label: str
    session_id: str | None
    content: str | None

    @classmethod
    def empty(cls, namespace: str, identity: str) -> ContextDocument:
        """A document with no events yet (content ``None``); ``identity`` from
        :func:`document_id`."""
        label, _, session_id = identity.partition("\x00")
        document = empty_aggregate(cls, block_aggregate_id(namespace, identity))
        document.label = label
        document.session_id = session_id or None
        document.content = None
        return document

    @classmethod
    def restore(
        cls, namespace: str, identity: str, *, content: str | None, version: int
    ) -> ContextDocument:
        """The document as a snapshot holds it after its event ``version`` (its whole content:
        each write carries the whole content, so nothing before it is needed)."""
        document = cls.empty(namespace, identity)
        document.version = version
        document.content = content
        return document

    def replace(self, content: object, max_tokens: int | None = None) -> list[Aggregate.Event]:
        """Decide a replace; rewriting identical content is a no-op."""
        text = check_content(content)
        check_max_tokens(self.label, text, max_tokens)
        if text == self.content:
            return []
        return [
            next_event(
                self,
                self.ContextBlockWritten,
                key=storage_key(self.label, self.session_id),
                label=self.label,
                session_id=self.session_id,
                content=text,
            )
        ]

    def delete(self) -> list[Aggregate.Event]:
        """Decide the removal of the block (never written or removed already: no-op)."""
        if self.content is None:
            return []
        return [
            next_event(
                self,
                self.ContextBlockDeleted,
                key=storage_key(self.label, self.session_id),
                label=self.label,
                session_id=self.session_id,
            )
        ]

    def append(self, content: object, max_tokens: int | None = None) -> list[Aggregate.Event]:
        """Decide an append to the current content (``max_tokens`` applies to the result)."""
        addition = check_content(content)
        joined = joined_content(self.content or "", addition)
        size = len(joined.encode("utf-8"))
        if size > CONTENT_MAX_BYTES:
            raise InvalidInputError(
                f"content would be {size} bytes after appending {len(addition.encode('utf-8'))} "
                f"bytes to block {self.label!r}; the limit is {CONTENT_MAX_BYTES}"
            )
        return self.replace(joined, max_tokens)


class SearchIndex(Aggregate):
    """The entries of one event-sourced search block (their content lives in the events)."""

    class Event(Aggregate.Event):
        key: str

    class SearchEntryIndexed(Event):
        """An entry was added, or replaced when ``entry_key`` already existed."""

        entry_key: str
        content: str

        def apply(self, aggregate: Any) -> None:
            aggregate.digests[self.entry_key] = _digest(self.content)

    key: str
    digests: EntryDigests

    @classmethod
    def empty(cls, namespace: str, key: str) -> SearchIndex:
        index = empty_aggregate(cls, search_aggregate_id(namespace, key))
        index.key = key
        index.digests = EntryDigests()
        return index

    @classmethod
    def restore(
        cls, namespace: str, key: str, *, version: int, entries: StoredEntries
    ) -> SearchIndex:
        """The index as a snapshot holds it after its event ``version``: each entry's content
        looked up in ``entries`` when a decision needs it, never all of them."""
        index = cls.empty(namespace, key)
        index.version = version
        index.digests = EntryDigests(entries)
        return index

    def index(self, entry_key: object, content: object) -> list[Aggregate.Event]:
        """Decide an upsert of one entry; the same content under the same key is a no-op."""
        key = check_chars("entry key", entry_key, minimum=1, maximum=ENTRY_KEY_MAX_CHARS)
        text = check_content(content)
        if self.digests.get(key) == _digest(text):
            return []
        return [
            next_event(self, self.SearchEntryIndexed, key=self.key, entry_key=key, content=text)
        ]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class StoredEntries(Protocol):
    """A search block's entries as stored at one position (read lazily, one at a time)."""

    def content(self, entry_key: str) -> str | None:
        """The stored content of ``entry_key`` (``None``: not stored).

        Raises:
            StoredMessagesMoved: the store is no longer at a position this lookup may use.
        """


class NoEntries:
    """The empty base: what a search block holds before its first entry."""

    def content(self, entry_key: str) -> str | None:
        return None


NO_ENTRIES: Final = NoEntries()


class EntryDigests:
    """Digests of a search block's entries: those its applied events set, else those of the
    stored base (looked up once each). As with a session's messages, an entry untouched by the
    applied events is the same at every base position they are valid on."""

    __slots__ = ("_base", "_known")

    def __init__(self, base: StoredEntries | None = None) -> None:
        self._base: StoredEntries = base or NO_ENTRIES
        self._known: dict[str, str | None] = {}

    def get(self, entry_key: str) -> str | None:
        try:
            return self._known[entry_key]
        except KeyError:
            content = self._base.content(entry_key)
            digest = self._known[entry_key] = None if content is None else _digest(content)
            return digest

    def __setitem__(self, entry_key: str, digest: str) -> None:
        self._known[entry_key] = digest

    def rebind(self, base: StoredEntries) -> None:
        """Look entries up in ``base`` from now on (the same entries, or a later position that
        has not passed the applied events)."""
        self._base = base


__all__ = [
    "CONTENT_MAX_BYTES",
    "CONTEXT_KEY_MAX_CHARS",
    "ENTRY_KEY_MAX_CHARS",
    "NO_ENTRIES",
    "ContextDocument",
    "EntryDigests",
    "SearchIndex",
    "StoredEntries",
    "block_aggregate_id",
    "check_content",
    "check_key",
    "check_label",
    "check_max_tokens",
    "document_id",
    "joined_content",
    "prompt_store_key",
    "search_aggregate_id",
    "storage_key",
]
