"""Context providers: duck-typed detection and the built-in ones.

A provider is any object with ``get()`` (sync or async), optionally ``set``, ``load`` (a skill
provider), ``search`` (a search provider) and ``init(label)``. Built-ins: :class:`StaticContext`
(read-only text), :class:`StoredBlock` (the event-sourced writable block a session uses when a
block is given no provider), :class:`SearchBlock` (event-sourced, searchable) and
:class:`DirectorySkillProvider` (a folder of text/markdown files).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from memstream.context.ports import MemstreamPort
from memstream.context.skill_files import SkillFolder
from memstream.domain.context import (
    ENTRY_KEY_MAX_CHARS,
    ContextDocument,
    check_content,
    check_key,
    check_label,
    document_id,
)
from memstream.domain.errors import InvalidInputError
from memstream.domain.limits import check_chars, require_str, search_query
from memstream.workers.log.aggregate_store import Decided

logger = logging.getLogger(__name__)

SEARCH_RESULTS = 10


async def call(method: Any, *args: Any) -> Any:
    """Call a provider method that may be sync or async."""
    result = method(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


def _has(provider: object, name: str) -> bool:
    return callable(getattr(provider, name, None))


def is_writable(provider: object) -> bool:
    return _has(provider, "set")


def is_skill(provider: object) -> bool:
    return _has(provider, "load")


def is_searchable(provider: object) -> bool:
    return _has(provider, "search")


class LogBacked:
    """A built-in provider that stores through a memstream's log (bound by the session)."""

    _ms: MemstreamPort | None = None

    def attach(self, ms: MemstreamPort) -> None:
        """Bind to the memstream of the session that uses this provider."""
        self._ms = ms

    @property
    def ms(self) -> MemstreamPort:
        if self._ms is None:
            raise InvalidInputError(
                f"{type(self).__name__} is not attached to a session; pass it to with_context()"
            )
        return self._ms


class StaticContext:
    """A read-only block with fixed text."""

    def __init__(self, text: str | None) -> None:
        self.text = text if text is None else check_content(text, "text")

    def get(self) -> str | None:
        return self.text


class StoredBlock(LogBacked):
    """The built-in writable block ``label`` of a session: its content is a document on the
    log, read from the context read model (listed under the reference's key, ``label`` or
    ``label_<session id>``, §2.2)."""

    def __init__(self, label: str, session_id: str, max_tokens: int | None = None) -> None:
        self.label = check_label(label)
        self.session_id = session_id
        self.max_tokens = max_tokens
        self._identity = document_id(label, session_id)

    async def get(self) -> str | None:
        ms = self.ms
        await ms.ryw.wait_for("context")
        return ms.reads.context_queries.block_content(ms.namespace, self.label, self.session_id)

    async def set(self, content: str) -> None:
        await self.ms.commands.command(
            self.ms.commands.blocks,
            "block",
            self._identity,
            lambda document: document.replace(content, self.max_tokens),
        )

    async def append(self, content: str) -> str:
        """Append on the log's current content (not a possibly stale read); returns the result."""

        def decide(document: ContextDocument) -> Decided[str]:
            events = document.append(content, self.max_tokens)
            if not events:  # the same content again
                return Decided(events, document.content or "")
            return Decided(events, cast("ContextDocument.ContextBlockWritten", events[-1]).content)

        result = await self.ms.commands.command(
            self.ms.commands.blocks, "block", self._identity, decide
        )
        assert result.value is not None  # decide always decides one
        return result.value


class SearchBlock(LogBacked):
    """An event-sourced searchable block: entries are events, searched through the full-text
    read model with the one query syntax. Entries are stored under ``key`` (default: the
    block's label), so the same knowledge base can back the blocks of many sessions."""

    def __init__(self, key: str | None = None) -> None:
        self.key = None if key is None else check_key(key)

    def init(self, label: str) -> None:
        if self.key is None:
            self.key = label

    def _key(self) -> str:
        if self.key is None:
            raise InvalidInputError("SearchBlock has no key: give one or add it as a block")
        return self.key

    async def get(self) -> str | None:
        ms = self.ms
        await ms.ryw.wait_for("context")
        count = ms.reads.context_queries.entry_count(ms.namespace, self._key())
        return f"{count} entries indexed." if count else None

    async def search(self, query: str) -> str | None:
        text = search_query(query)
        if text is None or not text.strip():
            return None
        ms = self.ms
        await ms.ryw.wait_for("context")
        hits = ms.reads.context_queries.search_entries(
            ms.namespace, self._key(), text, SEARCH_RESULTS
        )
        if not hits:
            return None
        return "\n\n".join(f"[{key}]\n{content}" for key, content in hits)

    async def set(self, key: str, content: str) -> None:
        await self.ms.commands.command(
            self.ms.commands.search_indexes,
            "search",
            self._key(),
            lambda index: index.index(key, content),
        )


_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_DESCRIPTION = re.compile(r"^description[ \t]*:[ \t]*(.*?)[ \t]*$", re.MULTILINE)


def _split_front_matter(text: str) -> tuple[str | None, str]:
    """``(description from front matter or None, body)``."""
    match = _FRONT_MATTER.match(text)
    if match is None:
        return None, text
    found = _DESCRIPTION.search(match.group(1))
    description = found.group(1).strip("'\"") if found else None
    return description, text[match.end() :]


def _first_line(body: str) -> str | None:
    for line in body.splitlines():
        stripped = line.strip().lstrip("#").strip()
        if stripped:
            return stripped
    return None


class DirectorySkillProvider:
    """Skills from a folder of text/markdown files: key = relative path without extension,
    description from ``description:`` front matter or else the first line. ``keys`` (non-empty)
    is an allow-list for ``get`` and ``load``; ``set`` writes ``<key>.md`` regardless.

    When several files share a key (``a.md``, ``a.txt``), the first suffix of ``.md``,
    ``.markdown``, ``.txt`` wins, for the listing and for ``load`` alike.

    Skills never leave the folder (:mod:`memstream.context.skill_files`): a file or folder whose
    real path is outside it (a symbolic link to ``/etc/passwd``, say) is not listed, ``load``
    refuses it, and ``set`` writes through no link at all.
    """

    def __init__(self, path: str | Path, keys: Iterable[str] | None = None) -> None:
        if isinstance(keys, str):
            raise InvalidInputError("keys must be a list of skill keys, not a string")
        if not isinstance(path, str | Path):
            raise InvalidInputError(f"path must be a folder path, not {type(path).__name__}")
        self.root = Path(path)
        self.keys = frozenset(require_str("skill key", k) for k in keys or ())
        self._folder = SkillFolder(self.root)

    def _allowed(self, key: str) -> bool:
        return not self.keys or key in self.keys

    def _check_key(self, key: str) -> None:
        """Refuse keys that would leave the folder (and keys over 256 characters)."""
        check_chars("skill key", key, minimum=1, maximum=ENTRY_KEY_MAX_CHARS)
        parts = key.split("/")
        if "\x00" in key:
            raise InvalidInputError("skill key must not contain NUL characters")
        if key.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in key:
            raise InvalidInputError(f"skill key {key!r} must be a relative path inside the folder")

    def _listing(self) -> str | None:
        lines = []
        for key, file in self._folder.files().items():
            if not self._allowed(key):
                continue
            try:
                text = self._folder.read(file)
            except InvalidInputError:  # became a link since it was listed: leave it out
                logger.warning("skills: %s in %s changed into a link; left out", key, self.root)
                continue
            description, body = _split_front_matter(text)
            description = description or _first_line(body)
            lines.append(f"- {key}: {description}" if description else f"- {key}")
        return "\n".join(lines) or None

    def _load(self, key: str) -> str | None:
        if not isinstance(key, str) or not self._allowed(key):
            return None
        try:
            self._check_key(key)
        except InvalidInputError:  # "../x" names no skill, as in the reference: not found
            return None
        file = self._folder.find(key)
        return None if file is None else _split_front_matter(self._folder.read(file))[1]

    def _set(self, key: str, content: str, description: str | None) -> None:
        # Everything is checked before the file is touched, and the file is replaced whole:
        # a refused or failed write leaves the skill as it was.
        require_str("key", key)
        self._check_key(key)
        text = check_content(content)
        if description:
            one_line = " ".join(check_content(description, "description").split())
            text = f"---\ndescription: {one_line}\n---\n{text}"
        self._folder.write(key, text)

    async def get(self) -> str | None:
        return await asyncio.to_thread(self._listing)

    async def load(self, key: str) -> str | None:
        """The skill's body; ``None`` for an unknown or disallowed key (``../x`` included).

        Raises:
            InvalidInputError: the key's file, or a folder on its way, is a link that leads
                outside the folder.
        """
        return await asyncio.to_thread(self._load, key)

    async def set(self, key: str, content: str, description: str | None = None) -> None:
        """Write ``<key>.md`` (front matter with the description, then the content).

        Raises:
            InvalidInputError: a bad key or content, or a link on the key's path or at its file.
        """
        await asyncio.to_thread(self._set, key, content, description)
