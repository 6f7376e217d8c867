"""The tables each projection owns on either engine: emptied together when it is dropped (an
engine adds its full-text index tables)."""

from __future__ import annotations

from collections.abc import Mapping

TABLES: dict[str, tuple[str, ...]] = {
    "sessions": ("session_keys", "messages", "compactions", "session_state"),
    "context": (
        "context_blocks",
        "cached_prompts",
        "loaded_skills",
        "search_blocks",
        "search_entries",
    ),
    "registry": ("session_registry",),
    "memory": (
        "memory_profiles",
        "memory_messages",
        "memories",
        "memory_sources",
        "memory_history",
        "memory_extractions",
    ),
    "vectors": ("memory_vectors",),
    "analytics": ("analytics_daily", "analytics_sessions", "analytics_units"),
}


def with_indexes(indexes: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """:data:`TABLES` with each table's index table (``indexes``, by table) right after it."""
    return {
        projection: tuple(
            name
            for table in tables
            for name in ((table, indexes[table]) if table in indexes else (table,))
        )
        for projection, tables in TABLES.items()
    }
