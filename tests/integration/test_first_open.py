"""Processes opening a fresh read model at once: schema creation and migration are race-free."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from memstream.projections.sqlite.schema import APPLICATION_ID, SCHEMA_VERSION

OPENERS = 6

# Imports first, then waits at the barrier (a file), so that the opens start together.
OPENER = """
import os, sys, time
from memstream.projections.sqlite.database import open_database
database, barrier = sys.argv[1:3]
print("ready", flush=True)
deadline = time.monotonic() + 60
while not os.path.exists(barrier):
    if time.monotonic() > deadline:
        sys.exit("barrier never opened")
    time.sleep(0.0005)
connection = open_database(database)
print(connection.execute("PRAGMA user_version").fetchone()[0], flush=True)
connection.close()
"""


def test_six_processes_open_a_fresh_read_model_at_once(tmp_path: Path) -> None:
    # Given six processes waiting to open the same database file, which does not exist yet
    database = tmp_path / "memstream.db"
    barrier = tmp_path / "go"
    openers = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, str(database), str(barrier)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(OPENERS)
    ]
    try:
        for opener in openers:
            assert opener.stdout is not None
            assert opener.stdout.readline().strip() == "ready"
        assert not database.exists()

        # When they all open it at once
        started = time.monotonic()
        barrier.touch()
        results = [opener.communicate(timeout=120) for opener in openers]
    finally:
        for opener in openers:
            if opener.poll() is None:
                opener.kill()
                opener.wait()

    # Then every one succeeds and sees the latest schema
    for opener, (out, err) in zip(openers, results, strict=True):
        assert opener.returncode == 0, err
        assert out.split() == [str(SCHEMA_VERSION)], (out, err)
        assert "Traceback" not in err
    assert time.monotonic() - started < 60

    # And the file holds each table once, at the latest version, marked as a read model
    check = sqlite3.connect(database)
    names = [r[0] for r in check.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert len(names) == len(set(names))
    assert {"tracking", "messages", "context_blocks", "search_entries"} <= set(names)
    assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert check.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    check.close()
