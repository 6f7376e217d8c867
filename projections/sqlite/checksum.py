"""Checksums of SQLite read models over their logical content (independent of row ids), and
the first row where two builds differ (:mod:`memstream.projections.sql.checksum`): the parts
they read."""

from __future__ import annotations

import sqlite3

from memstream.projections.ports import Difference
from memstream.projections.sql.checksum import Parts, difference, digest

# The terms of the message index (an fts5vocab table of the connection's own).
_TERMS = "temp.messages_fts_terms"
_TERMS_TABLE = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {_TERMS} USING fts5vocab(main, messages_fts, row)"
)

# Each projection's content as named parts, each one query in a canonical order.
_PARTS: dict[str, Parts] = {
    "sessions": (
        (
            "messages",
            "SELECT k.namespace, k.session_id, m.id, m.parent_id, m.role, m.content, m.bytes, "
            "m.position, m.created_at, m.child_count, m.depth, m.path_bytes FROM messages AS m "
            "JOIN session_keys AS k ON k.sid = m.sid "
            "ORDER BY k.namespace, k.session_id, m.position",
        ),
        (
            # The index keeps no text (contentless): which messages it holds, and its terms
            # with their document and occurrence counts.
            "message search rows",
            "SELECT k.namespace, k.session_id, m.id FROM messages_fts AS f "
            "JOIN messages AS m ON m.mid = f.rowid JOIN session_keys AS k ON k.sid = m.sid "
            "ORDER BY k.namespace, k.session_id, m.position",
        ),
        ("message search row count", "SELECT count(*) FROM messages_fts"),
        ("message search terms", f"SELECT term, doc, cnt FROM {_TERMS} ORDER BY term"),
        (
            # The row links, by id (row ids themselves may differ between two builds)
            "message parent links",
            "SELECT k.namespace, k.session_id, m.id, p.id FROM messages AS m "
            "JOIN session_keys AS k ON k.sid = m.sid "
            "LEFT JOIN messages AS p ON p.mid = m.parent_mid "
            "ORDER BY k.namespace, k.session_id, m.position",
        ),
        (
            "session message counts",
            "SELECT namespace, session_id, messages FROM session_keys "
            "ORDER BY namespace, session_id",
        ),
        (
            "compactions",
            "SELECT k.namespace, k.session_id, c.id, c.summary, c.from_message_id, "
            "c.to_message_id, c.position, c.created_at FROM compactions AS c "
            "JOIN session_keys AS k ON k.sid = c.sid "
            "ORDER BY k.namespace, k.session_id, c.position",
        ),
        (
            "session decision state",
            "SELECT s.namespace, s.session_id, s.last_seq, s.version, s.frozen_prompt, "
            "s.loaded_skills, k.session_id FROM session_state AS s "
            "LEFT JOIN session_keys AS k ON k.sid = s.sid ORDER BY s.namespace, s.session_id",
        ),
    ),
    "context": (
        (
            "context blocks",
            "SELECT namespace, session_id, label, key, content, seq, updated_at "
            "FROM context_blocks ORDER BY namespace, session_id, label",
        ),
        (
            "cached prompts",
            "SELECT namespace, session_id, prompt, seq, frozen_at FROM cached_prompts "
            "ORDER BY namespace, session_id",
        ),
        (
            "loaded skills",
            "SELECT namespace, session_id, label, key, seq FROM loaded_skills "
            "ORDER BY namespace, session_id, label, key",
        ),
        (
            "search entries",
            "SELECT b.namespace, b.key, e.key, e.content, e.seq, e.created_at, e.updated_at, "
            "f.text FROM search_entries AS e JOIN search_blocks AS b ON b.bid = e.bid "
            "LEFT JOIN search_entries_fts AS f ON f.rowid = e.eid "
            "ORDER BY b.namespace, b.key, e.key",
        ),
        ("search entry rows", "SELECT count(*) FROM search_entries_fts"),
    ),
    "registry": (
        (
            "registered sessions",
            "SELECT namespace, session_id, name, parent_session_id, model, source, input_tokens, "
            "output_tokens, cost, end_reason, created_at, updated_at, updated_seq, "
            "forked_from_message_id, record_seq, record_version "
            "FROM session_registry ORDER BY namespace, session_id",
        ),
    ),
    # By names, never by the row keys (pid, rid) that two builds may number differently.
    "memory": (
        (
            "memory profiles",
            "SELECT namespace, profile, created_at, updated_at, seq FROM memory_profiles "
            "ORDER BY namespace, profile",
        ),
        (
            "raw messages",
            "SELECT p.namespace, p.profile, m.id, m.session_id, m.role, m.content, m.timestamp, "
            "m.seq FROM memory_messages AS m JOIN memory_profiles AS p ON p.pid = m.pid "
            "ORDER BY p.namespace, p.profile, m.id",
        ),
        ("raw message search rows", "SELECT count(*) FROM memory_messages_fts"),
        (
            "memories",
            "SELECT p.namespace, p.profile, m.id, m.type, m.topic_key, m.summary, m.content, "
            "m.keywords, m.queries, m.session_id, m.event_time, m.source, m.extractor, "
            "m.superseded_by, m.supersedes, m.created_at, m.updated_at, m.seq "
            "FROM memories AS m JOIN memory_profiles AS p ON p.pid = m.pid "
            "ORDER BY p.namespace, p.profile, m.id",
        ),
        ("memory search rows", "SELECT count(*) FROM memories_fts"),
        (
            "memory sources",
            "SELECT p.namespace, p.profile, m.id, s.message_id FROM memory_sources AS s "
            "JOIN memories AS m ON m.rid = s.memory_rid JOIN memory_profiles AS p "
            "ON p.pid = s.pid ORDER BY p.namespace, p.profile, m.id, s.message_id",
        ),
        (
            "memory history",
            "SELECT p.namespace, p.profile, h.memory_id, h.seq, h.at, h.action, h.other_id "
            "FROM memory_history AS h JOIN memory_profiles AS p ON p.pid = h.pid "
            "ORDER BY p.namespace, p.profile, h.memory_id, h.seq, h.action",
        ),
        (
            "extraction sources",
            "SELECT p.namespace, p.profile, e.source, e.session_id, e.seq, e.extracted_seq, "
            "e.memories FROM memory_extractions AS e JOIN memory_profiles AS p "
            "ON p.pid = e.pid ORDER BY p.namespace, p.profile, e.source",
        ),
    ),
    # Vectors are recomputed on a rebuild, and a model's floats may differ in their last bits
    # between batchings: which items have vectors of which model, not the floats.
    "vectors": (
        (
            "vectors",
            "SELECT namespace, profile, kind, item_id, session_id, model, length(vector), seq "
            "FROM memory_vectors ORDER BY namespace, profile, kind, item_id",
        ),
    ),
    "analytics": (
        (
            "daily counters",
            "SELECT namespace, day, model, source, metric, session_id, profile, value "
            "FROM analytics_daily "
            "ORDER BY namespace, day, model, source, metric, session_id, profile",
        ),
        (
            "sessions",
            "SELECT namespace, session_id, first_day, model, source, registered "
            "FROM analytics_sessions ORDER BY namespace, session_id",
        ),
        (
            "deletions",
            "SELECT namespace, kind, id, last_seq FROM analytics_units "
            "ORDER BY namespace, kind, id",
        ),
    ),
}


def checksum(connection: sqlite3.Connection, projection: str) -> str:
    """SHA-256 over every row of ``projection``'s tables in a canonical order."""
    _prepare(connection)
    return digest(_PARTS[projection], connection.execute)


def first_difference(
    live: sqlite3.Connection, rebuilt: sqlite3.Connection, projection: str
) -> Difference | None:
    """The first row where two builds of ``projection`` differ, in checksum order (``None``
    when they hold the same content, i.e. when their checksums are equal)."""
    _prepare(live)
    _prepare(rebuilt)
    return difference(_PARTS[projection], live.execute, rebuilt.execute)


def _prepare(connection: sqlite3.Connection) -> None:
    """The connection's view of the message index's terms (a temporary table: nothing is
    written to the read model)."""
    connection.execute(_TERMS_TABLE)
