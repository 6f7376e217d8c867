"""Sessions restored from the SQLite read model: the snapshot a writer decides commands on.

The sessions projection keeps, in the same transaction as a session's messages, the stream
sequence and version of the session's last event, its frozen prompt and loaded skills
(``session_state``). A session restored from them looks its messages up lazily, row by row, so a
command on a 100,000-message session reads the handful of rows it needs. Every read happens
inside :meth:`SqliteSessionSnapshots.reading` (one read transaction), so the rows and the
recorded position belong to the same moment — or, between readings, is one statement that also
reads the session's recorded position and refuses an answer from outside the range the writer
allows (:meth:`SqliteSessionSnapshots.guard`), so a command on a session the writer holds costs
one statement per message id it has not seen.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from memstream.domain.message_index import (
    NO_MESSAGES,
    Probe,
    StoredMessagesMoved,
)
from memstream.projections.snapshots import LookupWindow, SessionSnapshot
from memstream.projections.sqlite.read_connection import (
    ReadConnection,
    Reading,
    Reads,
)

# A stored message carries its children count; an id that is not stored (deleted, with orphans
# still pointing at it) is counted on the children index.
_PROBE = (
    "SELECT m.parent_id, m.position, coalesce(m.child_count, "
    "(SELECT count(*) FROM messages WHERE sid = ?1 AND parent_id = ?2)) "
    "FROM (SELECT 1) LEFT JOIN messages AS m ON m.sid = ?1 AND m.id = ?2"
)
# The same, with the session's recorded position (NULL if its rows were renumbered).
_GUARDED_PROBE = (
    "SELECT m.parent_id, m.position, coalesce(m.child_count, "
    "(SELECT count(*) FROM messages WHERE sid = ?1 AND parent_id = ?2)), "
    "(SELECT last_seq FROM session_state WHERE namespace = ?3 AND session_id = ?4 AND sid = ?1) "
    "FROM (SELECT 1) LEFT JOIN messages AS m ON m.sid = ?1 AND m.id = ?2"
)


class SqliteStoredMessages:
    """One session's message rows (:class:`StoredMessages` over the ``messages`` table)."""

    __slots__ = ("connection", "key", "sid", "window")

    def __init__(
        self, connection: Reads, sid: int, key: tuple[str, str], window: LookupWindow
    ) -> None:
        self.connection = connection
        self.sid = sid
        self.key = key
        self.window = window

    def probe(self, message_id: str) -> tuple[tuple[str | None, int] | None, int]:
        window = self.window
        if window.low is None:
            parent_id, position, count = self.connection.execute(
                _PROBE, (self.sid, message_id)
            ).fetchone()
        else:
            parent_id, position, count, seq = self.connection.execute(
                _GUARDED_PROBE, (self.sid, message_id, *self.key)
            ).fetchone()
            window.admit(seq, f"session {self.key[1]!r}")
        return (None if position is None else (parent_id, int(position))), int(count)

    def probe_many(self, message_ids: Sequence[str]) -> dict[str, Probe]:
        """:meth:`probe` of each id in one statement (one consistent view): the stored rows,
        the children counts of ids not stored (orphans), and the session's recorded position."""
        marks = ",".join("?" * len(message_ids))
        rows = self.connection.execute(
            f"SELECT 0, id, parent_id, position, child_count FROM messages "
            f"WHERE sid = ?1 AND id IN ({marks}) "
            f"UNION ALL SELECT 1, parent_id, NULL, NULL, count(*) FROM messages "
            f"WHERE sid = ?1 AND parent_id IN ({marks}) GROUP BY parent_id "
            "UNION ALL SELECT 2, NULL, NULL, NULL, (SELECT last_seq FROM session_state "
            "WHERE namespace = ? AND session_id = ? AND sid = ?1)",
            (self.sid, *message_ids, *message_ids, *self.key),
        ).fetchall()
        stored: dict[str, Probe] = {}
        orphans: dict[str, int] = {}
        for kind, message_id, parent_id, position, value in rows:
            if kind == 0:
                stored[message_id] = ((parent_id, int(position)), int(value))
            elif kind == 1:
                orphans[message_id] = int(value)
            else:
                self.window.admit(value, f"session {self.key[1]!r}")
        return {m: stored[m] if m in stored else (None, orphans.get(m, 0)) for m in message_ids}

    def leaves(self, below: int | None, limit: int) -> Sequence[tuple[str, int]]:
        if self.window.low is not None:
            raise StoredMessagesMoved("the latest leaf is looked up inside a reading")
        rows = self.connection.execute(
            "SELECT id, position FROM messages WHERE sid = ? AND child_count = 0 "
            "AND position < ? ORDER BY position DESC LIMIT ?",
            (self.sid, 2**63 - 1 if below is None else below, limit),
        ).fetchall()
        return [(str(r[0]), int(r[1])) for r in rows]


class SqliteSessionSnapshots:
    """Snapshots of a namespace's sessions from the sessions read model."""

    def __init__(self, connection: sqlite3.Connection | ReadConnection, namespace: str) -> None:
        self.connection = (
            connection if isinstance(connection, ReadConnection) else ReadConnection(connection)
        )
        self.namespace = namespace
        self._window = LookupWindow()

    def reading(self) -> Reading:
        """One read transaction (a consistent view) for a snapshot and the lookups after it."""
        self._window.low = None
        return Reading(self.connection)

    def guard(self, low: int, high: int) -> None:
        """Until the next reading, lookups run on their own and refuse (raising
        :class:`StoredMessagesMoved`) a session whose recorded position is outside
        ``low..high`` or whose rows were renumbered."""
        self._window.low = low
        self._window.high = high

    def snapshot(self, session_id: str) -> SessionSnapshot:
        """The session as of the read model's last event of it (seq 0 if it has none)."""
        row = self.connection.execute(
            "SELECT last_seq, version, frozen_prompt, loaded_skills, sid FROM session_state "
            "WHERE namespace = ? AND session_id = ?",
            (self.namespace, session_id),
        ).fetchone()
        if row is None:
            return SessionSnapshot(self.namespace, session_id, 0, 0, None, (), NO_MESSAGES)
        seq, version, prompt, skills, sid = row
        messages = (
            NO_MESSAGES
            if sid is None
            else SqliteStoredMessages(
                self.connection, sid, (self.namespace, session_id), self._window
            )
        )
        loaded = () if skills == "[]" else tuple(json.loads(skills))
        return SessionSnapshot(
            self.namespace, session_id, int(seq), int(version), prompt, loaded, messages
        )
