"""Checksums of PostgreSQL read models over their logical content (independent of row ids),
and the first row where two builds differ (:mod:`memstream.projections.sql.checksum`): the
parts they read."""

from __future__ import annotations

from typing import Any

import psycopg

from memstream.projections.ports import Difference
from memstream.projections.sql.checksum import Parts, difference, digest

Connection = psycopg.Connection[tuple[Any, ...]]
_C = 'COLLATE "C"'

# Each projection's content as named parts, each one query in a canonical (byte) order. Search
# vectors are part of the content (as text: lexemes, positions, weights).
_PARTS: dict[str, Parts] = {
    "sessions": (
        (
            "messages",
            "SELECT k.namespace, k.session_id, m.id, m.parent_id, m.role, m.content, m.bytes, "
            "m.position, m.created_at, m.child_count, m.depth, m.path_bytes, m.search::text, "
            "p.id FROM messages AS m JOIN session_keys AS k ON k.sid = m.sid "
            "LEFT JOIN messages AS p ON p.mid = m.parent_mid "
            f"ORDER BY k.namespace {_C}, k.session_id {_C}, m.position",
        ),
        (
            "session message counts",
            "SELECT namespace, session_id, messages FROM session_keys "
            f"ORDER BY namespace {_C}, session_id {_C}",
        ),
        (
            "compactions",
            "SELECT k.namespace, k.session_id, c.id, c.summary, c.from_message_id, "
            "c.to_message_id, c.position, c.created_at FROM compactions AS c "
            "JOIN session_keys AS k ON k.sid = c.sid "
            f"ORDER BY k.namespace {_C}, k.session_id {_C}, c.position, c.id {_C}",
        ),
        (
            "session decision state",
            "SELECT s.namespace, s.session_id, s.last_seq, s.version, s.frozen_prompt, "
            "s.loaded_skills, k.session_id FROM session_state AS s "
            "LEFT JOIN session_keys AS k ON k.sid = s.sid "
            f"ORDER BY s.namespace {_C}, s.session_id {_C}",
        ),
    ),
    "context": (
        (
            "context blocks",
            "SELECT namespace, session_id, label, key, content, seq, updated_at, version "
            f"FROM context_blocks ORDER BY namespace {_C}, session_id {_C}, label {_C}",
        ),
        (
            "cached prompts",
            "SELECT namespace, session_id, prompt, seq, frozen_at FROM cached_prompts "
            f"ORDER BY namespace {_C}, session_id {_C}",
        ),
        (
            "loaded skills",
            "SELECT namespace, session_id, label, key, seq FROM loaded_skills "
            f"ORDER BY namespace {_C}, session_id {_C}, label {_C}, key {_C}",
        ),
        (
            "search blocks",
            "SELECT namespace, key, last_seq, version FROM search_blocks "
            f"ORDER BY namespace {_C}, key {_C}",
        ),
        (
            "search entries",
            "SELECT b.namespace, b.key, e.key, e.content, e.seq, e.created_at, e.updated_at, "
            "e.search::text FROM search_entries AS e JOIN search_blocks AS b ON b.bid = e.bid "
            f"ORDER BY b.namespace {_C}, b.key {_C}, e.key {_C}",
        ),
    ),
    "registry": (
        (
            "registered sessions",
            "SELECT namespace, session_id, name, parent_session_id, model, source, input_tokens, "
            "output_tokens, cost, end_reason, created_at, updated_at, updated_seq, "
            "forked_from_message_id, record_seq, record_version "
            f"FROM session_registry ORDER BY namespace {_C}, session_id {_C}",
        ),
    ),
    "memory": (
        (
            "memory profiles",
            "SELECT namespace, profile, created_at, updated_at, seq FROM memory_profiles "
            f"ORDER BY namespace {_C}, profile {_C}",
        ),
        (
            "raw messages",
            "SELECT p.namespace, p.profile, m.id, m.session_id, m.role, m.content, m.timestamp, "
            "m.seq, m.search::text FROM memory_messages AS m JOIN memory_profiles AS p "
            f"ON p.pid = m.pid ORDER BY p.namespace {_C}, p.profile {_C}, m.id {_C}",
        ),
        (
            "memories",
            "SELECT p.namespace, p.profile, m.id, m.type, m.topic_key, m.summary, m.content, "
            "m.keywords, m.queries, m.session_id, m.event_time, m.source, m.extractor, "
            "m.superseded_by, m.supersedes, m.created_at, m.updated_at, m.seq, m.search::text "
            "FROM memories AS m JOIN memory_profiles AS p ON p.pid = m.pid "
            f"ORDER BY p.namespace {_C}, p.profile {_C}, m.id {_C}",
        ),
        (
            "memory sources",
            "SELECT p.namespace, p.profile, m.id, s.message_id FROM memory_sources AS s "
            "JOIN memories AS m ON m.rid = s.memory_rid JOIN memory_profiles AS p "
            f"ON p.pid = s.pid ORDER BY p.namespace {_C}, p.profile {_C}, m.id {_C}, "
            f"s.message_id {_C}",
        ),
        (
            "memory history",
            "SELECT p.namespace, p.profile, h.memory_id, h.seq, h.at, h.action, h.other_id "
            "FROM memory_history AS h JOIN memory_profiles AS p ON p.pid = h.pid "
            f"ORDER BY p.namespace {_C}, p.profile {_C}, h.memory_id {_C}, h.seq, h.action {_C}",
        ),
        (
            "extraction sources",
            "SELECT p.namespace, p.profile, e.source, e.session_id, e.seq, e.extracted_seq, "
            "e.memories FROM memory_extractions AS e JOIN memory_profiles AS p "
            f"ON p.pid = e.pid ORDER BY p.namespace {_C}, p.profile {_C}, e.source {_C}",
        ),
    ),
    # Vectors are recomputed on a rebuild, and a model's floats may differ in their last bits
    # between batchings: which items have vectors of which model, not the floats.
    "vectors": (
        (
            "vectors",
            "SELECT namespace, profile, kind, item_id, session_id, model, octet_length(vector), "
            f"seq FROM memory_vectors ORDER BY namespace {_C}, profile {_C}, kind {_C}, "
            f"item_id {_C}",
        ),
    ),
    "analytics": (
        (
            "daily counters",
            "SELECT namespace, day, model, source, metric, session_id, profile, value "
            f"FROM analytics_daily ORDER BY namespace {_C}, day {_C}, model {_C}, "
            f"source {_C}, metric {_C}, session_id {_C}, profile {_C}",
        ),
        (
            "sessions",
            "SELECT namespace, session_id, first_day, model, source, registered "
            f"FROM analytics_sessions ORDER BY namespace {_C}, session_id {_C}",
        ),
        (
            "deletions",
            "SELECT namespace, kind, id, last_seq FROM analytics_units "
            f"ORDER BY namespace {_C}, kind {_C}, id {_C}",
        ),
    ),
}


def checksum(connection: Connection, projection: str) -> str:
    """SHA-256 over every row of ``projection``'s tables in a canonical order (one snapshot)."""
    with connection.transaction():
        connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        return digest(_PARTS[projection], connection.execute)


def first_difference(live: Connection, rebuilt: Connection, projection: str) -> Difference | None:
    """The first row where two builds of ``projection`` differ, in checksum order (``None``
    when they hold the same content)."""
    return difference(
        _PARTS[projection],
        lambda query: live.execute(query).fetchall(),
        lambda query: rebuilt.execute(query).fetchall(),
    )
