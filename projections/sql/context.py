"""The context read models' writes on either engine: built-in blocks, cached prompts, loaded
skills; each engine indexes search entries its own way."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

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
from memstream.projections.sql.dialect import Dialect, Executes


def apply_context_writes(
    connection: Executes,
    dialect: Dialect,
    writes: Iterable[ContextWrite],
    index_entry: Callable[[Any, IndexEntry], None],
) -> None:
    """Apply writes inside the caller's transaction (``index_entry``: the engine's, which
    keeps its full-text index)."""
    for write in writes:
        if isinstance(write, WriteBlock):
            connection.execute(
                dialect.sql(
                    "INSERT INTO context_blocks (namespace, session_id, label, key, content, seq, "
                    "updated_at, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (namespace, session_id, label) DO UPDATE SET "
                    "key = excluded.key, content = excluded.content, seq = excluded.seq, "
                    "updated_at = excluded.updated_at, version = excluded.version"
                ),
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
                dialect.sql(
                    "INSERT INTO cached_prompts (namespace, session_id, prompt, seq, frozen_at) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (namespace, session_id) DO UPDATE SET "
                    "prompt = excluded.prompt, seq = excluded.seq, frozen_at = excluded.frozen_at"
                ),
                (write.namespace, write.session_id, write.prompt, write.seq, write.frozen_at),
            )
        elif isinstance(write, IndexEntry):
            index_entry(connection, write)
        elif isinstance(write, LoadSkill):
            connection.execute(
                dialect.sql(
                    "INSERT INTO loaded_skills (namespace, session_id, label, key, seq) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
                ),
                (write.namespace, write.session_id, write.label, write.key, write.seq),
            )
        elif isinstance(write, UnloadSkill):
            connection.execute(
                dialect.sql(
                    "DELETE FROM loaded_skills WHERE namespace = ? AND session_id = ? "
                    "AND label = ? AND key = ?"
                ),
                (write.namespace, write.session_id, write.label, write.key),
            )
        elif isinstance(write, ClearSkills):
            connection.execute(
                dialect.sql("DELETE FROM loaded_skills WHERE namespace = ? AND session_id = ?"),
                (write.namespace, write.session_id),
            )
        elif isinstance(write, DropBlock):
            connection.execute(
                dialect.sql(
                    "DELETE FROM context_blocks WHERE namespace = ? AND session_id = ? "
                    "AND label = ?"
                ),
                (write.namespace, write.session_id or "", write.label),
            )
        elif isinstance(write, DropPrompt):
            connection.execute(
                dialect.sql("DELETE FROM cached_prompts WHERE namespace = ? AND session_id = ?"),
                (write.namespace, write.session_id),
            )
