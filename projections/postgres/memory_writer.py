"""Applies memory writes to PostgreSQL: profiles, raw messages and memories (each with a
``tsvector``: the text is kept once), sources, history and extraction sources; and the vectors
projection's embeddings.

The same rows as SQLite's writer (:mod:`memstream.projections.sqlite.memory_writer`). A
memory's search vector weighs its parts as SQLite's ranking does: summary (A) over keywords
(B) over content and search queries (C).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from memstream.projections.memory_projector import (
    AddMemories,
    AddMessages,
    AddSource,
    CreateProfile,
    DeleteMemory,
    DeleteProfile,
    ForgetSession,
    MemoryWrite,
    Supersede,
)
from memstream.projections.postgres.schema import TEXT_SEARCH
from memstream.projections.postgres.text import searchable
from memstream.projections.postgres.vectors import literal
from memstream.projections.vector_projector import DropVectors, EmbedTexts

Connection = psycopg.Connection[tuple[Any, ...]]

_MEMORY_SEARCH = (
    f"setweight(to_tsvector('{TEXT_SEARCH}', %(search_summary)s), 'A') || "
    f"setweight(to_tsvector('{TEXT_SEARCH}', %(search_keywords)s), 'B') || "
    f"setweight(to_tsvector('{TEXT_SEARCH}', %(search_content)s), 'C') || "
    f"setweight(to_tsvector('{TEXT_SEARCH}', %(search_queries)s), 'C')"
)


def apply_memory_writes(connection: Connection, writes: Iterable[MemoryWrite]) -> None:
    """Apply writes inside the caller's transaction (each is idempotent: a redelivered event
    changes nothing)."""
    for write in writes:
        if isinstance(write, AddMessages):
            _add_messages(connection, write)
        elif isinstance(write, AddMemories):
            _add_memories(connection, write)
        elif isinstance(write, AddSource):
            pid = _pid(connection, write.namespace, write.profile)
            if pid is not None:
                connection.execute(
                    "INSERT INTO memory_extractions (pid, source, session_id, seq) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    (pid, write.source, write.session_id, write.seq),
                )
        elif isinstance(write, Supersede):
            _supersede(connection, write)
        elif isinstance(write, DeleteMemory):
            pid = _pid(connection, write.namespace, write.profile)
            if pid is not None:
                _delete_memories(connection, pid, "id = %s", (write.memory_id,))
                if write.message_ids:
                    _delete_messages(connection, pid, "id = ANY(%s)", (list(write.message_ids),))
        elif isinstance(write, ForgetSession):
            pid = _pid(connection, write.namespace, write.profile)
            if pid is not None:
                _delete_memories(connection, pid, "session_id = %s", (write.session_id,))
                _delete_messages(connection, pid, "session_id = %s", (write.session_id,))
                connection.execute(
                    "DELETE FROM memory_extractions WHERE pid = %s AND session_id = %s",
                    (pid, write.session_id),
                )
        elif isinstance(write, DeleteProfile):
            _delete_profile(connection, write.namespace, write.profile)
        elif isinstance(write, CreateProfile):
            connection.execute(
                "INSERT INTO memory_profiles (namespace, profile, created_at, updated_at, seq) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (write.namespace, write.profile, write.at, write.at, write.seq),
            )


def _pid(connection: Connection, namespace: str, profile: str) -> int | None:
    row = connection.execute(
        "SELECT pid FROM memory_profiles WHERE namespace = %s AND profile = %s",
        (namespace, profile),
    ).fetchone()
    return None if row is None else int(row[0])


def _touch(connection: Connection, pid: int, at: str, seq: int) -> None:
    connection.execute(
        "UPDATE memory_profiles SET updated_at = %s, seq = %s WHERE pid = %s", (at, seq, pid)
    )


def _add_messages(connection: Connection, write: AddMessages) -> None:
    pid = _pid(connection, write.namespace, write.profile)
    if pid is None:
        return
    with connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO memory_messages (pid, id, session_id, role, content, timestamp, seq, "
            "search) VALUES (%(pid)s, %(id)s, %(session_id)s, %(role)s, %(content)s, "
            f"%(timestamp)s, %(seq)s, to_tsvector('{TEXT_SEARCH}', %(text)s)) "
            "ON CONFLICT DO NOTHING",
            [
                {
                    "pid": pid,
                    "id": message["id"],
                    "session_id": write.session_id,
                    "role": message["role"],
                    "content": message["content"],
                    "text": searchable(message["content"]),
                    "timestamp": message["timestamp"],
                    "seq": write.seq,
                }
                for message in write.messages
            ],
        )
    if write.messages:
        _touch(connection, pid, write.messages[-1]["timestamp"], write.seq)


def _add_memories(connection: Connection, write: AddMemories) -> None:
    pid = _pid(connection, write.namespace, write.profile)
    if pid is None:
        return
    added = 0
    for memory in write.memories:
        keywords = " ".join(memory.get("keywords") or ())
        queries = "\n".join(memory.get("queries") or ())
        row = connection.execute(
            "INSERT INTO memories (pid, id, type, topic_key, summary, content, keywords, "
            "queries, session_id, event_time, source, extractor, created_at, updated_at, seq, "
            "search) VALUES (%(pid)s, %(id)s, %(type)s, %(topic_key)s, %(summary)s, "
            "%(content)s, %(keywords)s, %(queries)s, %(session_id)s, %(event_time)s, "
            "%(source)s, %(extractor)s, %(at)s, %(at)s, %(seq)s, "
            f"{_MEMORY_SEARCH}) ON CONFLICT DO NOTHING RETURNING rid",
            {
                "pid": pid,
                "id": memory["id"],
                "type": memory["type"],
                "topic_key": memory["topic_key"],
                "summary": memory["summary"],
                "content": memory["content"],
                "keywords": keywords,
                "queries": queries,
                "search_summary": searchable(memory["summary"]),
                "search_content": searchable(memory["content"]),
                "search_keywords": searchable(keywords),
                "search_queries": searchable(queries),
                "session_id": memory.get("session_id"),
                "event_time": memory.get("event_time"),
                "source": write.source,
                "extractor": write.extractor,
                "at": write.at,
                "seq": write.seq,
            },
        ).fetchone()
        if row is None:
            continue
        added += 1
        rid = int(row[0])
        sources = list(memory.get("source_message_ids") or ())
        if sources:
            connection.execute(
                "INSERT INTO memory_sources (pid, message_id, memory_rid) "
                "SELECT %s, unnest(%s::text[]), %s ON CONFLICT DO NOTHING",
                (pid, sources, rid),
            )
        connection.execute(
            "INSERT INTO memory_history (pid, memory_id, seq, at, action, other_id) "
            "VALUES (%s, %s, %s, %s, 'created', %s) ON CONFLICT DO NOTHING",
            (pid, memory["id"], write.seq, write.at, write.source),
        )
    connection.execute(
        "UPDATE memory_extractions SET extracted_seq = %s, memories = memories + %s "
        "WHERE pid = %s AND source = %s",
        (write.seq, added, pid, write.source),
    )
    _touch(connection, pid, write.at, write.seq)


def _supersede(connection: Connection, write: Supersede) -> None:
    pid = _pid(connection, write.namespace, write.profile)
    if pid is None:
        return
    connection.execute(
        "UPDATE memories SET superseded_by = %s, updated_at = %s WHERE pid = %s AND id = %s",
        (write.superseded_by, write.at, pid, write.memory_id),
    )
    connection.execute(
        "UPDATE memories SET supersedes = %s WHERE pid = %s AND id = %s",
        (write.memory_id, pid, write.superseded_by),
    )
    with connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO memory_history (pid, memory_id, seq, at, action, other_id) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            [
                (pid, write.memory_id, write.seq, write.at, "superseded", write.superseded_by),
                (pid, write.superseded_by, write.seq, write.at, "supersedes", write.memory_id),
            ],
        )


def _delete_memories(connection: Connection, pid: int, where: str, params: tuple[Any, ...]) -> None:
    """Delete memories (with their sources and history); what a deleted memory superseded
    becomes current again, linked to what superseded the deleted one, if any. ``where`` is
    one of this module's fixed conditions (never user text)."""
    rows = connection.execute(
        f"SELECT rid, id, supersedes, superseded_by FROM memories WHERE pid = %s AND {where} "
        "ORDER BY rid",
        (pid, *params),
    ).fetchall()
    for rid, memory_id, older, newer in rows:
        connection.execute("DELETE FROM memories WHERE rid = %s", (rid,))
        connection.execute("DELETE FROM memory_sources WHERE memory_rid = %s", (rid,))
        connection.execute(
            "DELETE FROM memory_history WHERE pid = %s AND memory_id = %s", (pid, memory_id)
        )
        if older is not None:
            connection.execute(
                "UPDATE memories SET superseded_by = %s WHERE pid = %s AND id = %s",
                (newer, pid, older),
            )
        if newer is not None:
            connection.execute(
                "UPDATE memories SET supersedes = %s WHERE pid = %s AND id = %s",
                (older, pid, newer),
            )
    # Dangling links (the other end deleted in the same statement) are cleared.
    if rows:
        connection.execute(
            "UPDATE memories AS m SET superseded_by = NULL WHERE m.pid = %(pid)s "
            "AND m.superseded_by IS NOT NULL AND NOT EXISTS (SELECT 1 FROM memories AS o "
            "WHERE o.pid = %(pid)s AND o.id = m.superseded_by)",
            {"pid": pid},
        )
        connection.execute(
            "UPDATE memories AS m SET supersedes = NULL WHERE m.pid = %(pid)s "
            "AND m.supersedes IS NOT NULL AND NOT EXISTS (SELECT 1 FROM memories AS o "
            "WHERE o.pid = %(pid)s AND o.id = m.supersedes)",
            {"pid": pid},
        )


def _delete_messages(connection: Connection, pid: int, where: str, params: tuple[Any, ...]) -> None:
    """Delete raw messages (``where``: one of this module's fixed conditions)."""
    connection.execute(f"DELETE FROM memory_messages WHERE pid = %s AND {where}", (pid, *params))


def _delete_profile(connection: Connection, namespace: str, profile: str) -> None:
    pid = _pid(connection, namespace, profile)
    if pid is None:
        return
    _delete_memories(connection, pid, "TRUE", ())
    _delete_messages(connection, pid, "TRUE", ())
    for table in ("memory_sources", "memory_history", "memory_extractions"):
        connection.execute(f"DELETE FROM {table} WHERE pid = %s", (pid,))
    connection.execute("DELETE FROM memory_profiles WHERE pid = %s", (pid,))


# -- the vectors projection ------------------------------------------------------------------


def store_vectors(
    connection: Connection,
    write: EmbedTexts,
    model: str,
    vectors: Sequence[Any],
    *,
    embeddings: bool = False,
) -> None:
    """Store the vectors of ``write``'s items (in their order), replacing older ones; with
    ``embeddings``, for pgvector too (see :mod:`memstream.projections.postgres.vectors`)."""
    from memstream.projections.vector_search import pack  # numpy: only where vectors are made

    rows = [
        (
            write.namespace,
            write.profile,
            write.kind,
            item_id,
            session_id,
            model,
            pack(v),
            write.seq,
            *((literal(v),) if embeddings else ()),
        )
        for (item_id, session_id, _), v in zip(write.items, vectors, strict=True)
    ]
    columns = "namespace, profile, kind, item_id, session_id, model, vector, seq"
    values = "%s, %s, %s, %s, %s, %s, %s, %s"
    updates = (
        "session_id = excluded.session_id, model = excluded.model, vector = excluded.vector, "
        "seq = excluded.seq"
    )
    if embeddings:
        columns += ", embedding"
        values += ", %s::public.vector"
        updates += ", embedding = excluded.embedding"
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO memory_vectors ({columns}) VALUES ({values}) "
            f"ON CONFLICT (namespace, profile, kind, item_id) DO UPDATE SET {updates}",
            rows,
        )


def drop_vectors(connection: Connection, write: DropVectors) -> None:
    """Remove the vectors ``write`` names."""
    key = (write.namespace, write.profile)
    if write.ids:
        connection.execute(
            "DELETE FROM memory_vectors WHERE namespace = %s AND profile = %s AND kind = %s "
            "AND item_id = ANY(%s)",
            (*key, write.kind, list(write.ids)),
        )
    elif write.session_id is not None:
        connection.execute(
            "DELETE FROM memory_vectors WHERE namespace = %s AND profile = %s AND session_id = %s",
            (*key, write.session_id),
        )
    elif write.kind is None:
        connection.execute("DELETE FROM memory_vectors WHERE namespace = %s AND profile = %s", key)
