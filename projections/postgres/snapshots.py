"""Aggregates restored from the PostgreSQL read model: the snapshots a writer decides commands
on, with the same rules as SQLite's (:mod:`memstream.projections.sqlite.session_snapshots`):
inside a reading (one repeatable-read transaction) every lookup sees the snapshot's moment;
between readings a lookup also reads the aggregate's recorded position and refuses an answer
from outside the range the writer allows."""

from __future__ import annotations

import json
from collections.abc import Sequence

from memstream.domain.context import NO_ENTRIES
from memstream.domain.message_index import NO_MESSAGES, Probe, StoredMessagesMoved
from memstream.projections.postgres.reads import PgReading, PgReads
from memstream.projections.snapshots import (
    DocumentSnapshot,
    LookupWindow,
    SearchSnapshot,
    SessionSnapshot,
)
from memstream.projections.sql.dialect import POSTGRES
from memstream.projections.sql.registry import SqlRecordSnapshots

_PROBE = (
    "SELECT m.parent_id, m.position, coalesce(m.child_count, "
    "(SELECT count(*) FROM messages WHERE sid = %(sid)s AND parent_id = %(id)s)) "
    "FROM (SELECT 1) AS one LEFT JOIN messages AS m ON m.sid = %(sid)s AND m.id = %(id)s"
)
_GUARDED_PROBE = (
    "SELECT m.parent_id, m.position, coalesce(m.child_count, "
    "(SELECT count(*) FROM messages WHERE sid = %(sid)s AND parent_id = %(id)s)), "
    "(SELECT last_seq FROM session_state WHERE namespace = %(ns)s AND session_id = %(session)s "
    "AND sid = %(sid)s) "
    "FROM (SELECT 1) AS one LEFT JOIN messages AS m ON m.sid = %(sid)s AND m.id = %(id)s"
)


class PgStoredMessages:
    """One session's message rows (:class:`~memstream.domain.message_index.StoredMessages`)."""

    __slots__ = ("key", "reads", "sid", "window")

    def __init__(self, reads: PgReads, sid: int, key: tuple[str, str], window: LookupWindow):
        self.reads = reads
        self.sid = sid
        self.key = key
        self.window = window

    def probe(self, message_id: str) -> tuple[tuple[str | None, int] | None, int]:
        params = {"sid": self.sid, "id": message_id, "ns": self.key[0], "session": self.key[1]}
        if self.window.low is None:
            row = self.reads.execute(_PROBE, params).fetchone()
            assert row is not None
            parent_id, position, count = row
        else:
            row = self.reads.execute(_GUARDED_PROBE, params).fetchone()
            assert row is not None
            parent_id, position, count, seq = row
            self.window.admit(seq, f"session {self.key[1]!r}")
        return (None if position is None else (parent_id, int(position))), int(count)

    def probe_many(self, message_ids: Sequence[str]) -> dict[str, Probe]:
        """:meth:`probe` of each id in one statement (one consistent view)."""
        rows = self.reads.execute(
            "SELECT 0, id, parent_id, position, child_count FROM messages "
            "WHERE sid = %(sid)s AND id = ANY(%(ids)s) "
            "UNION ALL SELECT 1, parent_id, NULL, NULL, count(*) FROM messages "
            "WHERE sid = %(sid)s AND parent_id = ANY(%(ids)s) GROUP BY parent_id "
            "UNION ALL SELECT 2, NULL, NULL, NULL, (SELECT last_seq FROM session_state "
            "WHERE namespace = %(ns)s AND session_id = %(session)s AND sid = %(sid)s)",
            {"sid": self.sid, "ids": list(message_ids), "ns": self.key[0], "session": self.key[1]},
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
            "SELECT id, position FROM messages WHERE sid = %s AND child_count = 0 "
            "AND position < %s ORDER BY position DESC LIMIT %s",
            (self.sid, 2**63 - 1 if below is None else below, limit),
        ).fetchall()
        return [(str(r[0]), int(r[1])) for r in rows]


class PgSessionSnapshots:
    """Snapshots of a namespace's sessions from the sessions read model."""

    def __init__(self, reads: PgReads, namespace: str) -> None:
        self.reads = reads
        self.namespace = namespace
        self._window = LookupWindow()

    def reading(self) -> PgReading:
        self._window.low = None
        return PgReading(self.reads)

    def guard(self, low: int, high: int) -> None:
        self._window.low = low
        self._window.high = high

    def snapshot(self, session_id: str) -> SessionSnapshot:
        row = self.reads.execute(
            "SELECT last_seq, version, frozen_prompt, loaded_skills, sid FROM session_state "
            "WHERE namespace = %s AND session_id = %s",
            (self.namespace, session_id),
        ).fetchone()
        if row is None:
            return SessionSnapshot(self.namespace, session_id, 0, 0, None, (), NO_MESSAGES)
        seq, version, prompt, skills, sid = row
        messages = (
            NO_MESSAGES
            if sid is None
            else PgStoredMessages(self.reads, int(sid), (self.namespace, session_id), self._window)
        )
        skills_loaded = () if skills == "[]" else tuple(json.loads(skills))
        return SessionSnapshot(
            self.namespace,
            session_id,
            int(seq),
            int(version),
            prompt,
            skills_loaded,
            messages,
        )


class PgDocumentSnapshots:
    """Snapshots of a namespace's built-in blocks (keyed by ``document_id``)."""

    def __init__(self, reads: PgReads, namespace: str) -> None:
        self.reads = reads
        self.namespace = namespace

    def reading(self) -> PgReading:
        return PgReading(self.reads)

    def guard(self, low: int, high: int) -> None:
        pass  # documents make no lookups after they are restored

    def snapshot(self, identity: str) -> DocumentSnapshot:
        label, _, session_id = identity.partition("\x00")
        row = self.reads.execute(
            "SELECT seq, version, content FROM context_blocks "
            "WHERE namespace = %s AND session_id = %s AND label = %s",
            (self.namespace, session_id, label),
        ).fetchone()
        if row is None:
            return DocumentSnapshot(self.namespace, identity, 0, 0, None)
        content = str(row[2])
        return DocumentSnapshot(self.namespace, identity, int(row[0]), int(row[1]), content)


class PgStoredEntries:
    """One search block's stored entries (``StoredEntries`` over ``search_entries``)."""

    __slots__ = ("bid", "key", "reads", "window")

    def __init__(self, reads: PgReads, bid: int, key: tuple[str, str], window: LookupWindow):
        self.reads = reads
        self.bid = bid
        self.key = key
        self.window = window

    def content(self, entry_key: str) -> str | None:
        row = self.reads.execute(
            "SELECT e.content, b.last_seq FROM search_blocks AS b "
            "LEFT JOIN search_entries AS e ON e.bid = b.bid AND e.key = %s "
            "WHERE b.bid = %s AND b.namespace = %s AND b.key = %s",
            (entry_key, self.bid, *self.key),
        ).fetchone()
        self.window.admit(None if row is None else row[1], f"search block {self.key[1]!r}")
        return None if row is None or row[0] is None else str(row[0])


class PgSearchSnapshots:
    """Snapshots of a namespace's search blocks (keyed by the block's key)."""

    def __init__(self, reads: PgReads, namespace: str) -> None:
        self.reads = reads
        self.namespace = namespace
        self._window = LookupWindow()

    def reading(self) -> PgReading:
        self._window.low = None
        return PgReading(self.reads)

    def guard(self, low: int, high: int) -> None:
        self._window.low = low
        self._window.high = high

    def snapshot(self, key: str) -> SearchSnapshot:
        row = self.reads.execute(
            "SELECT bid, last_seq, version FROM search_blocks WHERE namespace = %s AND key = %s",
            (self.namespace, key),
        ).fetchone()
        if row is None or not row[1]:
            return SearchSnapshot(self.namespace, key, 0, 0, NO_ENTRIES)
        entries = PgStoredEntries(self.reads, int(row[0]), (self.namespace, key), self._window)
        return SearchSnapshot(self.namespace, key, int(row[1]), int(row[2]), entries)


class PgRecordSnapshots(SqlRecordSnapshots):
    """Snapshots of a namespace's registry records (keyed by session id)."""

    def __init__(self, reads: PgReads, namespace: str) -> None:
        super().__init__(reads, namespace, POSTGRES, lambda: PgReading(reads))
