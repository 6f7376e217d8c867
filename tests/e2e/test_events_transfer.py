"""``memstream events export`` / ``events import`` (issue 16, item 1): a backup restored into
an empty stream on another server holds the same events (ids, command ids, actors, payload
bytes), and the read models built from it equal the source's."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from support.processes import MEMSTREAM, clean_env, json_of, memstream

from memstream.client import Memstream, open_memstream
from memstream.settings import Settings
from memstream.workers.runtime.nats_server import NatsServerProcess

PROJECTIONS = ("sessions", "context", "registry")


@pytest.fixture
def second_server(tmp_path: Path) -> Iterator[NatsServerProcess]:
    """Another cluster: its own nats-server and store."""
    server = NatsServerProcess.start(tmp_path / "nats-b", log_path=tmp_path / "nats-b.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def restored_env(tmp_path: Path, second_server: NatsServerProcess) -> dict[str, str]:
    """The CLI's environment for an empty stream on the other cluster, with its own data dir."""
    return clean_env(
        MEMSTREAM_DATA_DIR=str(tmp_path / "b"),
        MEMSTREAM_NATS_URL=second_server.url,
        MEMSTREAM_STREAM="RESTORED",
    )


@pytest.fixture
async def source(
    tmp_path: Path, nats_server: NatsServerProcess
) -> AsyncIterator[tuple[Memstream, dict[str, str]]]:
    """A platform with sessions (a branch, a block, a registration) in namespaces ``default``
    and ``team``, and the CLI's environment for it."""
    stream = "A" + uuid.uuid4().hex[:12].upper()
    data = tmp_path / "a"
    settings = Settings(data_dir=data, nats_url=nats_server.url, stream=stream, actor="ops@a")
    ms = await open_memstream(settings, workers=True)
    env = clean_env(
        MEMSTREAM_DATA_DIR=str(data), MEMSTREAM_NATS_URL=nats_server.url, MEMSTREAM_STREAM=stream
    )
    try:
        await ms.session_manager().create("Trip", session_id="trip")
        trip = ms.session("trip", actor="agent-7")
        await trip.append_message({"id": "m1", "role": "user", "content": "Ferry to Lisbon? ü"})
        await trip.append_message({"id": "m2", "role": "assistant", "content": "Take the 8:15"})
        await trip.append_message(
            {"id": "m3", "role": "assistant", "content": "Or the bus"}, parent_id="m1"
        )
        await trip.add_context("memory")
        await trip.replace_context_block("memory", "Likes ferries")
        team = await open_memstream(replace(settings, namespace="team"), workers=False)
        try:
            await team.session("notes").append_message({"id": "n1", "role": "user", "content": "x"})
        finally:
            await team.close()
        await ms.session("other").append_message({"role": "user", "content": "unrelated"})
        await ms.wait_for("sessions")
        yield ms, env
    finally:
        await ms.close()


async def _stored(url: str, stream: str) -> list[dict[str, Any]]:
    """Every message of ``stream`` as stored: seq, subject, headers, payload bytes."""
    client = Client()
    await client.connect(url)
    try:
        js = client.jetstream()
        last = (await js.stream_info(stream)).state.last_seq
        messages = []
        for seq in range(1, last + 1):
            msg = await js.get_msg(stream, seq)
            messages.append(
                {
                    "seq": msg.seq,
                    "subject": msg.subject,
                    "headers": {
                        k: v
                        for k, v in (msg.headers or {}).items()
                        # (concurrency guards and batch framing are the transport's, not the
                        # event's: an import sends neither again)
                        if not k.startswith(("Nats-Expected-", "Nats-Batch-"))
                    },
                    "data": msg.data,
                }
            )
        return messages
    finally:
        await client.close()


def _checksums(env: dict[str, str]) -> dict[str, str]:
    report = json_of(env, "projections", "verify", *PROJECTIONS)
    assert all(row["ok"] for row in report), report
    return {row["projection"]: row["live"] for row in report}


async def test_a_backup_restores_into_another_cluster(
    source: tuple[Memstream, dict[str, str]],
    second_server: NatsServerProcess,
    restored_env: dict[str, str],
    tmp_path: Path,
) -> None:
    ms, env = source
    backup = tmp_path / "backup.jsonl"

    def work() -> tuple[Any, Any, Any, dict[str, str], dict[str, str]]:
        memstream(env, "events", "export", "-o", str(backup))
        imported = json_of(restored_env, "events", "import", str(backup))
        again = memstream(restored_env, "events", "import", str(backup), expect=1)
        # (no projector runs against the second cluster: build its read models from its log)
        memstream(restored_env, "projections", "rebuild")
        history = json_of(restored_env, "sessions", "history", "trip", "--leaf", "m3")
        return imported, again, history, _checksums(env), _checksums(restored_env)

    imported, again, history, before, after = await asyncio.to_thread(work)
    original = await _stored(ms.settings.nats_url or "", ms.settings.stream)
    copy = await _stored(second_server.url, "RESTORED")
    lines = backup.read_text(encoding="utf-8").splitlines()

    assert backup.stat().st_mode & 0o777 == 0o600
    assert len(lines) == len(original) >= 7
    assert imported == {"stored": len(original), "duplicates": 0, "last_seq": len(original)}
    # The same events, byte for byte: ids, command ids, actors and payloads.
    assert copy == original
    assert {m["headers"]["Ms-Actor"] for m in copy} == {"ops@a", "agent-7"}
    assert "holds" in again.stderr
    assert "--force" in again.stderr
    assert [m["id"] for m in history] == ["m1", "m3"]
    # Read models built from the restored log equal the source's.
    assert after == before


async def test_import_again_within_the_window_stores_nothing_twice(
    source: tuple[Memstream, dict[str, str]], tmp_path: Path
) -> None:
    ms, env = source
    backup = tmp_path / "backup.jsonl"
    last = await ms.core.log.stream_last_seq()

    def work() -> Any:
        memstream(env, "events", "export", "-o", str(backup))
        return json_of(env, "events", "import", "--force", str(backup))

    result = await asyncio.to_thread(work)
    assert result == {"stored": 0, "duplicates": last, "last_seq": last}
    assert await ms.core.log.stream_last_seq() == last


async def test_a_bad_line_publishes_nothing(
    source: tuple[Memstream, dict[str, str]], restored_env: dict[str, str], tmp_path: Path
) -> None:
    _, env = source
    backup = tmp_path / "backup.jsonl"
    memstream(env, "events", "export", "-o", str(backup))
    lines = backup.read_text(encoding="utf-8").splitlines()
    cases = {
        "not JSON": "{broken",
        "not <prefix>.<namespace>.<kind>.<id>": json.dumps(
            {**json.loads(lines[1]), "subject": "ms.a b.session.x"}
        ),
        "no Nats-Msg-Id": json.dumps({**json.loads(lines[1]), "nats_headers": {"Ms-Schema": "1"}}),
        "not a valid NATS header": json.dumps(
            {**json.loads(lines[1]), "nats_headers": {"Bad\nName": "x", "Nats-Msg-Id": "1"}}
        ),
    }
    for reason, bad in cases.items():
        broken = tmp_path / "broken.jsonl"
        broken.write_text("\n".join([*lines[:-1], bad, lines[-1]]) + "\n", encoding="utf-8")
        failed = await asyncio.to_thread(
            memstream, restored_env, "events", "import", str(broken), expect=1
        )
        assert f"import line {len(lines)}" in failed.stderr, failed.stderr
        assert reason in failed.stderr, failed.stderr
    status = await asyncio.to_thread(json_of, restored_env, "status")
    assert status["stream"]["messages"] == 0


async def test_export_filters_by_namespace_aggregate_and_id(
    source: tuple[Memstream, dict[str, str]],
) -> None:
    _, env = source

    def export(*filters: str) -> list[dict[str, Any]]:
        out = memstream(env, "events", "export", *filters).stdout
        return [json.loads(line) for line in out.splitlines()]

    everything = await asyncio.to_thread(export)
    trip = await asyncio.to_thread(export, "--aggregate", "session", "--id", "trip")
    registry = await asyncio.to_thread(export, "--namespace", "default", "--aggregate", "registry")
    both = await asyncio.to_thread(
        memstream, env, "events", "export", "--subject", "ms.>", "--id", "x", expect=1
    )
    bad_kind = await asyncio.to_thread(
        memstream, env, "events", "export", "--aggregate", "sessions", expect=1
    )
    assert {e["subject"] for e in trip} == {"ms.default.session.trip"}
    assert [e["payload"]["message"]["id"] for e in trip] == ["m1", "m2", "m3"]
    assert [e["type"] for e in registry] == ["registry.session_created"]
    assert len(everything) > len(trip) + len(registry)
    team = await asyncio.to_thread(export, "--namespace", "team")
    assert [e["subject"] for e in team] == ["ms.team.session.notes"]
    assert all("Nats-Msg-Id" in e["nats_headers"] for e in everything)
    assert "cannot be combined" in both.stderr
    assert "'sessions' is not one of session, block" in bad_kind.stderr


async def test_export_piped_into_import_of_another_cluster(
    source: tuple[Memstream, dict[str, str]],
    second_server: NatsServerProcess,
    restored_env: dict[str, str],
) -> None:
    # `-` is standard output and input: events export -o - | events import -
    ms, env = source

    def pipe() -> tuple[subprocess.CompletedProcess[bytes], subprocess.CompletedProcess[bytes]]:
        exporter = subprocess.Popen(
            [MEMSTREAM, "events", "export", "-o", "-"], env=env, stdout=subprocess.PIPE
        )
        importer = subprocess.run(
            [MEMSTREAM, "events", "import", "-", "--json"],
            env=restored_env,
            stdin=exporter.stdout,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert exporter.stdout is not None
        exporter.stdout.close()
        exported = exporter.wait(60)
        return subprocess.CompletedProcess(exporter.args, exported), importer

    exported, imported = await asyncio.to_thread(pipe)
    original = await _stored(ms.settings.nats_url or "", ms.settings.stream)
    assert exported.returncode == 0
    assert imported.returncode == 0, imported.stderr.decode()
    assert json.loads(imported.stdout) == {
        "stored": len(original),
        "duplicates": 0,
        "last_seq": len(original),
    }
    assert await _stored(second_server.url, "RESTORED") == original
    # A bad line on stdin is refused whole, as in a file: nothing published.
    refused = await asyncio.to_thread(
        subprocess.run,
        [MEMSTREAM, "events", "import", "-", "--force"],
        env=restored_env,
        input=b'{"seq": 1}\n',
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode != 0
    assert b"Traceback" not in refused.stderr
    assert len(await _stored(second_server.url, "RESTORED")) == len(original)
