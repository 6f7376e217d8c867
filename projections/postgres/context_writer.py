"""Applies context read-model writes to PostgreSQL (blocks, prompts, search entries, skills)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg

from memstream.projections.context_projector import (
    ClearSkills,
    ContextWrite,
    DropBlock,
    DropPrompt,
    IndexEntry,
    LoadSkill,
    UnloadSkill,
    WriteBlock,
    WritePrompt,
)
from memstream.projections.postgres.schema import TEXT_SEARCH
from memstream.projections.postgres.text import searchable

Connection = psycopg.Connection[tuple[Any, ...]]


def apply_context_writes(connection: Connection, writes: Iterable[ContextWrite]) -> None:
    """Apply writes inside the caller's transaction."""
    for write in writes:
        if isinstance(write, WriteBlock):
            connection.execute(
                "INSERT INTO context_blocks (namespace, session_id, label, key, content, seq, "
                "updated_at, version) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (namespace, session_id, label) DO UPDATE SET key = excluded.key, "
                "content = excluded.content, seq = excluded.seq, updated_at = excluded.updated_at, "
                "version = excluded.version",
                (
                    write.namespace,
                    write.session_id or "",
                    write.label,
                    write.key,
                    write.content,
                    write.seq,
                    write.updated_at,
                    write.version,
                ),
            )
        elif isinstance(write, WritePrompt):
            connection.execute(
                "INSERT INTO cached_prompts (namespace, session_id, prompt, seq, frozen_at) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (namespace, session_id) DO UPDATE SET "
                "prompt = excluded.prompt, seq = excluded.seq, frozen_at = excluded.frozen_at",
                (
                    write.namespace,
                    write.session_id,
                    write.prompt,
                    write.seq,
                    write.frozen_at,
                ),
            )
        elif isinstance(write, IndexEntry):
            _index_entry(connection, write)
        elif isinstance(write, LoadSkill):
            connection.execute(
                "INSERT INTO loaded_skills (namespace, session_id, label, key, seq) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (write.namespace, write.session_id, write.label, write.key, write.seq),
            )
        elif isinstance(write, UnloadSkill):
            connection.execute(
                "DELETE FROM loaded_skills WHERE namespace = %s AND session_id = %s "
                "AND label = %s AND key = %s",
                (write.namespace, write.session_id, write.label, write.key),
            )
        elif isinstance(write, ClearSkills):
            connection.execute(
                "DELETE FROM loaded_skills WHERE namespace = %s AND session_id = %s",
                (write.namespace, write.session_id),
            )
        elif isinstance(write, DropBlock):
            connection.execute(
                "DELETE FROM context_blocks WHERE namespace = %s AND session_id = %s "
                "AND label = %s",
                (write.namespace, write.session_id or "", write.label),
            )
        elif isinstance(write, DropPrompt):
            connection.execute(
                "DELETE FROM cached_prompts WHERE namespace = %s AND session_id = %s",
                (write.namespace, write.session_id),
            )


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
