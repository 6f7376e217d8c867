"""A partitioned stream (``MEMSTREAM_STREAM_PARTITIONS``): the server stores each event under
its subject plus the aggregate's partition, and every part of memstream reads it as it reads a
stream without partitions."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import nats
import pytest
from nats.js import api
from support.postgres import create_database, drop_database, server_url

from memstream.client import Memstream, open_memstream
from memstream.domain.errors import InvalidInputError, ProjectionLagError
from memstream.projections.registry import PARTITIONABLE
from memstream.settings import Settings
from memstream.workers.admin.audit import EventQuery, read_events, session_trail
from memstream.workers.admin.event_transfer import import_events
from memstream.workers.admin.rebuild import verify
from memstream.workers.admin.status import platform_status
from memstream.workers.log.event_log import EventLog
from memstream.workers.log.subjects import (
    logical_subject,
    parse_subject,
    partition_of,
    subject_for,
)
from memstream.workers.partitioned import PartitionedProjector
from memstream.workers.position import Demand
from memstream.workers.runtime.nats_server import NatsServerProcess

HOSTILE_IDS = ["chat-1", "", "a.b", "*", ">", "naïve 🎉", "=41", "x" * 256, "tab\there"]


async def test_partition_of_agrees_with_the_server(nats_server: NatsServerProcess) -> None:
    # Given streams of 3 and 8 partitions
    nc = await nats.connect(nats_server.url)
    try:
        for partitions in (3, 8):
            log = EventLog(
                nc, f"P{partitions}", subject_prefix=f"p{partitions}", partitions=partitions
            )
            await log.ensure_stream()
            assert await log.partitions() == partitions
            # When events of many aggregates are stored
            ids = HOSTILE_IDS + [f"session-{n}" for n in range(200)]
            for identifier in ids:
                subject = subject_for(log.subject_prefix, "ns1", "session", identifier)
                await nc.jetstream().publish(subject, b"{}")
                # Then the server stored each under the partition partition_of computes
                stored = await log.js.get_last_msg(log.stream, await log.stored(subject))
                assert stored.subject == f"{subject}.{partition_of(subject, partitions)}"
                name = parse_subject(stored.subject)
                assert (name.identifier, name.partition) == (
                    identifier,
                    partition_of(subject, partitions),
                )
                assert logical_subject(stored.subject) == subject
            used = {partition_of(subject_for("p", "ns1", "session", i), partitions) for i in ids}
            assert used == set(range(partitions))
    finally:
        await nc.close()


async def test_a_stream_keeps_its_partitions(nats_server: NatsServerProcess) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        await EventLog(nc, "KEEP", partitions=4).ensure_stream()
        # A log that asks for no partitions adopts the stream's
        adopted = EventLog(nc, "KEEP")
        await adopted.ensure_stream()
        assert await adopted.partitions() == 4
        # One that asks for another count is refused, naming both
        with pytest.raises(InvalidInputError, match=r"has 4 partitions.* asks for 8"):
            await EventLog(nc, "KEEP", partitions=8).ensure_stream()
        # Nobody can store an event under a partition of their own choice
        with pytest.raises(nats.js.errors.NoStreamResponseError):
            await nc.jetstream().publish("ms.default.session.x.1", b"{}", timeout=0.5)
        # A stream transformed in another way is not taken for a memstream stream
        await nc.jetstream().add_stream(
            api.StreamConfig(
                name="OTHER",
                subjects=["other.*.*.*"],
                subject_transform=api.SubjectTransform(
                    src="other.*.*.*",
                    dest="other.{{wildcard(1)}}.x.{{wildcard(2)}}.{{wildcard(3)}}",
                ),
            )
        )
        with pytest.raises(InvalidInputError, match="not memstream's partitioning"):
            await EventLog(nc, "OTHER", subject_prefix="other").ensure_stream()
    finally:
        await nc.close()


def test_partitions_setting_is_checked() -> None:
    env = {"MEMSTREAM_STREAM_PARTITIONS": "8"}
    assert Settings.from_env(env).stream_partitions == 8
    for bad, match in (
        ("-1", "between 0 and 1024"),
        ("1025", "between 0 and 1024"),
        ("four", "integer"),
    ):
        with pytest.raises(InvalidInputError, match="MEMSTREAM_STREAM_PARTITIONS") as caught:
            Settings.from_env({"MEMSTREAM_STREAM_PARTITIONS": bad})
        assert bad in str(caught.value)
        assert match in str(caught.value)


@pytest.fixture
def partitioned(settings: Settings) -> Settings:
    return settings.with_(stream_partitions=4)


@pytest.mark.both_backends
async def test_everything_reads_a_partitioned_stream(partitioned: Settings, tmp_path: Path) -> None:
    ms = await open_memstream(partitioned, workers=True)
    try:
        await _write_and_read(ms)
        # Audit reads every event of a session, on whatever partition
        trail = await session_trail(ms.core.log, "default", "chat-0")
        assert [e.type for e in trail][:2] == [
            "registry.session_created",
            "session.message_appended",
        ]
        assert all(parse_subject(e.subject).partition is not None for e in trail)
        # The last event of one subject is found under its partition
        last = await ms.core.log.last_seq(ms.core.commands.session_subject("chat-0"))
        assert last == trail[-1].seq
        await _verified(ms)
        # Status counts a partition that reached its last event as caught up
        await ms.sync("sessions")
        status = await platform_status(ms.core.log, ms.core.reads.read_models)
        lag = {p.name: p.lag for p in status.projections}
        assert lag["sessions"] == lag["registry"] == lag["context"] == 0, lag
        # Export, then import into a stream without partitions and into one with 3
        exported = tmp_path / "events.jsonl"
        with exported.open("w") as out:
            async for event in read_events(ms.core.log, EventQuery()):
                out.write(json.dumps(event.export_json()) + "\n")
        lines = [json.loads(line) for line in exported.read_text().splitlines()]
        assert all(line["subject"].count(".") == 4 for line in lines)
    finally:
        await ms.close()
    for partitions in (0, 3):
        root = tmp_path / f"import-{partitions}"
        server = NatsServerProcess.start(root / "nats", log_path=root / "nats.log")
        # A read-model copy belongs to one log: the other stream gets a database of its own (a
        # copy that tracked events the new stream does not hold yet is refused).
        database = None if partitioned.database_url is None else create_database(server_url())
        target = partitioned.with_(
            nats_url=server.url,
            stream_partitions=partitions,
            data_dir=root / "data",
            database_url=database,
        )
        try:
            other = await open_memstream(target, workers=True)
        except BaseException:
            server.stop()
            if database is not None:
                drop_database(server_url(), database)
            raise
        try:
            result = await import_events(other.core.log, exported)
            assert result.stored == len(lines)
            await other.sync("sessions")
            history = await other.session("chat-3").get_history()
            assert [m["id"] for m in history] == ["chat-3-m0", "chat-3-m1", "chat-3-m2"]
            assert await other.core.log.partitions() == partitions
            await _verified(other)
        finally:
            await other.close()
            server.stop()
            if database is not None:
                drop_database(server_url(), database)


async def _verified(ms: Memstream) -> None:
    results = await verify(ms.core.log, ms.core.reads.copy)
    assert results
    assert all(r.ok for r in results), [r for r in results if not r.ok]


async def _write_and_read(ms: Memstream) -> None:
    manager = ms.session_manager()
    for n in range(8):
        await manager.create(f"chat {n}", session_id=f"chat-{n}")
        session = ms.session(f"chat-{n}")
        for m in range(3):
            await session.append_message(
                {"id": f"chat-{n}-m{m}", "role": "user", "content": f"note {n} {m} garlic"}
            )
    for n in range(8):
        history = await ms.session(f"chat-{n}").get_history()
        assert [m["id"] for m in history] == [f"chat-{n}-m{m}" for m in range(3)]
    listed = await manager.list()
    assert {s["id"] for s in listed} == {f"chat-{n}" for n in range(8)}
    hits = await ms.session("chat-5").search("garlic")
    assert len(hits) == 3


async def test_a_wait_for_another_clients_sequence_waits_for_every_partition(
    partitioned: Settings,
) -> None:
    # Given a projecting client, and two clients without workers on a partitioned stream
    projecting = await open_memstream(partitioned, workers=True)
    reader = await open_memstream(partitioned.with_(read_timeout=1.0), workers=False)
    writer = await open_memstream(partitioned, workers=False)
    try:
        assert projecting.core.workers.projector is not None
        await projecting.core.workers.projector.stop()  # nothing is projected from now on
        # When the writer writes and the reader waits for the writer's last sequence
        await writer.session("chat-x").append_message({"id": "x", "role": "user", "content": "?"})
        # Then the wait holds until every partition has everything up to it (here: never)
        with pytest.raises(ProjectionLagError) as lag:
            await reader.wait_for("sessions", writer.core.ryw.last_write_seq)
        assert lag.value.projection == "sessions"
        assert lag.value.wanted == writer.core.ryw.last_write_seq
    finally:
        for client in (writer, reader, projecting):
            await client.close()


async def test_a_reader_presses_only_the_projector_of_the_partition_it_reads(
    settings: Settings,
) -> None:
    # Given the projectors of both partitions of a stream in a worker of their own, each
    # lingering up to 10 s over what it fetched
    partitioned = settings.with_(stream_partitions=2)
    host = await open_memstream(partitioned, workers=False)
    projector = PartitionedProjector(
        host.core.log, host.core.reads.copy, PARTITIONABLE, ttl=2.0, demand=Demand(), linger=10.0
    )
    client = await open_memstream(partitioned, workers=False)
    try:
        await projector.start()
        async with asyncio.timeout(15):
            while True:  # (until the leases are shared out: nothing to wait on for it)
                if sorted(projector.workers) == [0, 1]:
                    break
                await asyncio.sleep(0.05)
            await asyncio.gather(*(w.bound.wait() for w in projector.workers.values()))
        busy = next(
            f"s{n}"
            for n in range(100)
            if partition_of(client.core.commands.session_subject(f"s{n}"), 2) == 0
        )
        idle = 1
        # When a client of neither writes to a session of partition 0 and reads it back
        session = client.session(busy)
        await session.append_message({"id": "a", "role": "user", "content": "hello"})
        started = time.monotonic()
        assert [m["id"] for m in await session.get_history()] == ["a"]
        # Then partition 0's projector stopped lingering for it, and partition 1's (with
        # nothing the reader waits for) was not pressed: it lingers on
        assert time.monotonic() - started < 5.0
        assert projector.workers[0].demand is not None
        assert projector.workers[0].demand.wanted >= client.core.ryw.last_write_seq
        assert projector.workers[idle].demand is not None
        assert projector.workers[idle].demand.wanted == 0
        assert projector.workers[0].demand is not projector.workers[idle].demand
    finally:
        await projector.stop()
        await client.close()
        await host.close()
