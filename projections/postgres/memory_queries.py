"""Reads of the memory and vectors read models on PostgreSQL: profiles, memories, raw messages,
history, extraction progress, and the lookups of recall's channels.

The same answers as :class:`~memstream.projections.sqlite.memory_queries.SqliteMemoryQueries`;
the full-text channels match any of their terms (each a ``phraseto_tsquery`` parameter) and
rank by ``ts_rank_cd`` with the weights SQLite's BM25 gives the memory's parts."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from psycopg import sql

from memstream.projections.memory_rows import (
    FULL,
    LISTED,
    memory_from_row,
    topic_chain,
    with_events,
)
from memstream.projections.postgres.reads import Executes
from memstream.projections.postgres.schema import TEXT_SEARCH
from memstream.projections.postgres.text import indexable
from memstream.projections.postgres.vectors import PgVectorSearch, has_embeddings

Connection = Executes
# ts_rank_cd's weights of D, C, B, A (each at most 1): content and queries (C), keywords (B)
# and summary (A) as 1 : 1.5 : 2, as SQLite's bm25 weighs the columns.
_WEIGHTS = "{0.25, 0.5, 0.75, 1.0}"


def _any_term(terms: Sequence[str]) -> tuple[sql.Composable, list[str]] | None:
    """A ``tsquery`` matching any of ``terms`` (each a parameter), or ``None``: no terms."""
    kept = [term for term in terms if term and indexable(term)]
    if not kept:
        return None
    phrase = sql.SQL("phraseto_tsquery({}::regconfig, %s)").format(sql.Literal(TEXT_SEARCH))
    return sql.SQL(" || ").join([phrase] * len(kept)), kept


# A reader whose database stores no vectors for pgvector asks again after this long (the
# indexer creates the column when it starts).
EMBEDDINGS_CHECK_SECONDS = 10.0


class PgMemoryQueries:
    """Agent Memory reads, each scoped by (namespace, profile): an id of another profile is
    not found."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._embeddings = False  # whether vectors are stored for pgvector (see vectors.py)
        self._embeddings_checked = -math.inf

    def vector_search(
        self, namespace: str, profile: str, kind: str, model: str
    ) -> PgVectorSearch | None:
        """The database's own search of the profile's vectors where pgvector stores them
        (asked again every :data:`EMBEDDINGS_CHECK_SECONDS` while it does not), else ``None``."""
        now = time.monotonic()
        if not self._embeddings and now - self._embeddings_checked >= EMBEDDINGS_CHECK_SECONDS:
            self._embeddings_checked = now
            self._embeddings = has_embeddings(self.connection)
        if not self._embeddings:
            return None
        row = self.connection.execute(  # none of this model (yet): nothing to search
            "SELECT 1 FROM memory_vectors WHERE namespace = %s AND profile = %s AND kind = %s "
            "AND model = %s LIMIT 1",
            (namespace, profile, kind, model),
        ).fetchone()
        return (
            None
            if row is None
            else PgVectorSearch(self.connection, namespace, profile, kind, model)
        )

    def _pid(self, namespace: str, profile: str) -> int | None:
        row = self.connection.execute(
            "SELECT pid FROM memory_profiles WHERE namespace = %s AND profile = %s",
            (namespace, profile),
        ).fetchone()
        return None if row is None else int(row[0])

    def profiles(self, namespace: str) -> list[dict[str, Any]]:
        rows = self.connection.execute(
            "SELECT p.profile, p.created_at, p.updated_at, "
            "(SELECT count(*) FROM memories AS m WHERE m.pid = p.pid), "
            "(SELECT count(*) FROM memory_messages AS r WHERE r.pid = p.pid) "
            'FROM memory_profiles AS p WHERE p.namespace = %s ORDER BY p.profile COLLATE "C"',
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
        row = self.connection.execute(
            f"SELECT {FULL} FROM memories AS m WHERE m.pid = %s AND m.id = %s", (pid, memory_id)
        ).fetchone()
        if row is None:
            return None
        sources = [
            r[0]
            for r in self.connection.execute(
                "SELECT message_id FROM memory_sources WHERE memory_rid = %s "
                'ORDER BY message_id COLLATE "C"',
                (row[0],),
            )
        ]
        # In the order the memory names them (its content order), not the index's.
        order = self._source_order(pid, sources)
        return memory_from_row(row, order)

    def _source_order(self, pid: int, sources: list[str]) -> list[str]:
        if len(sources) < 2:
            return sources
        stamps: dict[str, int] = {
            str(row[0]): int(row[1])
            for row in self.connection.execute(
                "SELECT id, rid FROM memory_messages WHERE pid = %s AND id = ANY(%s)",
                (pid, sources),
            )
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
            for row in self.connection.execute(
                f"SELECT {LISTED} FROM memories AS m WHERE m.pid = %s AND m.id = ANY(%s)",
                (pid, chunk),
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
        where = ["m.pid = %s", "m.rid < %s"]
        params: list[Any] = [pid, 2**62 if after is None else after]
        if session_id is not None:
            where.append("m.session_id = %s")
            params.append(session_id)
        if type is not None:
            where.append("m.type = %s")
            params.append(type)
        rows = self.connection.execute(
            f"SELECT {LISTED} FROM memories AS m WHERE {' AND '.join(where)} "
            "ORDER BY m.rid DESC LIMIT %s",
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
        rows = self.connection.execute(
            f"SELECT {LISTED} FROM memories AS m WHERE m.pid = %s ORDER BY m.rid", (pid,)
        ).fetchall()
        return [memory_from_row(r) for r in rows]

    def message(self, namespace: str, profile: str, message_id: str) -> dict[str, Any] | None:
        pid = self._pid(namespace, profile)
        if pid is None:
            return None
        row = self.connection.execute(
            "SELECT id, session_id, role, content, timestamp FROM memory_messages "
            "WHERE pid = %s AND id = %s",
            (pid, message_id),
        ).fetchone()
        if row is None:
            return None
        found = dict(zip(("id", "session_id", "role", "content", "timestamp"), row, strict=True))
        found["content"] = found["content"]
        return found

    def history(self, namespace: str, profile: str, memory_id: str) -> list[dict[str, Any]] | None:
        """The memory's topic chain, oldest first: each memory it superseded or that
        superseded it, with when and by what (``None``: no such memory)."""
        pid = self._pid(namespace, profile)
        if pid is None or self.memory(namespace, profile, memory_id) is None:
            return None
        connection = self.connection

        def link(current: str, column: str) -> str | None:
            row = connection.execute(
                f"SELECT {column} FROM memories WHERE pid = %s AND id = %s", (pid, current)
            ).fetchone()
            return None if row is None or row[0] is None else str(row[0])

        def events(memory_id: str) -> list[tuple[Any, ...]]:
            return list(
                connection.execute(
                    "SELECT seq, at, action, other_id FROM memory_history "
                    "WHERE pid = %s AND memory_id = %s "
                    'ORDER BY seq, action COLLATE "C"',
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
        row = self.connection.execute(
            "SELECT seq, extracted_seq FROM memory_extractions WHERE pid = %s AND source = %s",
            (pid, source),
        ).fetchone()
        return None if row is None else (int(row[0]), None if row[1] is None else int(row[1]))

    def pending_extractions(self, namespace: str, profile: str) -> int:
        pid = self._pid(namespace, profile)
        if pid is None:
            return 0
        row = self.connection.execute(
            "SELECT count(*) FROM memory_extractions WHERE pid = %s AND extracted_seq IS NULL",
            (pid,),
        ).fetchone()
        return 0 if row is None else int(row[0])

    # -- recall's channels ------------------------------------------------------------------

    def search_memories(
        self, namespace: str, profile: str, terms: Sequence[str], limit: int
    ) -> list[str]:
        """Memory ids matching any of ``terms`` (summary weighted), best first."""
        pid = self._pid(namespace, profile)
        match = _any_term(terms) if pid is not None else None
        if match is None:
            return []
        expression, params = match
        rows = self.connection.execute(
            sql.SQL(
                "SELECT m.id FROM (SELECT {} AS q) AS query, memories AS m "
                "WHERE m.pid = %s AND m.search @@ query.q "
                "ORDER BY ts_rank_cd(%s::float4[], m.search, query.q) DESC, m.rid DESC LIMIT %s"
            ).format(expression),
            [*params, pid, _WEIGHTS, limit],
        ).fetchall()
        return [r[0] for r in rows]

    def search_messages(
        self, namespace: str, profile: str, terms: Sequence[str], limit: int
    ) -> list[str]:
        """Raw message ids matching any of ``terms``, best first."""
        pid = self._pid(namespace, profile)
        match = _any_term(terms) if pid is not None else None
        if match is None:
            return []
        expression, params = match
        rows = self.connection.execute(
            sql.SQL(
                "SELECT r.id FROM (SELECT {} AS q) AS query, memory_messages AS r "
                "WHERE r.pid = %s AND r.search @@ query.q "
                "ORDER BY ts_rank_cd(r.search, query.q) DESC, r.rid DESC LIMIT %s"
            ).format(expression),
            [*params, pid, limit],
        ).fetchall()
        return [r[0] for r in rows]

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
            for message_id, memory_id in self.connection.execute(
                "SELECT s.message_id, m.id FROM memory_sources AS s JOIN memories AS m "
                "ON m.rid = s.memory_rid WHERE s.pid = %s AND s.message_id = ANY(%s) "
                "ORDER BY m.rid DESC",
                (pid, chunk),
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
        rows = self.connection.execute(
            "SELECT id FROM memories WHERE pid = %s AND topic_key = ANY(%s) "
            "ORDER BY superseded_by IS NOT NULL, rid DESC LIMIT %s",
            (pid, list(keys), limit),
        ).fetchall()
        return [r[0] for r in rows]

    def memories_between(
        self, namespace: str, profile: str, start: str, end: str, limit: int
    ) -> list[str]:
        """Memories whose event time is in ``[start, end)`` (ISO 8601 UTC), latest first."""
        pid = self._pid(namespace, profile)
        if pid is None:
            return []
        rows = self.connection.execute(
            "SELECT id FROM memories WHERE pid = %s AND event_time >= %s AND event_time < %s "
            "ORDER BY event_time DESC, rid DESC LIMIT %s",
            (pid, start, end, limit),
        ).fetchall()
        return [r[0] for r in rows]

    def vectors(
        self, namespace: str, profile: str, kind: str, model: str
    ) -> tuple[list[str], list[bytes]]:
        """The profile's vectors of ``kind`` made by ``model``: ids and float32 blobs."""
        rows = self.connection.execute(
            "SELECT item_id, vector FROM memory_vectors WHERE namespace = %s AND profile = %s "
            "AND kind = %s AND model = %s "
            'ORDER BY item_id COLLATE "C"',
            (namespace, profile, kind, model),
        ).fetchall()
        return [r[0] for r in rows], [r[1] for r in rows]

    def vector_state(self, namespace: str, profile: str, kind: str) -> tuple[int, int]:
        """How many vectors of ``kind`` the profile has and their highest sequence: what a
        cached matrix of them is checked against."""
        row = self.connection.execute(
            "SELECT count(*), coalesce(max(seq), 0) FROM memory_vectors WHERE namespace = %s "
            "AND profile = %s AND kind = %s",
            (namespace, profile, kind),
        ).fetchone()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    def vectors_position(self) -> int:
        """The last stream sequence the ``vectors`` projection committed: every change of a
        vector commits a new one, so vectors read at this position are still current."""
        row = self.connection.execute(
            "SELECT seq FROM tracking WHERE projection = 'vectors'"
        ).fetchone()
        return int(row[0]) if row else 0
