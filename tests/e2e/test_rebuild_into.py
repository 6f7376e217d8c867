"""``memstream projections rebuild --into``: read models moved from SQLite to PostgreSQL and back
by replaying the log, each command a process of its own (issue 14, item 7)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from psycopg import conninfo
from support.deployment import deployment_env, deployment_settings
from support.processes import MEMSTREAM, json_of, memstream, stop, wait_for_text

from memstream.workers.runtime.nats_server import NatsServerProcess

pytestmark = pytest.mark.postgres

SECRET = "never-shown-7c1e"
READER = Path(__file__).parent.parent / "support" / "read_everything.py"
WORKERS = ("projector", "extractor", "indexer")


def _worker(env: dict[str, str], log: Path, name: str) -> tuple[subprocess.Popen[str], Path]:
    with log.open("w") as out:
        process = subprocess.Popen(
            [MEMSTREAM, "worker", name], env=env, stdout=out, stderr=subprocess.STDOUT, text=True
        )
    return process, log


def _reads(env: dict[str, str]) -> dict[str, Any]:
    """What a user reads back: history, a branch, search, sessions, context, memories and a
    recall (one process reads them all: support/read_everything.py)."""
    done = subprocess.run(
        [sys.executable, str(READER)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    read: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return read


def test_rebuild_into_postgresql_and_back_gives_the_same_read_models(
    tmp_path: Path, nats_server: NatsServerProcess, postgres_url: str
) -> None:
    sqlite_env = deployment_env(deployment_settings(nats_server.url, tmp_path / "data"))
    # Given a log written through the CLI (the three workers running), with SQLite read models
    env = sqlite_env
    workers = [_worker(env, tmp_path / f"{name}.log", name) for name in WORKERS]
    try:
        for process, log in workers:
            wait_for_text(log, "FastStream app started", process)
        memstream(env, "append", "trip", "--id", "m1", "--root", "--text", "Plan a trip")
        memstream(env, "append", "trip", "--id", "m2", "--role", "assistant", "--text", "Tram 28")
        memstream(env, "append", "trip", "--id", "m3", "--parent", "m1", "--text", "A ferry?")
        memstream(env, "append", "notes", "--text", "'; DROP TABLE messages; --")
        memstream(env, "context", "set", "memory", "Likes trams", "--session", "trip")
        memstream(env, "memory", "remember", "alice", "Prefers answers in French")
    finally:
        for process, log in workers:
            assert stop(process) == 0, log.read_text()
    rebuilt = memstream(env, "projections", "rebuild").stdout
    end = int(re.findall(r"up to sequence (\d+)", rebuilt)[0])
    assert end >= 6  # the commands' events, and the extractor's
    before = _reads(sqlite_env)
    assert [m["id"] for m in before["history"]] == ["m1", "m3"]
    assert ["French" in m["summary"] for m in before["memories"]] == [True]
    assert [c["id"] for c in before["recall"]] == [before["memories"][0]["id"]]
    assert [b["label"] for b in before["blocks"]] == ["memory"]

    # When they are rebuilt into a PostgreSQL database (its URL carrying a password)
    url = conninfo.make_conninfo(postgres_url, password=SECRET)  # trust auth ignores it
    moved = memstream(sqlite_env, "projections", "rebuild", "--into", url)
    # Then every projection is built there up to the log's end, and the password is not shown
    assert "rebuilt all projections into " in moved.stdout
    assert f"up to sequence {end}\n" in moved.stdout
    assert SECRET not in moved.stdout + moved.stderr
    # And a client of that database reads what the SQLite one did, and it verifies
    pg_env = {**sqlite_env, "MEMSTREAM_DATABASE_URL": postgres_url}
    assert _reads(pg_env) == before
    verified = json_of(pg_env, "projections", "verify")
    assert {v["projection"] for v in verified} >= {"sessions", "context", "registry", "memory"}
    assert all(v["ok"] for v in verified), verified

    # When they are rebuilt back from PostgreSQL into a new data dir's SQLite
    back = tmp_path / "back"
    back.mkdir()
    returned = memstream(pg_env, "projections", "rebuild", "--into", str(back))
    assert f"into {back.resolve() / 'memstream.db'} up to sequence {end}" in returned.stdout
    # Then that copy reads the same too, verifies, and is readable by its owner only
    back_env = {**sqlite_env, "MEMSTREAM_DATA_DIR": str(back)}
    assert _reads(back_env) == before
    assert all(v["ok"] for v in json_of(back_env, "projections", "verify"))
    assert (back / "memstream.db").stat().st_mode & 0o077 == 0


def test_rebuild_into_refuses_what_is_not_a_read_model_copy(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    env = deployment_env(deployment_settings(nats_server.url, tmp_path / "data"))
    wrong_scheme = memstream(
        env, "projections", "rebuild", "--into", f"mysql://bob:{SECRET}@db/x", expect=1
    )
    assert "is not a postgresql:// URL" in wrong_scheme.stderr
    assert SECRET not in wrong_scheme.stderr
    missing = memstream(
        env, "projections", "rebuild", "--into", str(tmp_path / "nowhere" / "x.db"), expect=1
    )
    assert "does not exist" in missing.stderr
    assert str(tmp_path / "nowhere") in missing.stderr
