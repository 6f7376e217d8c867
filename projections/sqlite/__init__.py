"""SQLite (WAL, FTS5) adapters of the read-model ports."""
