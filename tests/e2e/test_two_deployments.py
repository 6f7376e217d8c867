"""Two memstream deployments on one nats-server, each with its own stream and subject prefix
(``MEMSTREAM_STREAM``, ``MEMSTREAM_SUBJECT_PREFIX``): their writes, read models, worker
processes and CLI stay apart."""

from __future__ import annotations

import json
from pathlib import Path

import nats
import pytest
from support.deployment import deployment_env, deployment_settings
from support.processes import json_of, memstream, start_worker, stop, wait_for_text

from memstream.client import open_memstream
from memstream.domain.errors import InvalidInputError
from memstream.settings import Settings
from memstream.workers.runtime.nats_server import NatsServerProcess


async def _stored_subjects(url: str, stream: str) -> list[str]:
    """The subjects of every message ``stream`` holds, and the stream's own subject filter."""
    client = await nats.connect(url)
    try:
        js = client.jetstream()
        info = await js.stream_info(stream)
        subjects = list(info.config.subjects or [])
        for seq in range(1, info.state.last_seq + 1):
            subjects.append((await js.get_msg(stream, seq)).subject)
        return subjects
    finally:
        await client.close()


async def test_two_deployments_on_one_server_keep_apart(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    # Given deployment A (a client projecting in-process) and deployment B (a projector in
    # its own process, fed by the CLI) on one nats-server, each with its stream and prefix
    a = deployment_settings(nats_server.url, tmp_path / "a")
    b = deployment_settings(nats_server.url, tmp_path / "b")
    assert (a.stream, a.subject_prefix) != (b.stream, b.subject_prefix)
    b_env = deployment_env(b)
    worker = start_worker(b_env, tmp_path / "b-worker.log", "--linger", "0")
    ms = await open_memstream(a, workers=True)
    try:
        wait_for_text(tmp_path / "b-worker.log", "FastStream app started", worker)
        # When each writes a session of the same name
        await ms.session("trip").append_message({"id": "a1", "role": "user", "content": "ferry"})
        memstream(b_env, "append", "trip", "--id", "b1", "--root", "--text", "tram 28")
        memstream(b_env, "append", "trip", "--id", "b2", "--parent", "b1", "--text", "tram 15")
        await ms.wait_for("sessions")

        # Then each deployment's read models hold its own messages only
        assert [m["id"] for m in await ms.session("trip").get_history()] == ["a1"]
        history = json_of(b_env, "sessions", "history", "trip")
        assert [m["id"] for m in history] == ["b1", "b2"]
        # And each stream takes and holds only its own prefix's subjects
        for settings, count in ((a, 1), (b, 2)):
            subjects = await _stored_subjects(nats_server.url, settings.stream)
            assert subjects[0] == f"{settings.subject_prefix}.>"
            assert subjects[1:] == [f"{settings.subject_prefix}.default.session.trip"] * count
        # And B's CLI exports B's events under B's prefix, and A's status names A's stream
        exported = memstream(b_env, "events", "export").stdout.splitlines()
        assert [json.loads(line)["payload"]["message"]["id"] for line in exported] == [
            "b1",
            "b2",
        ]
        status = json_of(deployment_env(a), "status")
        assert status["stream"]["name"] == a.stream
        assert status["stream"]["messages"] == 1
        # And B's verify holds against B's log alone
        verified = json_of(b_env, "projections", "verify")
        assert all(row["ok"] for row in verified), verified
    finally:
        await ms.close()
        assert stop(worker) == 0, (tmp_path / "b-worker.log").read_text()


def test_the_subject_prefix_is_read_from_the_environment_and_checked() -> None:
    # Given MEMSTREAM_SUBJECT_PREFIX, Then the settings carry it (default: "ms")
    assert Settings.from_env({}).subject_prefix == "ms"
    assert Settings.from_env({"MEMSTREAM_SUBJECT_PREFIX": "team-b"}).subject_prefix == "team-b"
    # And a prefix that is not one subject token is refused, naming it
    for bad in ("a.b", "a>", "*", "x" * 33):
        with pytest.raises(InvalidInputError, match="subject_prefix"):
            Settings.from_env({"MEMSTREAM_SUBJECT_PREFIX": bad})
