"""``admin purge`` on a real nats-server, on both read-model backends: the events of sessions
and profiles deleted longer ago than the grace period leave the stream, the purge is recorded
without personal data, and every read model still equals one rebuilt from the purged log."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js import api
from support.messages import msg
from support.read_models import EMBEDDED_VERIFIED

from memstream.client import Memstream, open_memstream
from memstream.domain.errors import InvalidInputError, UnavailableError
from memstream.projections.sqlite.store import SqliteCopy
from memstream.settings import Settings
from memstream.workers import dead_letters as dead_letters_module
from memstream.workers.admin import purge as purge_module
from memstream.workers.admin.audit import EventQuery, read_events
from memstream.workers.admin.event_transfer import import_events
from memstream.workers.admin.purge import plan_purge, purge
from memstream.workers.admin.rebuild import rebuild, verify
from memstream.workers.log.codec import CommandMeta
from memstream.workers.log.subjects import logical_subject
from memstream.workers.runtime.nats_server import NatsServerProcess

pytestmark = pytest.mark.both_backends

WHEN = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def conversation(*texts: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text, "timestamp": WHEN} for text in texts]


async def subject_events(ms: Memstream, kind: str, identifier: str) -> list[Any]:
    subject = f"{ms.core.log.subject_prefix}.{ms.namespace}.{kind}.{identifier}"
    return [entry async for entry in ms.core.log.read_subject(subject)]


def profile_subject(ms: Memstream, name: str) -> str:
    """The subject of profile ``name`` in namespace ``default``."""
    return f"{ms.core.log.subject_prefix}.default.profile.{name}"


async def settled(ms: Memstream) -> None:
    for projection in EMBEDDED_VERIFIED:
        await ms.wait_for(projection)


async def verified(ms: Memstream) -> None:
    results = await verify(ms.core.log, ms.core.reads.copy)
    assert [r.projection for r in results] == [*EMBEDDED_VERIFIED]
    assert all(r.ok for r in results), [r for r in results if not r.ok]


async def stored_anywhere(store: Path, needles: list[bytes], settle: float = 5.0) -> list[str]:
    """The files of a nats-server store dir that hold any of ``needles`` (the server writes
    its block files asynchronously: polled for up to ``settle`` seconds until none does)."""
    deadline = time.monotonic() + settle
    while True:
        found = await asyncio.to_thread(_files_holding, store, needles)
        if not found or time.monotonic() >= deadline:
            return found
        await asyncio.sleep(0.1)


def _files_holding(store: Path, needles: list[bytes]) -> list[str]:
    return [
        str(path.relative_to(store))
        for path in store.rglob("*")
        if path.is_file() and any(n in path.read_bytes() for n in needles)
    ]


def totals(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The stats rows summed per (model, source)."""
    sums: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        target = sums.setdefault(
            (row["model"], row["source"]),
            {"sessions": 0, "messages": 0, "input_tokens": 0, "ingested_messages": 0},
        )
        for name in target:
            target[name] += row[name]
    return sums


@pytest.mark.own_nats_server  # it reads the server's store files: this test's stream's alone
async def test_purge_erases_deleted_sessions_and_profiles_and_verify_holds(
    ms: Memstream, nats_server: NatsServerProcess
) -> None:
    manager = ms.session_manager().with_context("memory", description="Facts").with_cached_prompt()
    doomed = (await manager.create("Doomed", model="gpt-x", source="cli"))["id"]
    await manager.append(doomed, msg("m0", "a secret plan"))
    await manager.append(doomed, msg("m1", "more of the secret"))
    await manager.get_session(doomed).replace_context_block("memory", "likes tea")
    await manager.get_session(doomed).refresh_system_prompt()
    await manager.add_usage(doomed, 100, 20, 0.5)
    kept = (await manager.create("Kept", model="gpt-x", source="cli"))["id"]
    await manager.append(kept, msg("k0", "an ordinary day"))
    # A profile that stays, with a conversation of the doomed session (counted for gpt-x)
    gina = await ms.agent_memory("default").get_profile("gina")
    await gina.ingest(conversation("I moved to Lisbon in 2021."), session_id=doomed)
    temp = await ms.agent_memory("default").get_profile("temp")
    await temp.ingest(conversation("My passport number is X123."), session_id=kept)
    await ms.agent_memory("default").delete_profile("temp")
    await manager.delete(doomed)
    await settled(ms)
    before = totals(await ms.stats())
    assert before[("gpt-x", "cli")]["sessions"] == 2
    last = await ms.core.log.stream_last_seq()

    # A dry run names what a purge would erase and changes nothing
    plan = await purge(ms.core.log, "0s", dry_run=True)
    assert [(u.kind, u.identifier) for u in plan.units] == [
        ("profile", "temp"),
        ("session", doomed),
    ]
    assert plan.events > 0
    assert plan.erased == 0
    assert plan.records == []
    assert await ms.core.log.stream_last_seq() == last

    report = await purge(ms.core.log, "0s")
    assert report.erased == plan.events
    assert len(report.records) == 1
    assert report.records[0] == last + 1
    # The events are gone from the stream: the session's, its registration's, its block's, and
    # the deleted profile's; the others stay
    assert await subject_events(ms, "session", doomed) == []
    assert await subject_events(ms, "registry", doomed) == []
    assert await subject_events(ms, "profile", "temp") == []
    assert len(await subject_events(ms, "session", kept)) == 1
    assert len(await subject_events(ms, "profile", "gina")) >= 2
    stream = json.dumps(
        [
            e.payload.decode()
            async for e in ms.core.log.read_subject(f"{ms.core.log.subject_prefix}.>")
        ]
    )
    assert "secret" not in stream
    assert "passport" not in stream
    assert "likes tea" not in stream
    # And not only from the stream's index: from the server's files (a purge by subject alone
    # leaves the bytes in the store's block files)
    assert await stored_anywhere(nats_server.store_dir, [b"a secret plan", b"X123"]) == []
    assert await stored_anywhere(nats_server.store_dir, [b"an ordinary day"]) != []
    # The purge is recorded with sequences and counts only
    (record,) = await subject_events(ms, "purge", "log")
    payload = json.loads(record.payload)
    assert payload["type"] == "purge.events_purged"
    assert payload["events"] == report.erased
    assert payload["sessions"] == 1
    assert payload["profiles"] == 1
    assert payload["subjects"] == len(payload["sequences"])
    assert doomed not in record.payload.decode()
    assert "temp" not in record.payload.decode()
    assert record.headers["Ms-Actor"]

    # Every read model equals one rebuilt from the purged log, the vectors too
    await settled(ms)
    await verified(ms)
    (vectors,) = await verify(
        ms.core.log, ms.core.reads.copy, ["vectors"], encoder=ms.core.recall.encoder
    )
    assert vectors.ok, vectors
    # The statistics count what the log still holds: the doomed session's messages and usage
    # are gone, and gina's conversation of it counts as outside any registered session
    after = totals(await ms.stats())
    assert after[("gpt-x", "cli")] == {
        "sessions": 1,
        "messages": 1,
        "input_tokens": 0,
        "ingested_messages": 0,
    }
    assert after[("", "")]["ingested_messages"] == 1
    # Nothing is left to purge, and the session id can be used again
    assert (await plan_purge(ms.core.log, "0s")).units == []
    await ms.session(doomed).append_message(msg("n0", "a fresh start"))
    assert [m["id"] for m in await ms.session(doomed).get_history()] == ["n0"]
    await settled(ms)
    await verified(ms)


async def purge_stopping_after_its_record(ms: Memstream, monkeypatch: pytest.MonkeyPatch) -> None:
    """A purge that loses NATS once it has recorded the purge, before it erases anything."""

    async def lost(*_: object) -> int:
        raise UnavailableError("NATS went away")

    monkeypatch.setattr(purge_module, "_erase_events", lost)
    monkeypatch.setattr(purge_module, "_purge_subject", lost)
    with pytest.raises(UnavailableError):
        await purge(ms.core.log, "0s")


async def profiles_with_unreadable_events(ms: Memstream, *names: str) -> None:
    """Profiles each with an event no projection can read among its events (dead letters that
    name the profile and keep what the error said)."""
    memory = ms.agent_memory("default")
    for name in names:
        profile = await memory.get_profile(name)
        await profile.remember(f"{name} keeps a passport number X123")
        await ms.core.log.js.publish(
            f"{ms.core.log.subject_prefix}.default.profile.{name}",
            b"\xff not json: passport X123",
            headers={"Nats-Msg-Id": f"junk-{name}"},
        )
        await profile.remember(f"{name} likes trams")


async def erased_letters_gone(ms: Memstream, kept: set[str], settle: float = 10.0) -> set[str]:
    """The subjects of the copy's dead letters, once only ``kept`` ones are left (the workers
    forget the others as they apply the purge record: polled for up to ``settle`` seconds)."""
    deadline = time.monotonic() + settle
    while True:
        subjects = {
            logical_subject(str(d["subject"])) for d in ms.core.reads.read_models.dead_letters()
        }
        if subjects <= kept or time.monotonic() >= deadline:
            return subjects
        await asyncio.sleep(0.05)


async def test_purge_forgets_the_dead_letters_of_what_it_erases(ms: Memstream) -> None:
    # Given two profiles, each with an event no projection can read among its events
    await profiles_with_unreadable_events(ms, "temp", "gina")
    # ... and one of them deleted
    await ms.agent_memory("default").delete_profile("temp")
    await settled(ms)
    letters = ms.core.reads.read_models.dead_letters()
    subjects = {logical_subject(str(d["subject"])) for d in letters}
    assert subjects == {profile_subject(ms, "temp"), profile_subject(ms, "gina")}
    assert {d["projection"] for d in letters} >= {"memory", "analytics"}

    # When the deleted profile is purged
    report = await purge(ms.core.log, "0s")
    assert [(u.kind, u.identifier) for u in report.units] == [("profile", "temp")]
    assert await subject_events(ms, "profile", "temp") == []

    # Then every worker forgets its dead letters of the erased events, and keeps the others
    gina = {profile_subject(ms, "gina")}
    assert await erased_letters_gone(ms, gina) == gina
    kept = ms.core.reads.read_models.dead_letters()
    assert {d["projection"] for d in kept} == {d["projection"] for d in letters}
    assert len(kept) * 2 == len(letters)
    await settled(ms)
    await verified(ms)


async def test_a_purge_record_makes_copies_forget_dead_letters_before_the_erasure(
    ms: Memstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a deleted profile with an unreadable event among its events, and a kept one
    await profiles_with_unreadable_events(ms, "temp", "gina")
    await ms.agent_memory("default").delete_profile("temp")
    await settled(ms)

    # When a purge records its erasure and stops before erasing anything
    await purge_stopping_after_its_record(ms, monkeypatch)
    assert len(await subject_events(ms, "profile", "temp")) > 0
    # Then the live copy forgets the dead letters of the events being erased already
    gina = {profile_subject(ms, "gina")}
    assert await erased_letters_gone(ms, gina) == gina
    # And so does a copy rebuilt from the log meanwhile (it replays them, then the record)
    copy = SqliteCopy(tmp_path / "rebuilt.db")
    await rebuild(ms.core.log, copy)
    store = copy.store()
    try:
        rebuilt = store.dead_letters()
    finally:
        store.close()
    assert {logical_subject(str(d["subject"])) for d in rebuilt} == gina
    assert {d["projection"] for d in rebuilt} >= {"memory", "analytics"}


async def test_a_worker_that_cannot_ask_the_stream_keeps_its_dead_letters_and_goes_on(
    ms: Memstream, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    await profiles_with_unreadable_events(ms, "temp")
    await ms.agent_memory("default").delete_profile("temp")
    await settled(ms)

    # Given the workers cannot ask the stream about their dead letters when a purge record comes
    async def unavailable(*_: object) -> list[tuple[str, int]]:
        raise UnavailableError("NATS went away")

    monkeypatch.setattr(dead_letters_module, "erased_dead_letters", unavailable)
    purged = await purge(ms.core.log, "0s")
    assert [u.identifier for u in purged.units] == ["temp"]
    # Then they say so, keep the letters, and go on projecting
    await settled(ms)
    await ms.session("after").append_message(msg("a0", "still projected"))
    assert [m["id"] for m in await ms.session("after").get_history()] == ["a0"]
    deadline = time.monotonic() + 10  # (a record applied for a reader here: at its delivery)
    while "dead letters of events a purge erased are kept" not in caplog.text:
        assert time.monotonic() < deadline, caplog.text[-2000:]
        await asyncio.sleep(0.05)
    assert {
        logical_subject(str(d["subject"])) for d in ms.core.reads.read_models.dead_letters()
    } == {profile_subject(ms, "temp")}


async def test_purge_keeps_the_grace_period_and_what_was_written_again(ms: Memstream) -> None:
    manager = ms.session_manager()
    recent = (await manager.create("Recent"))["id"]
    await manager.append(recent, msg("m0", "hello"))
    await manager.delete(recent)
    revived = (await manager.create("Revived"))["id"]
    await manager.append(revived, msg("m0", "hello"))
    await manager.delete(revived)
    # Written again after its deletion, through the session API (no registration)
    await ms.session(revived).append_message(msg("m1", "still here"))
    # And one whose subject got a message that is no event at all
    poisoned = (await manager.create("Poisoned"))["id"]
    await manager.delete(poisoned)
    junk = await ms.core.log.js.publish(
        f"{ms.core.log.subject_prefix}.default.session.{poisoned}",
        b"\xff not json",
        headers={"Nats-Msg-Id": "junk-1"},
    )
    await settled(ms)
    last = await ms.core.log.stream_last_seq()

    # Deleted just now: inside a one-hour grace period
    assert (await purge(ms.core.log, "1h")).units == []
    # An hour later, the revived session is skipped with its reason; the other goes
    report = await purge(ms.core.log, "1h", now=datetime.now(UTC) + timedelta(hours=2))
    assert [u.identifier for u in report.units] == [recent]
    assert sorted((s.identifier, s.reason) for s in report.skipped) == sorted(
        [
            (revived, "it was written again after its deletion"),
            (poisoned, f"its event at sequence {junk.seq} cannot be read"),
        ]
    )
    assert await subject_events(ms, "session", recent) == []
    assert len(await subject_events(ms, "session", revived)) > 0
    assert await ms.core.log.stream_last_seq() == last + 1
    assert [m["id"] for m in await ms.session(revived).get_history()] == ["m1"]
    await settled(ms)
    await verified(ms)


async def test_a_purge_that_stops_after_its_record_is_finished_by_the_next(
    ms: Memstream, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = ms.session_manager()
    doomed = (await manager.create("Doomed", model="gpt-x"))["id"]
    await manager.append(doomed, msg("m0", "a secret"))
    await manager.delete(doomed)
    # And one in a second namespace: each namespace records its own purge
    team = await open_memstream(replace(settings, namespace="team"), workers=False)
    try:
        other = (await team.session_manager().create("Other"))["id"]
        await team.session_manager().append(other, msg("t0", "team secret"))
        await team.session_manager().delete(other)
    finally:
        await team.close()

    # When the process loses NATS after recording the purge, before erasing anything
    await purge_stopping_after_its_record(ms, monkeypatch)
    assert len(await subject_events(ms, "purge", "log")) == 1
    assert len(await subject_events(ms, "session", doomed)) > 0
    # Then the read models still equal a rebuild (which replays the events, then the record)
    await settled(ms)
    await verified(ms)
    # And the next run erases both namespaces' sessions, recording each namespace's purge
    # (one command each, correlated by the run's)
    monkeypatch.undo()
    run = CommandMeta(actor="ops@cron")
    report = await purge(ms.core.log, "0s", meta=run)
    assert [(u.namespace, u.identifier) for u in report.units] == [
        ("default", doomed),
        ("team", other),
    ]
    assert len(report.records) == 2
    assert await subject_events(ms, "session", doomed) == []
    assert await ms.core.log.last_seq(f"{ms.core.log.subject_prefix}.team.session.{other}") == 0
    assert len(await subject_events(ms, "purge", "log")) == 2
    (team_record,) = [
        e async for e in ms.core.log.read_subject(f"{ms.core.log.subject_prefix}.team.purge.log")
    ]
    (_, record) = await subject_events(ms, "purge", "log")  # (the first: the stopped run)
    assert team_record.seq == report.records[1]
    for entry in (record, team_record):
        assert entry.headers["Ms-Actor"] == "ops@cron"
        assert entry.headers["Ms-Correlation-Id"] == run.command_id
    await settled(ms)
    await verified(ms)


async def export(ms: Memstream, path: Path) -> None:
    with path.open("w") as out:
        async for event in read_events(ms.core.log, EventQuery()):
            out.write(json.dumps(event.export_json()) + "\n")


@contextlib.asynccontextmanager
async def elsewhere(settings: Settings, root: Path) -> AsyncIterator[Memstream]:
    """A client with workers of an empty stream on another nats-server, its read models in
    SQLite under ``root`` (whatever the source's backend)."""
    server = NatsServerProcess.start(root / "nats", log_path=root / "nats.log")
    try:
        client = await open_memstream(
            replace(settings, data_dir=root / "data", nats_url=server.url, database_url=None),
            workers=True,
        )
        try:
            yield client
        finally:
            await client.close()
    finally:
        server.stop()


async def test_an_import_renumbers_what_purge_records_name(
    ms: Memstream, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A source whose purge was recorded but never carried out (NATS lost in between)
    manager = ms.session_manager()
    doomed = (await manager.create("Doomed"))["id"]
    await manager.append(doomed, msg("m0", "a secret"))
    await manager.delete(doomed)
    kept = (await manager.create("Kept"))["id"]
    await manager.append_all(kept, [msg("k0", "one"), msg("k1", "two")])
    await purge_stopping_after_its_record(ms, monkeypatch)
    monkeypatch.undo()
    backup = tmp_path / "backup.jsonl"
    await export(ms, backup)

    async with elsewhere(settings, tmp_path / "b") as target:
        # Restored into another stream, with its own numbering (it starts with an event of
        # its own), the record names the same events by their new sequences
        await target.session("before").append_messages([msg("b0"), msg("b1")])
        await import_events(target.core.log, backup, force=True)
        (record,) = await subject_events(target, "purge", "log")
        named = json.loads(record.payload)["sequences"]
        subjects = [f"registry.{doomed}", f"session.{doomed}"]
        assert named == sorted(
            [
                await target.core.log.last_seq(f"{target.core.log.subject_prefix}.default.{s}")
                for s in subjects
            ]
        )
        await settled(target)
        await verified(target)
        assert [m["id"] for m in await target.session(kept).get_history()] == ["k0", "k1"]
        # And a purge there erases them, recording them again under their new sequences
        report = await purge(target.core.log, "0s")
        assert [u.identifier for u in report.units] == [doomed]
        await settled(target)
        await verified(target)
    # Exported after the purge was carried out, the record names nothing that was imported
    await purge(ms.core.log, "0s")
    await export(ms, backup)
    async with elsewhere(settings, tmp_path / "c") as third:
        await import_events(third.core.log, backup)
        records = await subject_events(third, "purge", "log")
        assert [json.loads(r.payload)["sequences"] for r in records] == [[], []]
        await settled(third)
        await verified(third)


async def test_a_stream_that_denies_deletes_is_purged_and_says_what_stays_on_disk(
    settings: Settings, nats_server: NatsServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a stream created by an older memstream, which denied message deletes (a stream
    # keeps that for good)
    client = await nats.connect(nats_server.url)
    try:
        await client.jetstream().add_stream(
            api.StreamConfig(
                name=settings.stream, subjects=[f"{settings.subject_prefix}.>"], deny_delete=True
            )
        )
    finally:
        await client.close()
    # (made here without partitions, whatever MEMSTREAM_TEST_PARTITIONS says)
    ms = await open_memstream(settings.with_(stream_partitions=0), workers=True)
    try:
        manager = ms.session_manager()
        doomed = (await manager.create("Doomed"))["id"]
        await manager.append(doomed, msg("m0", "a secret"))
        await manager.delete(doomed)
        await settled(ms)
        # When it is purged
        report = await purge(ms.core.log, "0s")
        # Then the events leave the stream, and the report and the log say that their bytes
        # were not overwritten, and how to erase them for good
        assert [u.identifier for u in report.units] == [doomed]
        assert report.erased == report.events > 0
        assert report.deletes_denied
        assert report.overwritten == 0
        assert report.as_json()["deletes_denied"] is True
        assert await subject_events(ms, "session", doomed) == []
        assert "denies message deletes" in caplog.text
        assert "events export" in caplog.text
        await settled(ms)
        await verified(ms)
    finally:
        await ms.close()


async def test_an_event_erased_already_is_not_counted_again(ms: Memstream) -> None:
    await ms.session("s").append_message(msg("m0", "gone"))
    seq = ms.core.ryw.last_write_seq
    assert await purge_module._erase_one(ms.core.log, seq) == 1
    assert await purge_module._erase_one(ms.core.log, seq) == 0  # (a purge run again)
    with pytest.raises(UnavailableError, match="refused to erase"):
        await purge_module._erase_one(ms.core.log, seq + 1000)  # past the stream's end


async def test_a_copy_behind_the_erasure_is_waited_for_then_named(
    ms: Memstream, settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a second read-model copy (another data dir) whose projector ran, then stopped
    other = await open_memstream(
        replace(settings, data_dir=tmp_path / "other", database_url=None), workers=True
    )
    try:
        await other.session("early").append_message(msg("e0", "early"))
        await other.wait_for("sessions")
        await other.core.workers.bound()
        other_id = other.core.reads.copy_id
    finally:
        await other.close()
    # And a session deleted after it stopped, which that copy has not seen deleted
    manager = ms.session_manager()
    doomed = (await manager.create("Doomed"))["id"]
    await manager.append(doomed, msg("m0", "a secret"))
    await manager.delete(doomed)
    await settled(ms)
    # When a dry run plans the purge, it names that copy at once
    started = time.monotonic()
    plan = await purge(ms.core.log, "0s", dry_run=True, wait=5.0)
    assert time.monotonic() - started < 2.0  # (a dry run does not wait)
    assert [c.copy_id for c in plan.copies_behind] == [other_id]
    # And the purge waits for it for as long as it is told, then goes on and names it
    started = time.monotonic()
    report = await purge(ms.core.log, "0s", wait=0.5)
    assert time.monotonic() - started >= 0.5
    assert [u.identifier for u in report.units] == [doomed]
    assert [c.copy_id for c in report.copies_behind] == [other_id]
    assert report.as_json()["copies_behind"][0]["copy"] == other_id
    assert f"read-model copy {other_id} has applied the stream up to" in caplog.text
    # While this process's own copy, caught up, was not named
    assert ms.core.reads.copy_id not in [c.copy_id for c in report.copies_behind]


@pytest.mark.parametrize("wait", [-1.0, 600.5, float("nan"), float("inf")])
async def test_a_wait_out_of_range_is_refused_before_anything_is_read(
    ms: Memstream, wait: float
) -> None:
    last = await ms.core.log.stream_last_seq()
    with pytest.raises(InvalidInputError, match=r"--wait .* must be between 0 and 600 seconds"):
        await purge(ms.core.log, "0s", wait=wait)
    assert await ms.core.log.stream_last_seq() == last
