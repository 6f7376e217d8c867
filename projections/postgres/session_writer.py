"""Applies session read-model writes to PostgreSQL: the message tree with its path aggregates,
full text (a ``tsvector`` per message, no second copy of its text), overlays, decision state.

The same writes as SQLite's writer (:mod:`memstream.projections.sqlite.session_writer`) and the
same rows: each message row links to its parent's row (``parent_mid``, NULL while the parent is
not stored) and carries its path's aggregates (``depth``: hops below its root; ``path_bytes``:
bytes of the rows root→it); each session counts its messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg

from memstream.projections.postgres.schema import TEXT_SEARCH
from memstream.projections.postgres.text import searchable
from memstream.projections.session_projector import (
    ForgetPurged,
    InsertMessage,
    SessionWrite,
    UpdateMessage,
)
from memstream.projections.sql.dialect import POSTGRES
from memstream.projections.sql.session_tree import (
    SHIFT_SUBTREE,
    Recorded,
    SessionKeys,
    SqlSessionTree,
    Stored,
    size_of,
)

Connection = psycopg.Connection[tuple[Any, ...]]


@dataclass(slots=True)
class _Held:
    """A message insert held for :meth:`PgSessionRows.flush`, its row worked out in memory."""

    write: InsertMessage
    row: Stored
    parent_mid: int | None
    parent_held: bool  # its parent is held too (its children count is set in the row)
    size: int
    children: int = 0  # held children


# Message inserts held before they are written together (one statement each flush).
HELD_ROWS = 2000
# Message row ids reserved from the identity sequence at a time, for the held inserts.
MIDS_RESERVED = 1024

# All or nothing: where one of the ids is stored already (an id inserted twice, which the domain
# never does), nothing is inserted and the writer inserts row by row.
_INSERT_HELD = f"""
WITH t AS (
    SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::text[], %s::bigint[],
        %s::text[], %s::text[], %s::bigint[], %s::bigint[], %s::text[], %s::bigint[],
        %s::bigint[], %s::bigint[], %s::text[])
    AS t (mid, sid, id, parent_id, parent_mid, role, content, bytes, position, created_at,
        children, depth, path_bytes, text)
)
INSERT INTO messages (mid, sid, id, parent_id, parent_mid, role, content, bytes, position,
    created_at, child_count, depth, path_bytes, search)
SELECT t.mid, t.sid, t.id, t.parent_id, t.parent_mid, t.role, t.content, t.bytes, t.position,
    t.created_at,
    t.children + (SELECT count(*) FROM messages AS o WHERE o.sid = t.sid AND o.parent_id = t.id),
    t.depth, t.path_bytes, to_tsvector('{TEXT_SEARCH}', t.text)
FROM t
WHERE NOT EXISTS (SELECT 1 FROM t AS d JOIN messages AS m ON m.sid = d.sid AND m.id = d.id)
ON CONFLICT (sid, id) DO NOTHING
RETURNING mid, child_count
"""


_ADD_CHILDREN = (
    "UPDATE messages AS m SET child_count = m.child_count + t.added "
    "FROM unnest(%s::bigint[], %s::bigint[]) AS t (mid, added) WHERE m.mid = t.mid"
)
_ADD_MESSAGES = (
    "UPDATE session_keys AS k SET messages = k.messages + t.added "
    "FROM unnest(%s::bigint[], %s::bigint[]) AS t (sid, added) WHERE k.sid = t.sid"
)
# Each session's last sequence and version (its decision state's position).
_UPSERT_POSITIONS = """
INSERT INTO session_state (namespace, session_id, last_seq, version, sid)
SELECT t.ns, t.id, t.seq, t.version, k.sid
FROM unnest(%(ns)s::text[], %(ids)s::text[], %(seqs)s::bigint[], %(versions)s::bigint[])
    AS t (ns, id, seq, version)
LEFT JOIN session_keys AS k ON k.namespace = t.ns AND k.session_id = t.id
ON CONFLICT (namespace, session_id) DO UPDATE SET
    last_seq = excluded.last_seq, version = excluded.version, sid = excluded.sid
"""

# One held insert (an agent loop's usual flush) with its parent's children count and its
# session's message count (counted only if the row was inserted), and the positions owed, in
# one statement.
_INSERT_ONE = f"""
WITH ins AS (
    INSERT INTO messages (mid, sid, id, parent_id, parent_mid, role, content, bytes, position,
        created_at, child_count, depth, path_bytes, search)
    VALUES (%(mid)s, %(sid)s, %(id)s, %(parent_id)s, %(parent_mid)s, %(role)s, %(content)s,
        %(bytes)s, %(position)s, %(created_at)s,
        (SELECT count(*) FROM messages WHERE sid = %(sid)s AND parent_id = %(id)s),
        %(depth)s, %(path_bytes)s, to_tsvector('{TEXT_SEARCH}', %(text)s))
    ON CONFLICT (sid, id) DO NOTHING
    RETURNING mid, child_count
), parent AS (
    UPDATE messages SET child_count = child_count + 1
    WHERE mid = %(parent_mid)s AND EXISTS (SELECT 1 FROM ins)
), counted AS (
    UPDATE session_keys SET messages = messages + 1
    WHERE sid = %(sid)s AND EXISTS (SELECT 1 FROM ins)
), positions AS ({_UPSERT_POSITIONS})
SELECT mid, child_count FROM ins
"""


class PgSessionRows(SessionKeys):
    """What the writes learnt of the read model (session keys, each session's last inserted
    row), valid inside one transaction and across the transactions of one connection while no
    other connection writes the sessions projection (it has one projector); and the writes
    still owed at :meth:`flush`: message inserts (held and written together, their row ids
    reserved from the identity sequence), children counts, message counts, positions. Whoever
    applies writes calls :meth:`forget` after a rollback."""

    dialect = POSTGRES

    # Reserved row ids are forgotten too: a sequence may hand out again what a transaction
    # that never committed took, when the server crashed before it logged them.
    __slots__ = ("children", "held", "held_ids", "mids")

    def __init__(self) -> None:
        super().__init__()
        self.held: list[_Held] = []
        self.held_ids: dict[tuple[int, str], _Held] = {}
        self.mids: list[int] = []  # reserved row ids (a sequence never gives one twice)
        self.children: dict[int, int] = {}  # parent mid → children gained

    def flush(self, connection: Connection) -> None:
        """Write what the writes so far still owe the read model."""
        positions = self._positions()
        if len(self.held) == 1:
            # The usual flush of an agent loop's step: one statement with the positions.
            self._write_one(connection, positions)
            positions = None
        elif self.held:
            self._write_held(connection)
        statements: list[tuple[str, Any]] = []
        if self.children:
            mids, added = zip(*sorted(self.children.items()), strict=True)
            statements.append((_ADD_CHILDREN, (list(mids), list(added))))
            self.children.clear()
        counts = [(sid, added) for sid, added in sorted(self.counts.items()) if added]
        self.counts.clear()
        if counts:
            sids, added = zip(*counts, strict=True)
            statements.append((_ADD_MESSAGES, (list(sids), list(added))))
        if positions is not None:
            statements.append((_UPSERT_POSITIONS, positions))
        if len(statements) == 1:
            connection.execute(*statements[0], prepare=False)
        elif statements:
            with connection.pipeline():  # one round trip: none needs the answer of another
                for statement in statements:
                    connection.execute(*statement, prepare=False)

    def _positions(self) -> dict[str, list[Any]] | None:
        """The positions owed, as the parameters of :data:`_UPSERT_POSITIONS` (then none
        owed)."""
        if not self.positions:
            return None
        keys = sorted(self.positions.items())
        self.positions.clear()
        return {
            "ns": [key[0] for key, _ in keys],
            "ids": [key[1] for key, _ in keys],
            "seqs": [seq for _, (seq, _) in keys],
            "versions": [version for _, (_, version) in keys],
        }

    def hold(self, connection: Connection, sid: int, write: InsertMessage) -> bool:
        """Hold an insert whose parent is known (held, a session's last row, or stored) or
        that is a root; ``False`` if it must be written at once (its parent is not stored:
        it is an orphan that a later insert of its parent adopts)."""
        key = (sid, write.message_id)
        if key in self.held_ids:
            return False  # the same id twice: the first is kept, as the row-by-row path does
        parent: _Held | None = None
        parent_mid: int | None = None
        depth, path_bytes = -1, 0
        if write.parent_id is not None:
            parent = self.held_ids.get((sid, write.parent_id))
            if parent is not None:
                parent_mid = parent.row.mid
                depth, path_bytes = parent.row.depth, parent.row.path_bytes
            else:
                found = PgSessionTree.parent_of(
                    connection, sid, write.parent_id, self.tips.get(sid)
                )
                if found[0] is None:
                    return False
                parent_mid, depth, path_bytes = found
        if not self.mids:
            self.mids = _reserve_mids(connection, MIDS_RESERVED)
        size = size_of(write.content)
        row = Stored(sid, write.message_id, self.mids.pop(), depth + 1, path_bytes + size)
        held = _Held(write, row, parent_mid, parent is not None, size)
        if parent is not None:
            parent.children += 1
        self.held.append(held)
        self.held_ids[key] = held
        self.stored(row)
        if len(self.held) >= HELD_ROWS:
            self._write_held(connection)
        return True

    def _write_held(self, connection: Connection) -> None:
        """Insert the held rows with one statement; where one was stored already (an id
        inserted twice), none, and then row by row."""
        held, self.held = self.held, []
        self.held_ids.clear()
        rows = [h.row for h in held]
        writes = [h.write for h in held]
        inserted = connection.execute(  # a join of the rows with the table: unprepared
            _INSERT_HELD,
            (
                [r.mid for r in rows],
                [r.sid for r in rows],
                [r.id for r in rows],
                [w.parent_id for w in writes],
                [h.parent_mid for h in held],
                [w.role for w in writes],
                [w.content for w in writes],
                [h.size for h in held],
                [w.position for w in writes],
                [w.created_at for w in writes],
                [h.children for h in held],
                [r.depth for r in rows],
                [r.path_bytes for r in rows],
                [searchable(w.text) for w in writes],
            ),
            prepare=False,
        ).fetchall()
        if not inserted:  # one was stored already: row by row, each as its write says
            self.tips.clear()
            for h in held:
                stored = _insert(connection, h.row.sid, h.write, self)
                if stored is not None:
                    self.stored(stored)
                    self.counts[h.row.sid] = self.counts.get(h.row.sid, 0) + 1
            return
        if len(inserted) != len(held):  # only with a second writer, which the lock excludes
            raise RuntimeError(f"{len(inserted)} of {len(held)} message rows inserted")
        adopted = {int(mid): int(children) for mid, children in inserted}
        for h in held:
            sid = h.row.sid
            self.counts[sid] = self.counts.get(sid, 0) + 1
            if h.parent_mid is not None and not h.parent_held:
                self.children[h.parent_mid] = self.children.get(h.parent_mid, 0) + 1
            if adopted[h.row.mid] > h.children:  # stored rows named it their parent
                PgSessionTree.adopt_orphans(connection, h.row)
                self.tips.pop(sid, None)  # its subtree moved: the session's last row may have

    def _write_one(self, connection: Connection, positions: dict[str, list[Any]] | None) -> None:
        """Insert the one held row (not if its id is stored already, as row by row) and record
        ``positions``."""
        (held,) = self.held
        self.held = []
        self.held_ids.clear()
        write, row = held.write, held.row
        inserted = connection.execute(
            _INSERT_ONE,
            {
                "mid": row.mid,
                "sid": row.sid,
                "id": row.id,
                "parent_id": write.parent_id,
                "parent_mid": held.parent_mid,
                "role": write.role,
                "content": write.content,
                "bytes": held.size,
                "position": write.position,
                "created_at": write.created_at,
                "depth": row.depth,
                "path_bytes": row.path_bytes,
                "text": searchable(write.text),
                **(positions or {"ns": [], "ids": [], "seqs": [], "versions": []}),
            },
        ).fetchone()
        if inserted is None:
            self.tips.pop(row.sid, None)  # the stored row is the session's, not this one
            return
        if int(inserted[1]):  # stored rows named it their parent
            PgSessionTree.adopt_orphans(connection, row)
            self.tips.pop(row.sid, None)


def _reserve_mids(connection: Connection, count: int) -> list[int]:
    """``count`` message row ids from the table's identity sequence, the lowest last."""
    rows = connection.execute(
        "SELECT nextval(pg_get_serial_sequence('messages', 'mid')) FROM generate_series(1, %s)",
        (count,),
    ).fetchall()
    return sorted((int(row[0]) for row in rows), reverse=True)


def apply_session_writes(
    connection: Connection, writes: Iterable[SessionWrite], rows: PgSessionRows | None = None
) -> None:
    """Apply ``writes`` inside the caller's transaction. With ``rows`` (see
    :class:`PgSessionRows`) the caller flushes what they owe before it commits; without, all is
    written before this returns."""
    owned = rows is None
    rows = PgSessionRows() if rows is None else rows
    for write in writes:
        _apply(connection, write, rows)
    if owned:
        rows.flush(connection)


def _apply(connection: Connection, write: SessionWrite, rows: PgSessionRows) -> None:
    if isinstance(write, Recorded):
        PgSessionTree.record(connection, write, rows)
        return
    sid = rows.sid(connection, write.namespace, write.session_id)
    if isinstance(write, InsertMessage):
        if rows.hold(connection, sid, write):
            return
        rows.flush(connection)
        stored = _insert(connection, sid, write, rows)
        if stored is not None:
            rows.stored(stored)
            rows.counts[sid] = rows.counts.get(sid, 0) + 1
        return
    # Any other write may change the aggregates or children counts of the rows it touches:
    # what is owed is written first.
    rows.tips.pop(sid, None)
    rows.flush(connection)
    PgSessionTree.change(connection, sid, write, rows.counts)


def _insert(
    connection: Connection, sid: int, write: InsertMessage, rows: PgSessionRows
) -> Stored | None:
    """Insert a message; the inserted row, or ``None`` if its id was already stored (the domain
    never appends an existing id: keep the first content if it did). Its parent's children
    count is owed."""
    parent_mid, depth, path_bytes = PgSessionTree.parent_of(
        connection, sid, write.parent_id, rows.tips.get(sid)
    )
    depth += 1
    size = size_of(write.content)
    path_bytes += size
    row = connection.execute(
        "INSERT INTO messages (sid, id, parent_id, parent_mid, role, content, bytes, position, "
        "created_at, child_count, depth, path_bytes, search) VALUES (%(sid)s, %(id)s, "
        "%(parent_id)s, %(parent_mid)s, %(role)s, %(content)s, %(bytes)s, %(position)s, "
        "%(created_at)s, (SELECT count(*) FROM messages WHERE sid = %(sid)s "
        "AND parent_id = %(id)s), %(depth)s, %(path_bytes)s, "
        f"to_tsvector('{TEXT_SEARCH}', %(text)s)) "
        "ON CONFLICT (sid, id) DO NOTHING RETURNING mid, child_count",
        {
            "sid": sid,
            "id": write.message_id,
            "parent_id": write.parent_id,
            "parent_mid": parent_mid,
            "role": write.role,
            "content": write.content,
            "bytes": size,
            "position": write.position,
            "created_at": write.created_at,
            "depth": depth,
            "path_bytes": path_bytes,
            "text": searchable(write.text),
        },
    ).fetchone()
    if row is None:
        return None
    mid, children = int(row[0]), int(row[1])
    if parent_mid is not None:
        rows.children[parent_mid] = rows.children.get(parent_mid, 0) + 1
    stored = Stored(sid, write.message_id, mid, depth, path_bytes)
    if children:
        PgSessionTree.adopt_orphans(connection, stored)
    return stored


def _forget_purged(connection: Connection, write: ForgetPurged) -> None:
    """Remove every row of the sessions whose last event is at one of the purged sequences."""
    found = connection.execute(
        "DELETE FROM session_state WHERE namespace = %s AND last_seq = ANY(%s) RETURNING sid",
        (write.namespace, list(write.sequences)),
    ).fetchall()
    sids = [sid for (sid,) in found if sid is not None]
    if sids:
        connection.execute("DELETE FROM messages WHERE sid = ANY(%s)", (sids,))
        connection.execute("DELETE FROM compactions WHERE sid = ANY(%s)", (sids,))
        connection.execute("DELETE FROM session_keys WHERE sid = ANY(%s)", (sids,))


class PgSessionTree(SqlSessionTree):
    """The session writes written once, on PostgreSQL: a message's search vector is in its
    row."""

    dialect = POSTGRES

    @classmethod
    def shift_subtree(
        cls, connection: Connection, sid: int, root: int, depth: int, size: int
    ) -> None:
        if depth or size:
            connection.execute(
                POSTGRES.sql(SHIFT_SUBTREE),
                (root, sid, depth, size),
                prepare=False,  # a walk
            )

    @classmethod
    def _forget_purged(cls, connection: Connection, write: ForgetPurged) -> None:
        _forget_purged(connection, write)

    @classmethod
    def _clear(cls, connection: Connection, sid: int) -> None:
        connection.execute("DELETE FROM messages WHERE sid = %s", (sid,))
        connection.execute("DELETE FROM compactions WHERE sid = %s", (sid,))

    @classmethod
    def _update(cls, connection: Connection, sid: int, write: UpdateMessage) -> None:
        row = connection.execute(
            "SELECT mid, bytes FROM messages WHERE sid = %s AND id = %s", (sid, write.message_id)
        ).fetchone()
        if row is None:
            return
        mid, old_size = int(row[0]), int(row[1])
        size = size_of(write.content)
        connection.execute(
            "UPDATE messages SET content = %s, bytes = %s, "
            f"search = to_tsvector('{TEXT_SEARCH}', %s) WHERE mid = %s",
            (write.content, size, searchable(write.text), mid),
        )
        # Every path through this row changes by the difference in size.
        cls.shift_subtree(connection, sid, mid, 0, size - old_size)
