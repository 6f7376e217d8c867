"""Applies memory writes to SQLite: the rows as :mod:`memstream.projections.sql.memory_writer`
writes them, with FTS5 indexes of raw messages and memories (external content: the text is
kept once, and named again to delete its terms)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from memstream.projections.memory_projector import AddMessages, MemoryWrite
from memstream.projections.sql.dialect import SQLITE
from memstream.projections.sql.memory_writer import (
    MEMORY_COLUMNS,
    MESSAGE_COLUMNS,
    SqlMemoryWriter,
    Texts,
    message_row,
)


def apply_memory_writes(connection: sqlite3.Connection, writes: Iterable[MemoryWrite]) -> None:
    """Apply writes inside the caller's transaction (each is idempotent: a redelivered event
    changes nothing)."""
    SqliteMemoryWriter.apply(connection, writes)


class SqliteMemoryWriter(SqlMemoryWriter):
    dialect = SQLITE
    indexed_columns = ", summary, content, keywords, queries, scope"

    @classmethod
    def _add_messages(cls, connection: sqlite3.Connection, pid: int, write: AddMessages) -> None:
        scope = f"p{pid}"
        for message in write.messages:
            cursor = connection.execute(
                f"INSERT INTO memory_messages ({MESSAGE_COLUMNS}, scope) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (*message_row(pid, write, message), scope),
            )
            if cursor.rowcount:
                connection.execute(
                    "INSERT INTO memory_messages_fts (rowid, content, scope) VALUES (?, ?, ?)",
                    (cursor.lastrowid, message["content"], scope),
                )

    @classmethod
    def _insert_memory(
        cls, connection: sqlite3.Connection, values: tuple[Any, ...], texts: Texts
    ) -> int | None:
        scope = f"p{values[0]}"
        cursor = connection.execute(
            f"INSERT INTO memories ({MEMORY_COLUMNS}, scope) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (*values, scope),
        )
        if not cursor.rowcount:
            return None
        rid = cursor.lastrowid
        connection.execute(
            "INSERT INTO memories_fts (rowid, summary, content, keywords, queries, scope) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (rid, *texts, scope),
        )
        return rid

    @classmethod
    def _add_sources(
        cls, connection: sqlite3.Connection, pid: int, rid: int, message_ids: list[str]
    ) -> None:
        connection.executemany(
            "INSERT INTO memory_sources (pid, message_id, memory_rid) VALUES (?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            [(pid, message_id, rid) for message_id in message_ids],
        )

    @classmethod
    def _unindex_memory(
        cls, connection: sqlite3.Connection, rid: int, indexed: Sequence[Any]
    ) -> None:
        connection.execute(
            "INSERT INTO memories_fts (memories_fts, rowid, summary, content, keywords, queries, "
            "scope) VALUES ('delete', ?, ?, ?, ?, ?, ?)",
            (rid, *indexed),
        )

    @classmethod
    def _delete_messages(
        cls, connection: sqlite3.Connection, pid: int, where: str, params: Sequence[Any]
    ) -> None:
        rows = connection.execute(
            f"SELECT rid, content, scope FROM memory_messages WHERE pid = ? AND {where}",
            (pid, *params),
        ).fetchall()
        connection.executemany(
            "INSERT INTO memory_messages_fts (memory_messages_fts, rowid, content, scope) "
            "VALUES ('delete', ?, ?, ?)",
            rows,
        )
        connection.executemany("DELETE FROM memory_messages WHERE rid = ?", [(r[0],) for r in rows])
