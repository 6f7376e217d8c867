"""The PostgreSQL read models across OS processes: separate projector, writer and reader
processes on one database and one external NATS."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import psycopg
import pytest
from integration.test_many_processes import script, start_worker
from support.deployment import deployment_env, deployment_settings
from support.processes import json_of, memstream, stop, wait_for_text

from memstream.workers.runtime.nats_server import NatsServerProcess

pytestmark = pytest.mark.postgres


def _env(tmp_path: Path, nats_server: NatsServerProcess, database_url: str) -> dict[str, str]:
    return deployment_env(
        deployment_settings(nats_server.url, tmp_path / "data", database_url=database_url)
    )


def test_a_second_projector_on_one_database_is_refused_and_takes_over_after_a_kill(
    tmp_path: Path, nats_server: NatsServerProcess, postgres_url: str
) -> None:
    env = _env(tmp_path, nats_server, postgres_url)
    # Given a projector process writing the read models into PostgreSQL
    first = start_worker(env, tmp_path / "first.log")
    try:
        wait_for_text(tmp_path / "first.log", "projector: stream", first)
        # When a second projector starts for the same database
        second = memstream(env, "worker", "projector", expect=1)
        # Then it is refused in one line that names the running one
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert "a projector already runs for read-model copy" in lines[0]
        assert f"pid {first.pid} on " in lines[0]
        # And writes by another process are projected, and read by a third
        script(env, "append", "chat", "50")
        assert json.loads(script(env, "history", "chat")) == [f"m{i}" for i in range(50)]
        # When the first projector is killed (SIGKILL: no clean-up runs)
        stop(first, signal.SIGKILL)
        script(env, "append", "other", "30")
        # Then a new projector starts at once and resumes where the first one stopped
        third = start_worker(env, tmp_path / "third.log")
        try:
            wait_for_text(tmp_path / "third.log", "projector: stream", third)
            assert json.loads(script(env, "history", "other")) == [f"m{i}" for i in range(30)]
            verified = json_of(env, "projections", "verify")
            assert all(v["ok"] for v in verified), verified
        finally:
            stop(third)
    finally:
        stop(first)
    # And the rows are in PostgreSQL, each message once (nothing in a SQLite file)
    with psycopg.connect(postgres_url) as database:
        counts = database.execute(
            "SELECT k.session_id, count(*) FROM memstream.messages AS m "
            "JOIN memstream.session_keys AS k ON k.sid = m.sid GROUP BY k.session_id "
            "ORDER BY k.session_id"
        ).fetchall()
    assert counts == [("chat", 50), ("other", 30)]
    assert not (tmp_path / "data" / "memstream.db").exists()
