"""Agent Memory's writes on either engine: profiles, raw messages, memories, sources, history
and extraction sources. Each engine keeps its full-text index its own way (FTS5 tables beside
the rows, a ``tsvector`` in them): :class:`SqlMemoryWriter`'s hooks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

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
from memstream.projections.sql.dialect import Dialect, Executes

Texts = tuple[str, str, str, str]  # a memory's summary, content, keywords and queries
MESSAGE_COLUMNS = "pid, id, session_id, role, content, timestamp, seq"
MEMORY_COLUMNS = (
    "pid, id, type, topic_key, summary, content, keywords, queries, session_id, event_time, "
    "source, extractor, created_at, updated_at, seq"
)


def message_row(pid: int, write: AddMessages, message: Mapping[str, Any]) -> tuple[Any, ...]:
    """The values of :data:`MESSAGE_COLUMNS` of a raw message."""
    return (
        pid,
        message["id"],
        write.session_id,
        message["role"],
        message["content"],
        message["timestamp"],
        write.seq,
    )


def memory_row(
    pid: int, write: AddMemories, memory: Mapping[str, Any], keywords: str, queries: str
) -> tuple[Any, ...]:
    """The values of :data:`MEMORY_COLUMNS` of a memory."""
    return (
        pid,
        memory["id"],
        memory["type"],
        memory["topic_key"],
        memory["summary"],
        memory["content"],
        keywords,
        queries,
        memory.get("session_id"),
        memory.get("event_time"),
        write.source,
        write.extractor,
        write.at,
        write.at,
        write.seq,
    )


class SqlMemoryWriter:
    """Applies memory writes inside the caller's transaction (each is idempotent: a redelivered
    event changes nothing). An engine subclasses it with its ``dialect`` and the writes of its
    index: inserting messages and memories, and deleting them."""

    dialect: ClassVar[Dialect]
    # Columns of a memory, after ``rid, id, supersedes, superseded_by``, that
    # :meth:`_unindex_memory` is given.
    indexed_columns: ClassVar[str] = ""

    @classmethod
    def apply(cls, connection: Any, writes: Iterable[MemoryWrite]) -> None:
        for write in writes:
            if isinstance(write, AddMessages):
                pid = cls._pid(connection, write.namespace, write.profile)
                if pid is not None:
                    cls._add_messages(connection, pid, write)
                    if write.messages:
                        cls._touch(connection, pid, write.messages[-1]["timestamp"], write.seq)
            elif isinstance(write, AddMemories):
                cls._add_memories(connection, write)
            elif isinstance(write, AddSource):
                pid = cls._pid(connection, write.namespace, write.profile)
                if pid is not None:
                    cls._execute(
                        connection,
                        "INSERT INTO memory_extractions (pid, source, session_id, seq) "
                        "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                        (pid, write.source, write.session_id, write.seq),
                    )
            elif isinstance(write, Supersede):
                cls._supersede(connection, write)
            elif isinstance(write, DeleteMemory):
                pid = cls._pid(connection, write.namespace, write.profile)
                if pid is not None:
                    cls._delete_memories(connection, pid, "id = ?", (write.memory_id,))
                    if write.message_ids:
                        among, values = cls.dialect.any_of("id", write.message_ids)
                        cls._delete_messages(connection, pid, among, values)
            elif isinstance(write, ForgetSession):
                pid = cls._pid(connection, write.namespace, write.profile)
                if pid is not None:
                    cls._delete_memories(connection, pid, "session_id = ?", (write.session_id,))
                    cls._delete_messages(connection, pid, "session_id = ?", (write.session_id,))
                    cls._execute(
                        connection,
                        "DELETE FROM memory_extractions WHERE pid = ? AND session_id = ?",
                        (pid, write.session_id),
                    )
            elif isinstance(write, DeleteProfile):
                cls._delete_profile(connection, write.namespace, write.profile)
            elif isinstance(write, CreateProfile):
                cls._execute(
                    connection,
                    "INSERT INTO memory_profiles (namespace, profile, created_at, updated_at, "
                    "seq) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (write.namespace, write.profile, write.at, write.at, write.seq),
                )

    # -- the engine's index -------------------------------------------------------------------

    @classmethod
    def _add_messages(cls, connection: Any, pid: int, write: AddMessages) -> None:
        """Insert the raw messages (an id stored already is kept) with their search rows."""
        raise NotImplementedError

    @classmethod
    def _insert_memory(cls, connection: Any, values: tuple[Any, ...], texts: Texts) -> int | None:
        """Insert a memory (``values``: of :data:`MEMORY_COLUMNS`) with its search row (``texts``:
        summary, content, keywords, queries); its row id (``None``: it was stored)."""
        raise NotImplementedError

    @classmethod
    def _add_sources(cls, connection: Any, pid: int, rid: int, message_ids: list[str]) -> None:
        raise NotImplementedError

    @classmethod
    def _unindex_memory(cls, connection: Any, rid: int, indexed: Sequence[Any]) -> None:
        """Remove a memory's search row (``indexed``: its :attr:`indexed_columns`)."""

    @classmethod
    def _delete_messages(cls, connection: Any, pid: int, where: str, params: Sequence[Any]) -> None:
        """Delete raw messages with their search rows (``where``: a fixed condition, written
        with ``?``)."""
        raise NotImplementedError

    # -- written once ---------------------------------------------------------------------------

    @classmethod
    def _execute(cls, connection: Executes, statement: str, params: Any = ()) -> Any:
        return connection.execute(cls.dialect.sql(statement), params)

    @classmethod
    def _pid(cls, connection: Executes, namespace: str, profile: str) -> int | None:
        row = cls._execute(
            connection,
            "SELECT pid FROM memory_profiles WHERE namespace = ? AND profile = ?",
            (namespace, profile),
        ).fetchone()
        return None if row is None else int(row[0])

    @classmethod
    def _touch(cls, connection: Executes, pid: int, at: str, seq: int) -> None:
        cls._execute(
            connection,
            "UPDATE memory_profiles SET updated_at = ?, seq = ? WHERE pid = ?",
            (at, seq, pid),
        )

    @classmethod
    def _add_memories(cls, connection: Any, write: AddMemories) -> None:
        pid = cls._pid(connection, write.namespace, write.profile)
        if pid is None:
            return
        added = 0
        for memory in write.memories:
            keywords = " ".join(memory.get("keywords") or ())
            queries = "\n".join(memory.get("queries") or ())
            values = memory_row(pid, write, memory, keywords, queries)
            texts = (memory["summary"], memory["content"], keywords, queries)
            rid = cls._insert_memory(connection, values, texts)
            if rid is None:
                continue
            added += 1
            sources = list(memory.get("source_message_ids") or ())
            if sources:
                cls._add_sources(connection, pid, rid, sources)
            cls._execute(
                connection,
                "INSERT INTO memory_history (pid, memory_id, seq, at, action, other_id) "
                "VALUES (?, ?, ?, ?, 'created', ?) ON CONFLICT DO NOTHING",
                (pid, memory["id"], write.seq, write.at, write.source),
            )
        cls._execute(
            connection,
            "UPDATE memory_extractions SET extracted_seq = ?, memories = memories + ? "
            "WHERE pid = ? AND source = ?",
            (write.seq, added, pid, write.source),
        )
        cls._touch(connection, pid, write.at, write.seq)

    @classmethod
    def _supersede(cls, connection: Executes, write: Supersede) -> None:
        pid = cls._pid(connection, write.namespace, write.profile)
        if pid is None:
            return
        cls._execute(
            connection,
            "UPDATE memories SET superseded_by = ?, updated_at = ? WHERE pid = ? AND id = ?",
            (write.superseded_by, write.at, pid, write.memory_id),
        )
        cls._execute(
            connection,
            "UPDATE memories SET supersedes = ? WHERE pid = ? AND id = ?",
            (write.memory_id, pid, write.superseded_by),
        )
        history = (
            "INSERT INTO memory_history (pid, memory_id, seq, at, action, other_id) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
        )
        at = (write.seq, write.at)
        cls._execute(
            connection, history, (pid, write.memory_id, *at, "superseded", write.superseded_by)
        )
        cls._execute(
            connection, history, (pid, write.superseded_by, *at, "supersedes", write.memory_id)
        )

    @classmethod
    def _delete_memories(cls, connection: Any, pid: int, where: str, params: Sequence[Any]) -> None:
        """Delete memories (with their search rows, sources and history); what a deleted
        memory superseded becomes current again, linked to what superseded the deleted one, if
        any. ``where`` is one of this module's fixed conditions (never user text)."""
        rows = cls._execute(
            connection,
            f"SELECT rid, id, supersedes, superseded_by{cls.indexed_columns} FROM memories "
            f"WHERE pid = ? AND {where} ORDER BY rid",
            (pid, *params),
        ).fetchall()
        for rid, memory_id, older, newer, *indexed in rows:
            cls._unindex_memory(connection, rid, indexed)
            cls._execute(connection, "DELETE FROM memories WHERE rid = ?", (rid,))
            cls._execute(connection, "DELETE FROM memory_sources WHERE memory_rid = ?", (rid,))
            cls._execute(
                connection,
                "DELETE FROM memory_history WHERE pid = ? AND memory_id = ?",
                (pid, memory_id),
            )
            if older is not None:
                cls._execute(
                    connection,
                    "UPDATE memories SET superseded_by = ? WHERE pid = ? AND id = ?",
                    (newer, pid, older),
                )
            if newer is not None:
                cls._execute(
                    connection,
                    "UPDATE memories SET supersedes = ? WHERE pid = ? AND id = ?",
                    (older, pid, newer),
                )
        # Dangling links (the other end deleted in the same statement) are cleared.
        if rows:
            for column in ("superseded_by", "supersedes"):
                cls._execute(
                    connection,
                    f"UPDATE memories AS m SET {column} = NULL WHERE m.pid = ? "
                    f"AND m.{column} IS NOT NULL AND NOT EXISTS (SELECT 1 FROM memories AS o "
                    f"WHERE o.pid = ? AND o.id = m.{column})",
                    (pid, pid),
                )

    @classmethod
    def _delete_profile(cls, connection: Any, namespace: str, profile: str) -> None:
        pid = cls._pid(connection, namespace, profile)
        if pid is None:
            return
        cls._delete_memories(connection, pid, "TRUE", ())
        cls._delete_messages(connection, pid, "TRUE", ())
        for table in ("memory_sources", "memory_history", "memory_extractions"):
            cls._execute(connection, f"DELETE FROM {table} WHERE pid = ?", (pid,))
        cls._execute(connection, "DELETE FROM memory_profiles WHERE pid = ?", (pid,))
