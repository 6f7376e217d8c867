"""Which messages a session holds, looked up lazily: a stored base plus the events since.

A session's decisions need to know whether an id exists, its parent, how many messages point at
it and the latest leaf — never the whole tree at once. :class:`MessageIndex` answers those from a
:class:`StoredMessages` base (a read model as of one position; empty for a pure replay) and an
overlay of the events applied on top of it, so a session of any length is decided by reading the
few rows a command touches.

The overlay holds *absolute* facts about the ids the applied events touched (exists with a
parent, or deleted; children counts), never deltas. So the base may move on while the overlay is
kept, as long as it has not passed the overlay's last event: an id untouched by the overlay is
the same at every such base position, and a touched one is answered by the overlay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol


class StoredMessagesMoved(Exception):
    """The stored messages are no longer at a position the lookup may use (the read model moved
    on or was rebuilt): decide again on a fresh snapshot."""


class StoredMessages(Protocol):
    """A session's messages as stored at one position (read lazily, one lookup at a time)."""

    def probe(self, message_id: str) -> tuple[tuple[str | None, int] | None, int]:
        """``(parent id, position)`` of a stored message (``None`` if it is not stored), and how
        many stored messages have ``message_id`` as parent (stored itself or not)."""

    def probe_many(
        self, message_ids: Sequence[str]
    ) -> dict[str, tuple[tuple[str | None, int] | None, int]]:
        """:meth:`probe` of each id, in one lookup (a chain of hundreds of new messages)."""

    def leaves(self, below: int | None, limit: int) -> Sequence[tuple[str, int]]:
        """Up to ``limit`` childless stored messages with a position below ``below`` (``None``:
        any), newest first, as ``(id, position)``."""


Probe = tuple[tuple[str | None, int] | None, int]


class NoMessages:
    """The empty base: what a session holds before its first event."""

    def probe(self, message_id: str) -> tuple[tuple[str | None, int] | None, int]:
        return None, 0

    def probe_many(self, message_ids: Sequence[str]) -> dict[str, Probe]:
        return dict.fromkeys(message_ids, (None, 0))

    def leaves(self, below: int | None, limit: int) -> Sequence[tuple[str, int]]:
        return ()


NO_MESSAGES: Final = NoMessages()


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


_DELETED: Final = _Marker("DELETED")
_UNKNOWN: Final = _Marker("UNKNOWN")
_LEAF_PAGE = 64


class MessageIndex:
    """Message ids, parents, children counts and the latest leaf of one session.

    The latest leaf is the newest message (in log order) that no message points at; a
    re-appended id counts as new.
    """

    __slots__ = (
        "_added",
        "_base",
        "_cleared",
        "_counts",
        "_latest",
        "_parents",
        "_stored",
    )

    def __init__(self, base: StoredMessages = NO_MESSAGES) -> None:
        self._base = base
        # ids the overlay touched: their parent, or _DELETED
        self._parents: dict[str, str | _Marker | None] = {}
        # ids the overlay added and that still exist, oldest first (newer than any base row)
        self._added: dict[str, None] = {}
        # absolute children counts of the ids whose count the overlay changed
        self._counts: dict[str, int] = {}
        # whether the overlay cleared the session (the base then no longer counts)
        self._cleared = False
        self._latest: str | _Marker | None = _UNKNOWN
        # The base's answers so far. They hold for as long as the overlay does: an id the overlay
        # has not touched is the same at every base position the overlay is valid on, and a
        # touched one is answered by the overlay first.
        self._stored: dict[str, tuple[tuple[str | None, int] | None, int]] = {}

    # -- lookups -------------------------------------------------------------------------------

    def exists(self, message_id: str) -> bool:
        """Whether the session holds ``message_id``."""
        return self.find(message_id) is not None

    def parent_of(self, message_id: str) -> str | None:
        """The parent id of a message the session holds (``None``: a root or not held)."""
        found = self.find(message_id)
        return None if found is None else found[0]

    def child_count(self, message_id: str) -> int:
        """How many held messages have ``message_id`` as parent (held itself or not)."""
        count = self._counts.get(message_id)
        if count is not None:
            return count
        if self._cleared:
            return 0
        return self._probe(message_id)[1]

    @property
    def latest_leaf(self) -> str | None:
        """The newest message without children, ``None`` for an empty session."""
        if self._latest is _UNKNOWN:
            self._latest = self._find_latest_leaf()
        latest = self._latest
        assert not isinstance(latest, _Marker)
        return latest

    def added(self) -> dict[str, str | None]:
        """The held messages the overlay added, with their parents, oldest first: the whole
        session when the base is empty (a replay from the first event)."""
        return {m: self.parent_of(m) for m in self._added}

    @property
    def overlay_size(self) -> int:
        """How many ids the overlay holds facts about (what it costs in memory)."""
        return len(self._parents) + len(self._counts)

    def find(self, message_id: str) -> tuple[str | None] | None:
        """``(parent id,)`` of a message the session holds; ``None`` if it holds none."""
        parent = self._parents.get(message_id, _UNKNOWN)
        if parent is _DELETED:
            return None
        if parent is not _UNKNOWN:
            assert not isinstance(parent, _Marker)
            return (parent,)
        if self._cleared:
            return None
        stored = self._probe(message_id)[0]
        return None if stored is None else (stored[0],)

    def prefetch(self, message_ids: Sequence[str]) -> None:
        """Look the base's answers for ``message_ids`` up at once, before deciding on them one
        by one (what the overlay knows, or the base already answered, is not asked again)."""
        if self._cleared:
            return
        wanted = [
            m
            for m in dict.fromkeys(message_ids)
            if m not in self._parents and m not in self._stored
        ]
        if len(wanted) > 1:
            self._stored.update(self._base.probe_many(wanted))

    def _probe(self, message_id: str) -> tuple[tuple[str | None, int] | None, int]:
        try:
            return self._stored[message_id]
        except KeyError:
            probed = self._stored[message_id] = self._base.probe(message_id)
            return probed

    def _find_latest_leaf(self) -> str | None:
        for message_id in reversed(self._added):
            if self.child_count(message_id) == 0:
                return message_id
        if self._cleared:
            return None
        # The newest stored message that is childless once the overlay's counts are applied:
        # either a stored leaf the overlay left alone, or one whose children the overlay deleted.
        best: tuple[int, str] | None = None
        for message_id, count in self._counts.items():
            if count == 0 and message_id not in self._parents:
                stored = self._probe(message_id)[0]
                if stored is not None and (best is None or stored[1] > best[0]):
                    best = (stored[1], message_id)
        below: int | None = None
        while True:
            page = self._base.leaves(below, _LEAF_PAGE)
            for message_id, position in page:
                if message_id in self._parents or self._counts.get(message_id, 0) > 0:
                    continue
                if best is None or position > best[0]:
                    best = (position, message_id)
                return best[1]
            if len(page) < _LEAF_PAGE:
                return None if best is None else best[1]
            below = page[-1][1]

    def rebind(self, base: StoredMessages) -> None:
        """Look stored messages up in ``base`` from now on: the same messages as the current
        base, or the base at a later position that has not passed the overlay's last event."""
        self._base = base

    # -- applying events -----------------------------------------------------------------------

    def add(self, message_id: str, parent_id: str | None) -> None:
        """A message was appended under ``parent_id``."""
        self._parents.pop(message_id, None)
        self._parents[message_id] = parent_id
        self._added.pop(message_id, None)
        self._added[message_id] = None
        if parent_id is not None:
            self._counts[parent_id] = self.child_count(parent_id) + 1
        # The newest message has no child yet (unless orphans already point at its id).
        self._latest = message_id if self.child_count(message_id) == 0 else _UNKNOWN

    def remove(self, message_id: str) -> None:
        """A message was deleted (its children keep their parent id; no cascade)."""
        found = self.find(message_id)
        if found is None:
            return
        self._parents[message_id] = _DELETED
        self._added.pop(message_id, None)
        parent_id = found[0]
        if parent_id is not None:
            self._counts[parent_id] = self.child_count(parent_id) - 1
        self._latest = _UNKNOWN

    def clear(self) -> None:
        """Every message was removed."""
        self._parents.clear()
        self._added.clear()
        self._counts.clear()
        self._cleared = True
        self._latest = None


__all__ = ["NO_MESSAGES", "MessageIndex", "NoMessages", "StoredMessages", "StoredMessagesMoved"]
