"""Built-in blocks and search blocks restored from the context read model: the snapshot a writer
decides a context command on, instead of replaying the block's subject.

Every write of a built-in block carries its whole content, so a block written a thousand times
took a thousand events (each up to the content limit) to restore. The context projection keeps,
with each block's content, the stream sequence and aggregate version of its last write; a search
block keeps the same, and its entries are looked up one at a time when a decision needs one
(the same rules as a session's messages: inside a reading, or guarded by the block's recorded
position, see :mod:`~memstream.projections.sqlite.session_snapshots`).
"""

from __future__ import annotations

import sqlite3

from memstream.domain.context import NO_ENTRIES
from memstream.projections.snapshots import DocumentSnapshot, LookupWindow, SearchSnapshot
from memstream.projections.sqlite.read_connection import (
    ReadConnection,
    Reading,
    Reads,
)


def _reads(connection: sqlite3.Connection | ReadConnection) -> ReadConnection:
    return connection if isinstance(connection, ReadConnection) else ReadConnection(connection)


class SqliteDocumentSnapshots:
    """Snapshots of a namespace's built-in blocks (keyed by ``document_id``)."""

    def __init__(self, connection: sqlite3.Connection | ReadConnection, namespace: str) -> None:
        self.connection = _reads(connection)
        self.namespace = namespace

    def reading(self) -> Reading:
        return Reading(self.connection)

    def guard(self, low: int, high: int) -> None:
        pass  # documents make no lookups after they are restored

    def snapshot(self, identity: str) -> DocumentSnapshot:
        label, _, session_id = identity.partition("\x00")
        row = self.connection.execute(
            "SELECT seq, version, content FROM context_blocks "
            "WHERE namespace = ? AND session_id = ? AND label = ?",
            (self.namespace, session_id, label),
        ).fetchone()
        if row is None:
            return DocumentSnapshot(self.namespace, identity, 0, 0, None)
        return DocumentSnapshot(self.namespace, identity, int(row[0]), int(row[1]), str(row[2]))


class SqliteStoredEntries:
    """One search block's stored entries (:class:`StoredEntries` over ``search_entries``)."""

    __slots__ = ("bid", "connection", "key", "window")

    def __init__(
        self, connection: Reads, bid: int, key: tuple[str, str], window: LookupWindow
    ) -> None:
        self.connection = connection
        self.bid = bid
        self.key = key  # (namespace, block key): a rebuilt read model may number blocks anew
        self.window = window

    def content(self, entry_key: str) -> str | None:
        row = self.connection.execute(
            "SELECT e.content, b.last_seq FROM search_blocks AS b "
            "LEFT JOIN search_entries AS e ON e.bid = b.bid AND e.key = ? "
            "WHERE b.bid = ? AND b.namespace = ? AND b.key = ?",
            (entry_key, self.bid, *self.key),
        ).fetchone()
        self.window.admit(None if row is None else row[1], f"search block {self.key[1]!r}")
        return None if row is None or row[0] is None else str(row[0])


class SqliteSearchSnapshots:
    """Snapshots of a namespace's search blocks (keyed by the block's key)."""

    def __init__(self, connection: sqlite3.Connection | ReadConnection, namespace: str) -> None:
        self.connection = _reads(connection)
        self.namespace = namespace
        self._window = LookupWindow()

    def reading(self) -> Reading:
        self._window.low = None
        return Reading(self.connection)

    def guard(self, low: int, high: int) -> None:
        self._window.low = low
        self._window.high = high

    def snapshot(self, key: str) -> SearchSnapshot:
        row = self.connection.execute(
            "SELECT bid, last_seq, version FROM search_blocks WHERE namespace = ? AND key = ?",
            (self.namespace, key),
        ).fetchone()
        if row is None or not row[1]:
            return SearchSnapshot(self.namespace, key, 0, 0, NO_ENTRIES)
        entries = SqliteStoredEntries(
            self.connection, int(row[0]), (self.namespace, key), self._window
        )
        return SearchSnapshot(self.namespace, key, int(row[1]), int(row[2]), entries)
