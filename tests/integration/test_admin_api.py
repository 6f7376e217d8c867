"""The admin operations from Python (issue 37, item 4): what the CLI does, as documented
functions of a connected client, which the CLI calls."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pytest

from memstream import admin
from memstream.client import Memstream, open_memstream
from memstream.domain.errors import NotFoundError
from memstream.settings import Settings
from memstream.workers.runtime.nats_server import NatsServerProcess


async def _write(ms: Memstream) -> None:
    await ms.session_manager().create("Trip", session_id="trip")
    trip = ms.session("trip")
    await trip.append_message({"id": "m1", "role": "user", "content": "Ferry to Lisbon?"})
    await trip.append_message({"id": "m2", "role": "assistant", "content": "At 8:15"})
    await ms.wait_for("sessions")


async def test_status_projections_verify_and_doctor(ms: Memstream) -> None:
    await _write(ms)
    report = await admin.status(ms)
    assert report.problems == []
    assert report.stream.last_seq >= 3
    statuses = {s.name: s for s in await admin.projections(ms)}
    assert statuses["sessions"].lag == 0
    check = await admin.verify(ms, ["sessions", "registry"])
    assert {r.projection for r in check.results} == {"sessions", "registry"}
    assert all(r.ok for r in check.results)
    assert check.different == []
    findings = await admin.doctor(ms)
    assert findings
    assert {f.check for f in findings} >= {"dead letters"}, [f.check for f in findings]


async def test_trails_events_overview_and_time_travel(ms: Memstream) -> None:
    await _write(ms)
    trail = await admin.session_trail(ms, "trip")
    assert [e.type for e in trail].count("session.message_appended") == 2
    first = await admin.event_at(ms, 1)
    assert first.seq == 1
    last = await ms.core.log.stream_last_seq()
    with pytest.raises(NotFoundError, match=f"the log's last sequence is {last}"):
        await admin.event_at(ms, last + 5)
    overview = await admin.session_overview(ms, "trip")
    assert overview["messages"] == 2
    with pytest.raises(NotFoundError, match="session 'nope' not found"):
        await admin.session_overview(ms, "nope")
    first_message = next(e.seq for e in trail if e.type == "session.message_appended")
    past = await admin.as_of(ms, first_message)
    try:
        assert past.seq == first_message
        assert len(past.sessions.history(ms.namespace, "trip", None)) == 1
    finally:
        past.close()
    dry = await admin.purge(ms, "0s", dry_run=True)
    assert dry.records == []  # nothing deleted, nothing to erase


async def test_export_then_import_into_another_stream(
    ms: Memstream, settings: Settings, tmp_path: Path
) -> None:
    await _write(ms)
    buffer = io.StringIO()
    exported = await admin.export_events(ms, admin.EventQuery(), buffer)
    assert exported == await ms.core.log.stream_last_seq()
    backup = tmp_path / "backup.jsonl"
    backup.write_text(buffer.getvalue(), encoding="utf-8")
    # Another cluster: its own server (a stream owns its subjects on a server).
    server = NatsServerProcess.start(tmp_path / "nats-b", log_path=tmp_path / "nats-b.log")
    other = await open_memstream(
        replace(settings, nats_url=server.url, data_dir=tmp_path / "b"), workers=True
    )
    try:
        result = await admin.import_events(other, backup)
        assert (result.stored, result.duplicates) == (exported, 0)
        await other.sync("sessions")
        history = await other.session("trip").get_history()
        assert [m["id"] for m in history] == ["m1", "m2"]
    finally:
        await other.close()
        server.stop()
