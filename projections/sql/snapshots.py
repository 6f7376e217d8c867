"""Aggregates restored from the read model on either engine: the snapshots a writer decides
commands on, instead of replaying their subjects.

The projections keep, in the same transaction as an aggregate's rows, the stream sequence and
version of its last event (a session's also its frozen prompt and loaded skills). A session
restored from them looks its messages up lazily, row by row, so a command on a 100,000-message
session reads the handful of rows it needs; a search block looks its entries up the same way.
Every read happens inside a reading (one read transaction: the rows and the recorded position
belong to the same moment) or, between readings, is one statement that also reads the
aggregate's recorded position and refuses an answer from outside the range the writer allows
(``guard``), so a command on an aggregate the writer holds costs one statement per lookup.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from memstream.domain.context import NO_ENTRIES, ContextDocument, SearchIndex
from memstream.domain.message_index import NO_MESSAGES, Probe, StoredMessagesMoved
from memstream.domain.session import SessionAggregate
from memstream.domain.session_registry import SessionRecord
from memstream.projections.ports import SnapshotSource
from memstream.projections.snapshots import (
    DocumentSnapshot,
    LookupWindow,
    SearchSnapshot,
    SessionSnapshot,
)
from memstream.projections.sql.dialect import Dialect, Executes
from memstream.projections.sql.reading import Reader, Reading
from memstream.projections.sql.registry import SqlRecordSnapshots

# A stored message carries its children count; an id that is not stored (deleted, with orphans
# still pointing at it) is counted on the children index. Parameters: sid, id, sid, id.
_PROBE = (
    "SELECT m.parent_id, m.position, coalesce(m.child_count, "
    "(SELECT count(*) FROM messages WHERE sid = ? AND parent_id = ?)) "
    "FROM (SELECT 1) AS one LEFT JOIN messages AS m ON m.sid = ? AND m.id = ?"
)
# The same, with the session's recorded position (NULL if its rows were renumbered).
# Parameters: sid, id, namespace, session id, sid, sid, id.
_GUARDED_PROBE = (
    "SELECT m.parent_id, m.position, coalesce(m.child_count, "
    "(SELECT count(*) FROM messages WHERE sid = ? AND parent_id = ?)), "
    "(SELECT last_seq FROM session_state WHERE namespace = ? AND session_id = ? AND sid = ?) "
    "FROM (SELECT 1) AS one LEFT JOIN messages AS m ON m.sid = ? AND m.id = ?"
)


class _Lookups:
    """Lookups of one aggregate's rows (``row``: its key in the read model), refused between
    readings when its recorded position is outside ``window``."""

    __slots__ = ("dialect", "key", "reads", "row", "window")

    def __init__(
        self,
        reads: Executes,
        row: int,
        key: tuple[str, str],
        window: LookupWindow,
        dialect: Dialect,
    ) -> None:
        self.reads = reads
        self.row = row
        self.key = key  # (namespace, name): a rebuilt read model may number aggregates anew
        self.window = window
        self.dialect = dialect


class SqlStoredMessages(_Lookups):
    """One session's message rows (:class:`~memstream.domain.message_index.StoredMessages`
    over the ``messages`` table)."""

    __slots__ = ()

    def probe(self, message_id: str) -> tuple[tuple[str | None, int] | None, int]:
        window, sid = self.window, self.row
        if window.low is None:
            parent_id, position, count = self.reads.execute(
                self.dialect.sql(_PROBE), (sid, message_id, sid, message_id)
            ).fetchone()
        else:
            parent_id, position, count, seq = self.reads.execute(
                self.dialect.sql(_GUARDED_PROBE),
                (sid, message_id, *self.key, sid, sid, message_id),
            ).fetchone()
            window.admit(seq, f"session {self.key[1]!r}")
        return (None if position is None else (parent_id, int(position))), int(count)

    def probe_many(self, message_ids: Sequence[str]) -> dict[str, Probe]:
        """:meth:`probe` of each id in one statement (one consistent view): the stored rows,
        the children counts of ids not stored (orphans), and the session's recorded position."""
        ids, id_values = self.dialect.any_of("id", message_ids)
        parents, parent_values = self.dialect.any_of("parent_id", message_ids)
        rows = self.reads.execute(
            self.dialect.sql(
                f"SELECT 0, id, parent_id, position, child_count FROM messages "
                f"WHERE sid = ? AND {ids} "
                f"UNION ALL SELECT 1, parent_id, NULL, NULL, count(*) FROM messages "
                f"WHERE sid = ? AND {parents} GROUP BY parent_id "
                "UNION ALL SELECT 2, NULL, NULL, NULL, (SELECT last_seq FROM session_state "
                "WHERE namespace = ? AND session_id = ? AND sid = ?)"
            ),
            (self.row, *id_values, self.row, *parent_values, *self.key, self.row),
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
        rows = self.reads.execute(
            self.dialect.sql(
                "SELECT id, position FROM messages WHERE sid = ? AND child_count = 0 "
                "AND position < ? ORDER BY position DESC LIMIT ?"
            ),
            (self.row, 2**63 - 1 if below is None else below, limit),
        ).fetchall()
        return [(str(r[0]), int(r[1])) for r in rows]


class _Snapshots:
    """Snapshots of a namespace's aggregates of one kind."""

    def __init__(self, reads: Reader, namespace: str, dialect: Dialect) -> None:
        self.reads = reads
        self.namespace = namespace
        self.dialect = dialect
        self._window = LookupWindow()

    def reading(self) -> Reading:
        """One read transaction (a consistent view) for a snapshot and the lookups after it."""
        self._window.low = None
        return Reading(self.reads)

    def guard(self, low: int, high: int) -> None:
        """Until the next reading, lookups run on their own and refuse (raising
        :class:`StoredMessagesMoved`) an aggregate whose recorded position is outside
        ``low..high`` or whose rows were renumbered."""
        self._window.low = low
        self._window.high = high


class SqlSessionSnapshots(_Snapshots):
    """Snapshots of a namespace's sessions from the sessions read model."""

    def snapshot(self, session_id: str) -> SessionSnapshot:
        """The session as of the read model's last event of it (seq 0 if it has none)."""
        row = self.reads.execute(
            self.dialect.sql(
                "SELECT last_seq, version, frozen_prompt, loaded_skills, sid FROM session_state "
                "WHERE namespace = ? AND session_id = ?"
            ),
            (self.namespace, session_id),
        ).fetchone()
        if row is None:
            return SessionSnapshot(self.namespace, session_id, 0, 0, None, (), NO_MESSAGES)
        seq, version, prompt, skills, sid = row
        messages = (
            NO_MESSAGES
            if sid is None
            else SqlStoredMessages(
                self.reads, int(sid), (self.namespace, session_id), self._window, self.dialect
            )
        )
        loaded = () if skills == "[]" else tuple(json.loads(skills))
        return SessionSnapshot(
            self.namespace, session_id, int(seq), int(version), prompt, loaded, messages
        )


class SqlDocumentSnapshots(_Snapshots):
    """Snapshots of a namespace's built-in blocks (keyed by ``document_id``): every write of a
    block carries its whole content, which the context projection keeps with its position."""

    def guard(self, low: int, high: int) -> None:
        pass  # documents make no lookups after they are restored

    def snapshot(self, identity: str) -> DocumentSnapshot:
        label, _, session_id = identity.partition("\x00")
        row = self.reads.execute(
            self.dialect.sql(
                "SELECT seq, version, content FROM context_blocks "
                "WHERE namespace = ? AND session_id = ? AND label = ?"
            ),
            (self.namespace, session_id, label),
        ).fetchone()
        if row is None:
            return DocumentSnapshot(self.namespace, identity, 0, 0, None)
        return DocumentSnapshot(self.namespace, identity, int(row[0]), int(row[1]), str(row[2]))


class SqlStoredEntries(_Lookups):
    """One search block's stored entries (``StoredEntries`` over ``search_entries``)."""

    __slots__ = ()

    def content(self, entry_key: str) -> str | None:
        row = self.reads.execute(
            self.dialect.sql(
                "SELECT e.content, b.last_seq FROM search_blocks AS b "
                "LEFT JOIN search_entries AS e ON e.bid = b.bid AND e.key = ? "
                "WHERE b.bid = ? AND b.namespace = ? AND b.key = ?"
            ),
            (entry_key, self.row, *self.key),
        ).fetchone()
        self.window.admit(None if row is None else row[1], f"search block {self.key[1]!r}")
        return None if row is None or row[0] is None else str(row[0])


class SqlSearchSnapshots(_Snapshots):
    """Snapshots of a namespace's search blocks (keyed by the block's key)."""

    def snapshot(self, key: str) -> SearchSnapshot:
        row = self.reads.execute(
            self.dialect.sql(
                "SELECT bid, last_seq, version FROM search_blocks WHERE namespace = ? AND key = ?"
            ),
            (self.namespace, key),
        ).fetchone()
        if row is None or not row[1]:
            return SearchSnapshot(self.namespace, key, 0, 0, NO_ENTRIES)
        entries = SqlStoredEntries(
            self.reads, int(row[0]), (self.namespace, key), self._window, self.dialect
        )
        return SearchSnapshot(self.namespace, key, int(row[1]), int(row[2]), entries)


class SnapshotSources:
    """A read side's snapshot sources, on its reader (``reads``) in its ``dialect``."""

    reads: Reader
    dialect: Dialect

    def session_snapshots(self, namespace: str) -> SnapshotSource[SessionAggregate]:
        return SqlSessionSnapshots(self.reads, namespace, self.dialect)

    def document_snapshots(self, namespace: str) -> SnapshotSource[ContextDocument]:
        return SqlDocumentSnapshots(self.reads, namespace, self.dialect)

    def search_snapshots(self, namespace: str) -> SnapshotSource[SearchIndex]:
        return SqlSearchSnapshots(self.reads, namespace, self.dialect)

    def record_snapshots(self, namespace: str) -> SnapshotSource[SessionRecord]:
        reads = self.reads
        return SqlRecordSnapshots(reads, namespace, self.dialect, lambda: Reading(reads))
