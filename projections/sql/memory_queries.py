"""Agent Memory's reads on either engine: profiles, memories, raw messages, history, extraction
progress, and the lookups of recall's channels; full-text search is ranked by each engine its
own way (FTS5's BM25, PostgreSQL's ``ts_rank_cd``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from memstream.projections.memory_rows import (
    FULL,
    LISTED,
    memory_from_row,
    topic_chain,
    with_events,
)
from memstream.projections.sql.dialect import Dialect, Executes


class SqlMemoryQueries:
    """Agent Memory reads, each scoped by (namespace, profile): an id of another profile is
    not found. An engine adds its full-text search (``_full_text``) and ``vector_search``."""

    def __init__(self, connection: Executes, dialect: Dialect) -> None:
        self.connection = connection
        self.dialect = dialect

    def _execute(self, statement: str, params: Sequence[Any] = ()) -> Any:
        return self.connection.execute(self.dialect.sql(statement), params)

    def _pid(self, namespace: str, profile: str) -> int | None:
        row = self._execute(
            "SELECT pid FROM memory_profiles WHERE namespace = ? AND profile = ?",
            (namespace, profile),
        ).fetchone()
        return None if row is None else int(row[0])

    # -- recall's full-text channels ----------------------------------------------------------

    def search_memories(
        self, namespace: str, profile: str, terms: Sequence[str], limit: int
    ) -> list[str]:
        """Memory ids matching any of ``terms`` (summary weighted), best first."""
        pid = self._pid(namespace, profile)
        return [] if pid is None else self._full_text("memories", pid, terms, limit)

    def search_messages(
        self, namespace: str, profile: str, terms: Sequence[str], limit: int
    ) -> list[str]:
        """Raw message ids matching any of ``terms``, best first."""
        pid = self._pid(namespace, profile)
        return [] if pid is None else self._full_text("messages", pid, terms, limit)

    def _full_text(
        self, table: Literal["memories", "messages"], pid: int, terms: Sequence[str], limit: int
    ) -> list[str]:
        """The ids of the profile's memories or raw messages matching any of ``terms``, best
        first (the engine's ranking)."""
        raise NotImplementedError

    def profiles(self, namespace: str) -> list[dict[str, Any]]:
        rows = self._execute(
            "SELECT p.profile, p.created_at, p.updated_at, "
            "(SELECT count(*) FROM memories AS m WHERE m.pid = p.pid), "
            "(SELECT count(*) FROM memory_messages AS r WHERE r.pid = p.pid) "
            "FROM memory_profiles AS p WHERE p.namespace = ? "
            f"ORDER BY p.profile{self.dialect.byte_order}",
            (namespace,),
        ).fetchall()
        return [
            {
                "name": r[0],
                "created_at": r[1],
                "updated_at": r[2],
                "memories": r[3],
                "messages": r[4],
            }
            for r in rows
        ]

    def exists(self, namespace: str, profile: str) -> bool:
        return self._pid(namespace, profile) is not None

    def memory(self, namespace: str, profile: str, memory_id: str) -> dict[str, Any] | None:
        pid = self._pid(namespace, profile)
        if pid is None:
            return None
        row = self._execute(
            f"SELECT {FULL} FROM memories AS m WHERE m.pid = ? AND m.id = ?", (pid, memory_id)
        ).fetchone()
        if row is None:
            return None
        sources = [
            r[0]
            for r in self._execute(
                "SELECT message_id FROM memory_sources WHERE memory_rid = ? "
                f"ORDER BY message_id{self.dialect.byte_order}",
                (row[0],),
            )
        ]
        # In the order the memory names them (its content order), not the index's.
        order = self._source_order(pid, sources)
        return memory_from_row(row, order)

    def _source_order(self, pid: int, sources: list[str]) -> list[str]:
        if len(sources) < 2:
            return sources
        among, values = self.dialect.any_of("id", sources)
        stamps = {
            str(row[0]): int(row[1])
            for row in self._execute(
                f"SELECT id, rid FROM memory_messages WHERE pid = ? AND {among}", (pid, *values)
            ).fetchall()
        }
        return sorted(sources, key=lambda m: (stamps.get(m, 2**62), m))

    def memories(
        self, namespace: str, profile: str, ids: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """Listed fields of the memories ``ids`` (those that exist), by id."""
        pid = self._pid(namespace, profile)
        if pid is None or not ids:
            return {}
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), 500):
            chunk = list(ids[start : start + 500])
            among, values = self.dialect.any_of("m.id", chunk)
            for row in self._execute(
                f"SELECT {LISTED} FROM memories AS m WHERE m.pid = ? AND {among}", (pid, *values)
            ):
                found[row[1]] = memory_from_row(row)
        return found

    def page(
        self,
        namespace: str,
        profile: str,
        limit: int,
        after: int | None = None,
        *,
        session_id: str | None = None,
        type: str | None = None,
    ) -> tuple[list[dict[str, Any]], int | None]:
        """Up to ``limit`` memories, newest first, before row ``after``; and the row to go on
        from (``None``: no more). Without ``content``."""
        pid = self._pid(namespace, profile)
        if pid is None:
            return [], None
        where = ["m.pid = ?", "m.rid < ?"]
        params: list[Any] = [pid, 2**62 if after is None else after]
        if session_id is not None:
            where.append("m.session_id = ?")
            params.append(session_id)
        if type is not None:
            where.append("m.type = ?")
            params.append(type)
        rows = self._execute(
            f"SELECT {LISTED} FROM memories AS m WHERE {' AND '.join(where)} "
            "ORDER BY m.rid DESC LIMIT ?",
            (*params, limit + 1),
        ).fetchall()
        more = len(rows) > limit
        rows = rows[:limit]
        return [memory_from_row(r) for r in rows], (int(rows[-1][0]) if more and rows else None)

    def all_memories(self, namespace: str, profile: str) -> list[dict[str, Any]]:
        """Every memory of the profile without ``content``, oldest first."""
        pid = self._pid(namespace, profile)
        if pid is None:
            return []
        rows = self._execute(
            f"SELECT {LISTED} FROM memories AS m WHERE m.pid = ? ORDER BY m.rid", (pid,)
        ).fetchall()
        return [memory_from_row(r) for r in rows]

    def message(self, namespace: str, profile: str, message_id: str) -> dict[str, Any] | None:
        pid = self._pid(namespace, profile)
        if pid is None:
            return None
        row = self._execute(
            "SELECT id, session_id, role, content, timestamp FROM memory_messages "
            "WHERE pid = ? AND id = ?",
            (pid, message_id),
        ).fetchone()
        if row is None:
            return None
        return dict(zip(("id", "session_id", "role", "content", "timestamp"), row, strict=True))

    def history(self, namespace: str, profile: str, memory_id: str) -> list[dict[str, Any]] | None:
        """The memory's topic chain, oldest first: each memory it superseded or that
        superseded it, with when and by what (``None``: no such memory)."""
        pid = self._pid(namespace, profile)
        if pid is None or self.memory(namespace, profile, memory_id) is None:
            return None

        def link(current: str, column: str) -> str | None:
            row = self._execute(
                f"SELECT {column} FROM memories WHERE pid = ? AND id = ?", (pid, current)
            ).fetchone()
            return None if row is None or row[0] is None else str(row[0])

        def events(memory_id: str) -> list[tuple[Any, ...]]:
            return list(
                self._execute(
                    "SELECT seq, at, action, other_id FROM memory_history "
                    "WHERE pid = ? AND memory_id = ? "
                    f"ORDER BY seq, action{self.dialect.byte_order}",
                    (pid, memory_id),
                ).fetchall()
            )

        chain = topic_chain(memory_id, link)
        return with_events(chain, self.memories(namespace, profile, chain), events)

    def extraction(
        self, namespace: str, profile: str, source: str
    ) -> tuple[int, int | None] | None:
        """Where an extraction source is: its sequence and the extraction's (``None`` while it
        waits); ``None`` when the read model does not know it (yet, or any more)."""
        pid = self._pid(namespace, profile)
        if pid is None:
            return None
        row = self._execute(
            "SELECT seq, extracted_seq FROM memory_extractions WHERE pid = ? AND source = ?",
            (pid, source),
        ).fetchone()
        return None if row is None else (int(row[0]), None if row[1] is None else int(row[1]))

    def pending_extractions(self, namespace: str, profile: str) -> int:
        pid = self._pid(namespace, profile)
        if pid is None:
            return 0
        row = self._execute(
            "SELECT count(*) FROM memory_extractions WHERE pid = ? AND extracted_seq IS NULL",
            (pid,),
        ).fetchone()
        return 0 if row is None else int(row[0])

    def memories_of_messages(
        self, namespace: str, profile: str, message_ids: Sequence[str]
    ) -> dict[str, list[str]]:
        """The memories made from each of ``message_ids`` (newest first)."""
        pid = self._pid(namespace, profile)
        if pid is None or not message_ids:
            return {}
        result: dict[str, list[str]] = {}
        for start in range(0, len(message_ids), 500):
            chunk = list(message_ids[start : start + 500])
            among, values = self.dialect.any_of("s.message_id", chunk)
            for message_id, memory_id in self._execute(
                "SELECT s.message_id, m.id FROM memory_sources AS s JOIN memories AS m "
                f"ON m.rid = s.memory_rid WHERE s.pid = ? AND {among} ORDER BY m.rid DESC",
                (pid, *values),
            ):
                result.setdefault(message_id, []).append(memory_id)
        return result

    def memories_by_topic(
        self, namespace: str, profile: str, keys: Sequence[str], limit: int
    ) -> list[str]:
        """Memories on the topic ``keys``: current ones first, then newest first."""
        pid = self._pid(namespace, profile)
        if pid is None or not keys:
            return []
        among, values = self.dialect.any_of("topic_key", keys)
        rows = self._execute(
            f"SELECT id FROM memories WHERE pid = ? AND {among} "
            "ORDER BY superseded_by IS NOT NULL, rid DESC LIMIT ?",
            (pid, *values, limit),
        ).fetchall()
        return [r[0] for r in rows]

    def memories_between(
        self, namespace: str, profile: str, start: str, end: str, limit: int
    ) -> list[str]:
        """Memories whose event time is in ``[start, end)`` (ISO 8601 UTC), latest first."""
        pid = self._pid(namespace, profile)
        if pid is None:
            return []
        rows = self._execute(
            "SELECT id FROM memories WHERE pid = ? AND event_time >= ? AND event_time < ? "
            "ORDER BY event_time DESC, rid DESC LIMIT ?",
            (pid, start, end, limit),
        ).fetchall()
        return [r[0] for r in rows]

    def vectors(
        self, namespace: str, profile: str, kind: str, model: str
    ) -> tuple[list[str], list[bytes]]:
        """The profile's vectors of ``kind`` made by ``model``: ids and float32 blobs."""
        rows = self._execute(
            "SELECT item_id, vector FROM memory_vectors WHERE namespace = ? AND profile = ? "
            f"AND kind = ? AND model = ? ORDER BY item_id{self.dialect.byte_order}",
            (namespace, profile, kind, model),
        ).fetchall()
        return [r[0] for r in rows], [r[1] for r in rows]

    def vector_state(self, namespace: str, profile: str, kind: str) -> tuple[int, int]:
        """How many vectors of ``kind`` the profile has and their highest sequence: what a
        cached matrix of them is checked against."""
        row = self._execute(
            "SELECT count(*), coalesce(max(seq), 0) FROM memory_vectors WHERE namespace = ? "
            "AND profile = ? AND kind = ?",
            (namespace, profile, kind),
        ).fetchone()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    def vectors_position(self) -> int:
        """The last stream sequence the ``vectors`` projection committed: every change of a
        vector commits a new one, so vectors read at this position are still current."""
        row = self._execute("SELECT seq FROM tracking WHERE projection = 'vectors'").fetchone()
        return int(row[0]) if row else 0
