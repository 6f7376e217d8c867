"""Read models: pure projectors, store ports, and the SQLite/Postgres adapters and queries."""
