"""What a read model deletes leaves the SQLite file: deleted rows are overwritten, not kept in
free pages (``PRAGMA secure_delete``, set on every read-model connection)."""

from __future__ import annotations

from pathlib import Path

from memstream.projections.sqlite.database import open_database

NEEDLE = "zebra-secret-plan"


def test_a_deleted_row_leaves_no_trace_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "memstream.db"
    connection = open_database(path)
    try:
        assert connection.execute("PRAGMA secure_delete").fetchone()[0] == 1
        connection.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
        connection.executemany(
            "INSERT INTO notes (text) VALUES (?)",
            [(f"{NEEDLE} {n} " * 20,) for n in range(50)] + [("kept " * 20,)] * 50,
        )
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert NEEDLE.encode() in path.read_bytes()
        # When the rows are deleted and the WAL is checkpointed into the file
        connection.execute("DELETE FROM notes WHERE text LIKE ?", (f"{NEEDLE}%",))
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        # Then the file holds none of their text, and the rows kept are intact
        assert NEEDLE.encode() not in path.read_bytes()
        assert b"kept" in path.read_bytes()
        assert connection.execute("SELECT count(*) FROM notes").fetchone()[0] == 50
    finally:
        connection.close()
