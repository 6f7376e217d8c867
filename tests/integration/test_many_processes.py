"""Many processes, many read-model copies: each scenario runs separate OS processes.

- a writer that exits, then a reader in a new process (embedded, and with a separate worker);
- two projectors for one read-model copy: the second is refused, and takes over after a SIGKILL;
- two data dirs (two copies) on one external NATS: each projects the whole stream;
- forgetting a copy that no longer exists.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from support.deployment import deployment_env, deployment_settings
from support.processes import (
    clean_env,
    freeze,
    json_of,
    memstream,
    start_worker,
    stop,
    wait_for_text,
)

from memstream.workers.runtime.nats_server import NatsServerProcess

SCRIPT = str(Path(__file__).resolve().parent.parent / "support" / "session_script.py")


def script(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, SCRIPT, *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"{args}: {result.returncode}\n{result.stderr}"
    return result.stdout


def external_env(data_dir: Path, nats_server: NatsServerProcess) -> dict[str, str]:
    """The settings of a process on ``nats_server`` (a stream of the test's own) and a data
    dir."""
    return deployment_env(deployment_settings(nats_server.url, data_dir))


def test_a_new_embedded_process_reads_what_an_exited_writer_wrote(tmp_path: Path) -> None:
    # Given a script that appends 200 messages on the embedded platform and exits
    env = clean_env(MEMSTREAM_DATA_DIR=str(tmp_path / "data"))
    script(env, "append", "chat", "200")
    # Then its clean close projected its own writes before it stopped (read without NATS)
    with sqlite3.connect(tmp_path / "data" / "memstream.db") as db:
        assert db.execute("SELECT count(*) FROM messages").fetchone()[0] == 200
    # When the next script reads the session
    history = json.loads(script(env, "history", "chat"))
    # Then it sees all 200 messages
    assert history == [f"m{i}" for i in range(200)]


def test_a_new_process_sees_a_refreshed_prompt_of_an_exited_process(tmp_path: Path) -> None:
    # Given one process that froze a cached prompt, changed a block and refreshed it, and exited
    env = clean_env(MEMSTREAM_DATA_DIR=str(tmp_path / "data"))
    script(env, "refresh", "chat", "Likes green tea")
    # When the next process freezes the system prompt of the same session
    prompt = json.loads(script(env, "freeze", "chat"))
    # Then it gets the refreshed prompt, not the first one
    assert "Likes green tea" in prompt


def test_a_reader_waits_for_a_separate_lingering_worker(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    # Given a projector in its own process that lingers 5 s per batch, on an external NATS
    env = external_env(tmp_path / "data", nats_server)
    log = tmp_path / "worker.log"
    worker = start_worker(env, log, "--linger", "5")
    try:
        wait_for_text(log, "projector: stream", worker)
        # And a writer process that appended 150 messages and exited
        script(env, "append", "chat", "150")
        # When a new process reads the session
        started = time.monotonic()
        history = json.loads(script(env, "history", "chat"))
        # Then it sees every message the log held when it connected, without waiting the
        # worker's linger out (it tells the worker what it waits for)
        assert history == [f"m{i}" for i in range(150)]
        assert time.monotonic() - started < 5
    finally:
        stop(worker)


def test_verify_in_another_process_does_not_wait_out_a_workers_linger(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    # Given a projector in its own process that lingers 10 s per batch, on an external NATS,
    # and a writer process that appended 150 messages and exited
    env = external_env(tmp_path / "data", nats_server)
    log = tmp_path / "worker.log"
    worker = start_worker(env, log, "--linger", "10")
    try:
        wait_for_text(log, "projector: stream", worker)
        script(env, "append", "chat", "150")
        # When `projections verify` runs in a third process
        started = time.monotonic()
        results = json_of(env, "projections", "verify")
        # Then it finds the read models equal to a rebuild, without waiting the linger out
        # (it tells the worker what it waits for)
        assert {r["projection"] for r in results} >= {"sessions", "context", "registry"}
        assert all(r["ok"] for r in results), results
        assert time.monotonic() - started < 5
    finally:
        stop(worker)


def test_a_second_projector_for_one_copy_is_refused_and_takes_over_after_a_kill(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    env = external_env(tmp_path / "data", nats_server)
    # Given a projector running for the data dir's read-model copy
    first = start_worker(env, tmp_path / "first.log")
    try:
        wait_for_text(tmp_path / "first.log", "projector: stream", first)
        # When a second projector starts for the same data dir
        second = memstream(env, "worker", "projector", expect=1)
        # Then it is refused at start in one line that names the running one
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert "a projector already runs for read-model copy" in lines[0]
        assert f"process {first.pid} on " in lines[0]
        # And the first one carries on: writes are projected once
        script(env, "append", "chat", "50")
        assert json.loads(script(env, "history", "chat")) == [f"m{i}" for i in range(50)]
        # When the first projector is killed (SIGKILL: no clean-up runs)
        stop(first, signal.SIGKILL)
        script(env, "append", "other", "30")
        # Then a new projector may start at once, and resumes where the first one stopped
        third = start_worker(env, tmp_path / "third.log")
        try:
            wait_for_text(tmp_path / "third.log", "projector: stream", third)
            assert json.loads(script(env, "history", "other")) == [f"m{i}" for i in range(30)]
            verified = json_of(env, "projections", "verify")
            assert all(v["ok"] for v in verified), verified
            with sqlite3.connect(tmp_path / "data" / "memstream.db") as db:
                assert db.execute(
                    "SELECT count(*), count(DISTINCT sid || id) FROM messages"
                ).fetchone() == (80, 80)
        finally:
            stop(third)
    finally:
        stop(first)


def test_two_data_dirs_on_one_nats_each_project_the_whole_stream(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    shared = deployment_settings(nats_server.url, tmp_path)
    envs = [
        deployment_env(shared, MEMSTREAM_DATA_DIR=str(tmp_path / name))
        for name in ("host-a", "host-b")
    ]
    stream = shared.stream
    # Given a projector process for each of two data dirs (two hosts) on one NATS stream
    workers = [start_worker(env, tmp_path / f"worker-{i}.log") for i, env in enumerate(envs)]
    try:
        for i, worker in enumerate(workers):
            wait_for_text(tmp_path / f"worker-{i}.log", "projector: stream", worker)
        # When a writer appends 2,000 messages through the first data dir, in 4 processes
        for part in range(4):
            script(envs[0], "append", f"chat-{part}", "500")
        # Then each data dir's read model holds all of them, and verifies equal to the log
        for env in envs:
            for part in range(4):
                history = json.loads(script(env, "history", f"chat-{part}"))
                assert history == [f"m{i}" for i in range(500)]
            verified = json_of(env, "projections", "verify")
            assert all(v["ok"] for v in verified), verified
        # And each status lists both copies, each with its own consumer and no lag
        statuses = [json_of(env, "status") for env in envs]
        ids = [s["copy_id"] for s in statuses]
        assert ids[0] != ids[1]
        for status in statuses:
            copies = {c["copy_id"]: c for c in status["copies"]}
            assert set(copies) == set(ids)
            assert all(c["lag"] == 0 and c["ack_floor"] == 2000 for c in copies.values())
            assert [c["copy_id"] for c in copies.values() if c["local"]] == [status["copy_id"]]
        # When host B is gone for good and host A forgets its copy
        stop(workers[1])
        memstream(envs[0], "projections", "forget-copy", ids[0], expect=1)  # its own: refused
        forgotten = json_of(envs[0], "projections", "forget-copy", ids[1])
        assert forgotten == {"copy_id": ids[1], "deleted_consumers": [f"projector-{ids[1]}"]}
        # Then only host A's copy is left on the stream
        assert [c["copy_id"] for c in json_of(envs[0], "status")["copies"]] == [ids[0]]
        unknown = memstream(envs[0], "projections", "forget-copy", ids[1], expect=1)
        assert unknown.stderr.strip() == (
            f"error: stream {stream!r} has no consumer of read-model copy {ids[1]}"
        )
    finally:
        for worker in workers:
            stop(worker)


def _lags(env: dict[str, str]) -> dict[str, int]:
    """The lag of each projection these projectors run (no analytics worker runs here: its
    projection lags the whole stream, and verify leaves it out)."""
    statuses = json_of(env, "status")["projections"]
    return {p["name"]: p["lag"] for p in statuses if p["name"] != "analytics"}


def test_projectors_of_different_projections_run_apart_and_a_stopped_one_delays_no_other(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    env = external_env(tmp_path / "data", nats_server)
    # Given a projector of the sessions projection and one of the context and registry
    # projections, in two processes on one data dir
    sets = {"sessions": "sessions", "context": "context,registry,memory"}
    logs = {name: tmp_path / f"{name}.log" for name in sets}
    workers = {name: start_worker(env, logs[name], "--projections", sets[name]) for name in sets}
    try:
        for name, worker in workers.items():
            wait_for_text(logs[name], "projector: stream", worker)
        # Then a projector of either, or of both, is refused, naming the one that runs it
        for options in (["--projections", "sessions"], ["--projections", "registry"], []):
            refused = memstream(env, "worker", "projector", *options, expect=1)
            assert "a projector already runs for read-model copy" in refused.stderr
        unknown = memstream(env, "worker", "projector", "--projections", "sessions,nope", expect=1)
        assert "--projections: unknown projection 'nope'" in unknown.stderr
        # And each has its own durable consumer, named after the copy and its projection
        script(env, "refresh", "chat", "Likes green tea")
        assert "Likes green tea" in json.loads(script(env, "freeze", "chat"))
        status = json_of(env, "status")
        copy = status["copy_id"]
        [local] = [c for c in status["copies"] if c["local"]]
        assert local["consumers"] == [
            f"projector-{copy}-context-registry-memory",
            f"projector-{copy}-sessions",
        ]
        # When the context projector is stopped (between its transactions: it is caught up)
        deadline = time.monotonic() + 10
        while any(_lags(env).values()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        freeze(workers["context"])
        try:
            # Then writes are still projected into the sessions read model, read at once
            script(env, "append", "other", "40")
            started = time.monotonic()
            assert json.loads(script(env, "history", "other")) == [f"m{i}" for i in range(40)]
            assert time.monotonic() - started < 5
            # While the context projection lags behind (it is not held up by, nor holds up,
            # the other)
            assert _lags(env) == {
                "sessions": 0,
                "context": 40,
                "registry": 40,
                "memory": 40,
                "vectors": 0,
            }
        finally:
            workers["context"].send_signal(signal.SIGCONT)
        # And once it runs again it catches up, and both verify equal to the log
        deadline = time.monotonic() + 10
        while any(_lags(env).values()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        verified = json_of(env, "projections", "verify")
        assert [v["projection"] for v in verified] == ["sessions", "context", "registry", "memory"]
        assert all(v["ok"] for v in verified), verified
    finally:
        for worker in workers.values():
            stop(worker)
