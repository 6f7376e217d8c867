"""Applies context read-model writes to PostgreSQL (blocks, prompts, search entries, skills)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg

from memstream.projections.context_projector import ContextWrite, IndexEntry
from memstream.projections.postgres.schema import TEXT_SEARCH
from memstream.projections.postgres.text import searchable
from memstream.projections.sql import context
from memstream.projections.sql.dialect import POSTGRES

Connection = psycopg.Connection[tuple[Any, ...]]


def apply_context_writes(connection: Connection, writes: Iterable[ContextWrite]) -> None:
    """Apply writes inside the caller's transaction."""
    context.apply_context_writes(connection, POSTGRES, writes, _index_entry)


def _index_entry(connection: Connection, write: IndexEntry) -> None:
    # The block's row with its last event and version: what a writer restores the block from.
    row = connection.execute(
        "INSERT INTO search_blocks (namespace, key, last_seq, version) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (namespace, key) DO UPDATE SET last_seq = excluded.last_seq, "
        "version = excluded.version RETURNING bid",
        (write.namespace, write.block_key, write.seq, write.version),
    ).fetchone()
    assert row is not None
    connection.execute(
        "INSERT INTO search_entries (bid, key, content, seq, created_at, updated_at, search) "
        f"VALUES (%(bid)s, %(key)s, %(content)s, %(seq)s, %(at)s, %(at)s, "
        f"to_tsvector('{TEXT_SEARCH}', %(text)s)) "
        "ON CONFLICT (bid, key) DO UPDATE SET content = excluded.content, seq = excluded.seq, "
        "updated_at = excluded.updated_at, search = excluded.search",
        {
            "bid": row[0],
            "key": write.entry_key,
            "content": write.content,
            "text": searchable(write.content),
            "seq": write.seq,
            "at": write.updated_at,
        },
    )
