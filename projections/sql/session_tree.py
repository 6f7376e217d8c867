"""The session read model's writes on either engine that are not on the insert hot path:
edits, deletes, clears and compactions of the message tree, and the decision-state row.

Each message row links to its parent's row (``parent_mid``, NULL while the parent is not
stored) and carries its path's aggregates (``depth``: hops below its root; ``path_bytes``: bytes
of the rows root→it); each session counts its messages. Each engine inserts messages its own
(hand-tuned) way and keeps its full-text index: :class:`SqlSessionTree`'s hooks.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

from memstream.projections.session_projector import (
    ClearSession,
    DeleteMessages,
    ForgetPurged,
    InsertCompaction,
    RecordPosition,
    RecordPrompt,
    RecordSkill,
    SessionWrite,
    UpdateMessage,
    next_version,
)
from memstream.projections.sql.dialect import Dialect

logger = logging.getLogger(__name__)

# The writes that touch no message row (:meth:`SqlSessionTree.record`).
Recorded = RecordPosition | RecordPrompt | RecordSkill | ForgetPurged


@dataclass(frozen=True, slots=True)
class Stored:
    """A message row inserted (or held to be inserted), with its path aggregates: the parent
    of the next message of a chain, found without a lookup."""

    sid: int
    id: str
    mid: int
    depth: int
    path_bytes: int


# Moves a subtree's path aggregates by (depth, bytes): its root's path changed above it. The
# walk follows the row links down (children by parent id, checked against the link); UNION
# rather than UNION ALL, so that it ends even on a damaged read model whose links form a loop.
# Parameters: root, sid, depth, bytes.
SHIFT_SUBTREE = """
WITH RECURSIVE subtree (mid, id) AS (
    SELECT mid, id FROM messages WHERE mid = ?
    UNION
    SELECT c.mid, c.id FROM subtree JOIN messages AS c
    ON c.sid = ? AND c.parent_id = subtree.id AND c.parent_mid = subtree.mid
)
UPDATE messages SET depth = depth + ?, path_bytes = path_bytes + ?
WHERE mid IN (SELECT mid FROM subtree)
"""


# Entries the engine's rows keep of each kind (session keys, last rows) before they start again.
ROWS_KEPT = 4096


class SessionKeys:
    """What an engine's rows learn of the read model while they write (session keys, each
    session's last inserted row: the parent of its next message in a chain, found without a
    lookup), and what they owe it at their flush (message counts, positions). The engine
    forgets them after a rollback."""

    __slots__ = ("counts", "positions", "sids", "tips", "versions")

    dialect: ClassVar[Dialect]

    def __init__(self) -> None:
        self.sids: dict[tuple[str, str], int] = {}
        self.tips: dict[int, Stored] = {}
        self.counts: dict[int, int] = {}  # messages added to each session (sid)
        self.positions: dict[tuple[str, str], tuple[int, int]] = {}  # (seq, version)
        self.versions: dict[tuple[str, str], int] = {}  # each session's last version applied

    def forget(self) -> None:
        """Drop everything, the unwritten writes included (their transaction rolled back)."""
        for kind in type(self).__mro__:
            for name in getattr(kind, "__slots__", ()):
                getattr(self, name).clear()

    def sid(self, connection: Any, namespace: str, session_id: str) -> int:
        """The integer key of a session, created on first use."""
        key = (namespace, session_id)
        sid = self.sids.get(key)
        if sid is None:
            if len(self.sids) >= ROWS_KEPT:
                self.sids.clear()
            sql = self.dialect.sql
            row = connection.execute(
                sql("SELECT sid FROM session_keys WHERE namespace = ? AND session_id = ?"), key
            ).fetchone()
            if row is None:
                row = connection.execute(
                    sql(
                        "INSERT INTO session_keys (namespace, session_id) VALUES (?, ?) "
                        "RETURNING sid"
                    ),
                    key,
                ).fetchone()
            sid = self.sids[key] = int(row[0])
        return sid

    def flush(self, connection: Any) -> None:
        """Write what the writes so far still owe the read model."""
        raise NotImplementedError

    def stored(self, row: Stored) -> None:
        if len(self.tips) >= ROWS_KEPT and row.sid not in self.tips:
            self.tips.clear()
        self.tips[row.sid] = row


def size_of(content: str) -> int:
    """A message's bytes, as its row counts them."""
    return len(content.encode("utf-8", "surrogatepass"))


class SqlSessionTree:
    """Session writes written once; an engine subclasses it with its ``dialect`` and its
    index's hooks (:meth:`_unindex`, :meth:`_update`, :meth:`_clear`)."""

    dialect: ClassVar[Dialect]

    @classmethod
    def _execute(cls, connection: Any, statement: str, params: Any = ()) -> Any:
        return connection.execute(cls.dialect.sql(statement), params)

    # -- the engine's index -------------------------------------------------------------------

    @classmethod
    def _unindex(cls, connection: Any, mid: int, content: str) -> None:
        """Remove a message row's search entry before the row is deleted."""

    @classmethod
    def _update(cls, connection: Any, sid: int, write: UpdateMessage) -> None:
        """Change a message's content (its search entry with it; its subtree's bytes)."""
        raise NotImplementedError

    @classmethod
    def _clear(cls, connection: Any, sid: int) -> None:
        """Remove a session's messages (with their search entries) and compactions."""
        raise NotImplementedError

    @classmethod
    def _forget_purged(cls, connection: Any, write: ForgetPurged) -> None:
        """Remove every row of the sessions whose last event is at one of the purged
        sequences."""
        raise NotImplementedError

    # -- written once ---------------------------------------------------------------------------

    @classmethod
    def record(cls, connection: Any, write: Recorded, rows: SessionKeys) -> None:
        """Apply a write that touches no message row: a position, the decision state, a
        purge."""
        if isinstance(write, RecordPosition):
            cls.check_version(connection, write, rows.versions)
            rows.positions[(write.namespace, write.session_id)] = (write.seq, write.version)
        elif isinstance(write, ForgetPurged):
            rows.flush(connection)
            cls._forget_purged(connection, write)
            rows.forget()
        else:
            cls.record_state(connection, write)

    @classmethod
    def change(cls, connection: Any, sid: int, write: SessionWrite, counts: dict[int, int]) -> None:
        """Apply an edit, a delete, a clear or a compaction of session ``sid`` (``counts``:
        messages added to each session, still owed to its row)."""
        if isinstance(write, UpdateMessage):
            cls._update(connection, sid, write)
        elif isinstance(write, DeleteMessages):
            for message_id in write.message_ids:
                if cls._delete(connection, sid, message_id):
                    counts[sid] = counts.get(sid, 0) - 1
        elif isinstance(write, ClearSession):
            cls._clear(connection, sid)
            cls._execute(connection, "UPDATE session_keys SET messages = 0 WHERE sid = ?", (sid,))
            counts[sid] = 0
            # A clear also unloads the session's skills (its frozen prompt stays).
            cls._execute(
                connection,
                "UPDATE session_state SET loaded_skills = '[]' "
                "WHERE namespace = ? AND session_id = ?",
                (write.namespace, write.session_id),
            )
        elif isinstance(write, InsertCompaction):
            cls._execute(
                connection,
                "INSERT INTO compactions (sid, id, summary, from_message_id, to_message_id, "
                "position, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    sid,
                    write.compaction_id,
                    write.summary,
                    write.from_message_id,
                    write.to_message_id,
                    write.position,
                    write.created_at,
                ),
            )

    @classmethod
    def shift_subtree(cls, connection: Any, sid: int, root: int, depth: int, size: int) -> None:
        """Move the path aggregates of ``root``'s subtree by ``depth`` and ``size`` bytes."""
        if depth or size:
            cls._execute(connection, SHIFT_SUBTREE, (root, sid, depth, size))

    @classmethod
    def adopt_orphans(cls, connection: Any, row: Stored) -> None:
        """Orphans left by a delete of ``row``'s id point at it again, and their subtrees'
        paths now run through it."""
        orphans = cls._execute(
            connection,
            "SELECT mid, depth, bytes, path_bytes FROM messages "
            "WHERE sid = ? AND parent_id = ? AND parent_mid IS NULL",
            (row.sid, row.id),
        ).fetchall()
        for orphan, orphan_depth, orphan_bytes, orphan_path_bytes in orphans:
            cls._execute(
                connection, "UPDATE messages SET parent_mid = ? WHERE mid = ?", (row.mid, orphan)
            )
            cls.shift_subtree(
                connection,
                row.sid,
                orphan,
                row.depth + 1 - orphan_depth,
                row.path_bytes + orphan_bytes - orphan_path_bytes,
            )

    @classmethod
    def parent_of(
        cls, connection: Any, sid: int, parent_id: str | None, last: Stored | None
    ) -> tuple[int | None, int, int]:
        """The row id and path aggregates (depth, path bytes) of a new message's parent row:
        depth -1 and no bytes for a root or a parent that is not stored. In a chain the parent
        is the row inserted just before (``last``): no lookup."""
        if parent_id is None:
            return None, -1, 0
        if last is not None and last.sid == sid and last.id == parent_id:
            return last.mid, last.depth, last.path_bytes
        row = cls._execute(
            connection,
            "SELECT mid, depth, path_bytes FROM messages WHERE sid = ? AND id = ?",
            (sid, parent_id),
        ).fetchone()
        return (None, -1, 0) if row is None else (int(row[0]), int(row[1]), int(row[2]))

    @classmethod
    def _delete(cls, connection: Any, sid: int, message_id: str) -> bool:
        """Delete a message (``False``: it was not stored)."""
        row = cls._execute(
            connection,
            "SELECT mid, parent_id, depth, path_bytes, content FROM messages "
            "WHERE sid = ? AND id = ?",
            (sid, message_id),
        ).fetchone()
        if row is None:
            return False
        mid, parent_id, depth, path_bytes = int(row[0]), row[1], int(row[2]), int(row[3])
        # Each child becomes the root of its path: its subtree loses this row and all above it.
        children = cls._execute(
            connection,
            "SELECT mid FROM messages WHERE sid = ? AND parent_id = ? AND parent_mid = ?",
            (sid, message_id, mid),
        ).fetchall()
        for (child,) in children:
            cls.shift_subtree(connection, sid, int(child), -(depth + 1), -path_bytes)
        cls._unindex(connection, mid, row[4])
        cls._execute(connection, "DELETE FROM messages WHERE mid = ?", (mid,))
        # Children keep their parent id but lose the link: a later row may reuse this row id.
        cls._execute(
            connection,
            "UPDATE messages SET parent_mid = NULL WHERE sid = ? AND parent_id = ?",
            (sid, message_id),
        )
        if parent_id is not None:
            cls._execute(
                connection,
                "UPDATE messages SET child_count = child_count - 1 WHERE sid = ? AND id = ?",
                (sid, parent_id),
            )
        return True

    @classmethod
    def check_version(
        cls, connection: Any, write: RecordPosition, versions: dict[tuple[str, str], int]
    ) -> None:
        """Warn of versions of the session missing before ``write``'s (see
        :func:`missing_versions`); the event is applied all the same."""

        def stored(key: tuple[str, str]) -> int | None:
            row = cls._execute(
                connection,
                "SELECT version FROM session_state WHERE namespace = ? AND session_id = ?",
                key,
            ).fetchone()
            return None if row is None else int(row[0])

        gap = next_version(versions, write, stored)
        if gap is not None:
            logger.warning("%s", gap)

    @classmethod
    def record_state(cls, connection: Any, write: RecordPrompt | RecordSkill) -> None:
        """The session's decision-state row (its position is written when the engine's rows
        flush, after it in the same transaction: until then the row may be new)."""
        key = (write.namespace, write.session_id)
        cls._execute(
            connection,
            "INSERT INTO session_state (namespace, session_id, last_seq, version) "
            "VALUES (?, ?, 0, 0) ON CONFLICT DO NOTHING",
            key,
        )
        if isinstance(write, RecordPrompt):
            cls._execute(
                connection,
                "UPDATE session_state SET frozen_prompt = ? WHERE namespace = ? AND session_id = ?",
                (write.prompt, *key),
            )
            return
        row = cls._execute(
            connection,
            "SELECT loaded_skills FROM session_state WHERE namespace = ? AND session_id = ?"
            + cls.dialect.lock_row,
            key,
        ).fetchone()
        skills: list[str] = json.loads(row[0])
        # As the aggregate's dict: a skill keeps its place when loaded again.
        if write.loaded and write.skill not in skills:
            skills.append(write.skill)
        elif not write.loaded and write.skill in skills:
            skills.remove(write.skill)
        cls._execute(
            connection,
            "UPDATE session_state SET loaded_skills = ? WHERE namespace = ? AND session_id = ?",
            (json.dumps(skills), *key),
        )
