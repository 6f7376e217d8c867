"""Idempotency on a real nats-server: duplicate commands, duplicate appends, redelivered batches."""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.js import api

from memstream.client import Memstream, open_memstream
from memstream.domain.session import SessionAggregate
from memstream.projections.ports import ProjectorStats, ReadModelRewound
from memstream.projections.sqlite.batches import apply_batch, default_projections
from memstream.projections.sqlite.checksum import checksum
from memstream.projections.sqlite.database import drop_projection, open_database, tracked_seq
from memstream.projections.sqlite.store import SqliteCopy, SqliteReadModelStore
from memstream.settings import Settings
from memstream.workers.admin.rebuild import verify
from memstream.workers.log.codec import CommandMeta, encode_event
from memstream.workers.log.event_log import (
    EventLog,
    ExpectedSequenceMismatch,
    LogEntry,
    OutgoingMessage,
    connect_nats,
)
from memstream.workers.projector import ProjectorWorker
from memstream.workers.runtime.nats_server import NatsServerProcess


def _message(message_id: str, text: str = "hello") -> dict[str, object]:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


async def _subject_count(log: EventLog, subject: str) -> int:
    """Events stored for ``subject`` (under its partition too, on a partitioned stream)."""
    info = await log.js.stream_info(log.stream, subjects_filter=await log.stored(subject))
    return sum(int(count) for count in (info.state.subjects or {}).values())


async def _read_all(log: EventLog) -> list[LogEntry]:
    entries: list[LogEntry] = []
    last = await log.stream_last_seq()
    psub = await log.js.pull_subscribe(f"{log.subject_prefix}.>", durable=None, stream=log.stream)
    try:
        while len(entries) < last:
            for msg in await psub.fetch(batch=last - len(entries), timeout=2):
                entries.append(
                    LogEntry(
                        msg.metadata.sequence.stream, msg.subject, msg.data, dict(msg.headers or {})
                    )
                )
                await msg.ack()
    finally:
        await psub.unsubscribe()
    return entries


async def test_same_command_twice_from_one_client_is_one_event(ms: Memstream) -> None:
    # Given a command with a fixed command id whose message has no id, so that every decision
    # of it mints a new message id and only the log's dedupe (Nats-Msg-Id) can spot a replay
    meta = CommandMeta(command_id="cmd-append-1")
    subject = ms.core.commands.session_subject("s")

    def append(session: SessionAggregate) -> list[SessionAggregate.Event]:
        return session.append_message({"role": "user", "content": "hello"})

    # When the client runs it twice (a retry after an unknown outcome)
    first = await ms.core.commands.session_command("s", append, meta)
    second = await ms.core.commands.session_command("s", append, meta)

    # Then the log holds one event, and the read model one message
    assert first.seq == second.seq
    assert await _subject_count(ms.core.log, subject) == 1
    history = await ms.session("s").get_history()
    assert [m["parts"] for m in history] == [[{"type": "text", "text": "hello"}]]
    # And the client's aggregate is the log's, not its own second decision: the one message is
    # the latest leaf, a root without children
    state = await ms.core.commands.sessions.inspect(
        subject,
        "s",
        lambda s: (
            s.latest_leaf,
            s.messages.find(history[0]["id"]),
            s.messages.child_count(history[0]["id"]),
        ),
    )
    assert state == (history[0]["id"], (None,), 0)


async def test_same_command_from_two_clients_is_deduplicated_by_the_log(
    ms: Memstream, settings: Settings
) -> None:
    # Given two clients whose caches both hold the session as it was before the write
    other = await open_memstream(
        settings.with_(data_dir=settings.data_dir / "other"), workers=False
    )
    try:
        subject = ms.core.commands.session_subject("s")
        await ms.session("s").append_message(_message("m0"))
        await ms.core.commands.sessions.inspect(subject, "s", lambda s: s.latest_leaf)
        await other.core.commands.sessions.inspect(subject, "s", lambda s: s.latest_leaf)
        meta = CommandMeta(command_id="cmd-append-2")

        # When both run the same command (same command id = Nats-Msg-Id), each deciding it on
        # its own cache and minting its own message id
        first = await ms.core.commands.session_command(
            "s", lambda s: s.append_message({"role": "user", "content": "one"}), meta
        )
        second = await other.core.commands.session_command(
            "s", lambda s: s.append_message({"role": "user", "content": "two"}), meta
        )

        # Then the log deduplicates the second publish: one event, one message, first wins
        assert second.seq == first.seq
        assert await _subject_count(ms.core.log, subject) == 2
        history = await ms.session("s").get_history()
        assert [m["parts"][0]["text"] for m in history] == ["hello", "one"]
        # And the second client's aggregate caught up with the log rather than forking
        ids = [m["id"] for m in history]
        state = await other.core.commands.sessions.inspect(
            subject,
            "s",
            lambda s: (
                [s.messages.find(i) for i in ids],
                [s.messages.child_count(i) for i in ids],
                s.latest_leaf,
            ),
        )
        assert state == ([(None,), (ids[0],)], [1, 0], ids[-1])
    finally:
        await other.close()


async def test_the_log_acknowledges_a_republished_message_as_a_duplicate(ms: Memstream) -> None:
    # Given an event message with a message id
    subject = ms.core.commands.session_subject("raw")
    event = SessionAggregate.empty("default", "raw").append_message(_message("m1"))[0]
    meta = CommandMeta(command_id="cmd-raw")
    message = OutgoingMessage(*encode_event(event, meta, meta.command_id), msg_id=meta.command_id)
    first = await ms.core.log.publish(subject, [message], 0)
    # When it is published again, unguarded or guarded by the subject's current last sequence
    # (a retry after reloading the aggregate)
    again = [
        await ms.core.log.publish(subject, [message], expected) for expected in (None, first.seq)
    ]
    # Then each republish is acknowledged as a duplicate of the first
    assert not first.duplicate
    assert [(r.seq, r.duplicate) for r in again] == [(first.seq, True), (first.seq, True)]
    # And a republish still guarded by the stale sequence is refused (the server checks the
    # expected sequence before the duplicate window); either way the log stores it once
    with pytest.raises(ExpectedSequenceMismatch):
        await ms.core.log.publish(subject, [message], 0)
    assert await _subject_count(ms.core.log, subject) == 1


async def test_same_message_id_with_different_command_ids_is_a_domain_no_op(ms: Memstream) -> None:
    # Given a session with message m1
    session = ms.session("s")
    await session.append_message(_message("m1", "first"))
    # When m1 is appended again under other command ids, with other content and parents
    await ms.core.commands.session_command(
        "s", lambda s: s.append_message(_message("m1", "second")), CommandMeta(command_id="a")
    )
    await ms.core.commands.session_command(
        "s",
        lambda s: s.append_message(_message("m1", "third"), None),
        CommandMeta(command_id="b"),
    )
    await session.append_messages([_message("m1", "fourth"), _message("m2")])
    # Then the log holds the first append and the batch's new message only
    assert await _subject_count(ms.core.log, ms.core.commands.session_subject("s")) == 2
    # And the first content wins
    assert await session.get_history() == [_message("m1", "first"), _message("m2")]


@pytest.mark.sqlite_only
async def test_committed_but_unacknowledged_batch_is_skipped_when_redelivered(
    ms: Memstream, settings: Settings, tmp_path: Path
) -> None:
    # Given events in the log (appended, updated, deleted, compacted)
    session = ms.session("s")
    for i in range(6):
        await session.append_message(_message(f"m{i}", f"text {i}"))
    await session.update_message(_message("m2", "changed"))
    await session.delete_messages(["m4"])
    await session.add_compaction("summary", "m1", "m3")
    entries = await _read_all(ms.core.log)
    assert len(entries) == 9

    # When a batch is committed to a read model ...
    connection = open_database(tmp_path / "redelivery.db")
    try:
        stats = ProjectorStats()
        assert apply_batch(connection, default_projections(), entries[:5], stats) == 5
        committed = checksum(connection, "sessions")
        # ... and then redelivered because its acknowledgement was lost
        assert apply_batch(connection, default_projections(), entries[:5], stats) == 5
        # Then the redelivery is skipped: nothing is applied twice
        assert (stats.applied, stats.skipped) == (5, 5)
        assert checksum(connection, "sessions") == committed
        # When a redelivery overlaps new events, only the new ones are applied
        assert apply_batch(connection, default_projections(), entries[3:], stats) == 9
        assert (stats.applied, stats.skipped) == (9, 7)
        assert tracked_seq(connection, "sessions") == 9
        # Then the result equals the live read model that saw every event once
        await ms.wait_for("sessions")
        assert checksum(connection, "sessions") == checksum(
            ms.core.reads.read_models.connection, "sessions"
        )
    finally:
        connection.close()


@pytest.mark.sqlite_only
async def test_a_batch_landing_after_a_rebuild_dropped_the_read_model_writes_nothing(
    ms: Memstream, tmp_path: Path
) -> None:
    # Given a projector that committed the first events of the log to a read model
    session = ms.session("s")
    for i in range(8):
        await session.append_message(_message(f"m{i}", f"text {i}"))
    entries = await _read_all(ms.core.log)
    connection = open_database(tmp_path / "rewound.db")
    try:
        stats = ProjectorStats()
        assert apply_batch(connection, default_projections(), entries[:5], stats) == 5
        # When another process drops the read model to rebuild it, and the projector's next
        # batch (fetched before the drop) reaches the database after it
        drop_projection(connection, "sessions")
        emptied = checksum(connection, "sessions")
        with pytest.raises(ReadModelRewound):
            apply_batch(connection, default_projections(), entries[5:], stats, committed=5)
        # Then the batch wrote nothing: the emptied model does not claim events 1-5 as done
        assert tracked_seq(connection, "sessions") == 0
        assert checksum(connection, "sessions") == emptied
        # And a rebuild from the start yields the live read model
        assert apply_batch(connection, default_projections(), entries, stats) == 8
        await ms.wait_for("sessions")
        assert checksum(connection, "sessions") == checksum(
            ms.core.reads.read_models.connection, "sessions"
        )
    finally:
        connection.close()


@pytest.mark.sqlite_only
async def test_projector_resuming_over_a_committed_unacknowledged_batch_applies_only_new_events(
    settings: Settings,
) -> None:
    # Given a projector that fetched a batch from its durable consumer and committed it to the
    # read model, then died before acknowledging it
    writer = await open_memstream(settings, workers=False)
    try:
        session = writer.session("s")
        for i in range(5):
            await session.append_message(_message(f"m{i}"))
        database = settings.data_dir / "memstream.db"
        connection = open_database(database)
        worker = ProjectorWorker(writer.core.log, SqliteReadModelStore(connection), batch_size=3)
        try:
            js = writer.core.log.js
            await js.add_consumer(
                writer.core.log.stream,
                api.ConsumerConfig(
                    durable_name=worker.durable,
                    ack_policy=api.AckPolicy.ALL,
                    ack_wait=60.0,
                    filter_subject=f"{writer.core.log.subject_prefix}.>",
                ),
            )
            dead = await js.pull_subscribe_bind(worker.durable, writer.core.log.stream)
            fetched = await dead.fetch(5, timeout=2)
            entries = [
                LogEntry(m.metadata.sequence.stream, m.subject, m.data, dict(m.headers or {}))
                for m in fetched
            ]
            assert worker.store.apply(entries, ProjectorStats()) == 5
            await dead.unsubscribe()
            info = await js.consumer_info(writer.core.log.stream, worker.durable)
            assert (info.num_ack_pending, info.ack_floor.stream_seq) == (5, 0)

            # When a new projector starts on that consumer and read model, and more events arrive
            worker.start()
            for i in range(5, 8):
                await session.append_message(_message(f"m{i}"))
            await writer.wait_for("sessions")

            # Then only the new events were applied, and the read model equals a rebuild
            assert worker.stats.applied == 3
            assert [m["id"] for m in await session.get_history()] == [f"m{i}" for i in range(8)]
            results = await verify(writer.core.log, SqliteCopy(database))
            assert [r.projection for r in results] == ["sessions", "context", "registry", "memory"]
            assert all(r.ok for r in results), results
        finally:
            await worker.stop()
            connection.close()
    finally:
        await writer.close()


async def test_an_existing_stream_is_brought_up_to_the_required_settings(
    nats_server: NatsServerProcess,
) -> None:
    # Given a stream created elsewhere without direct gets, atomic batches or a dedupe window
    client = await connect_nats(nats_server.url)
    try:
        await client.jetstream().add_stream(
            api.StreamConfig(name="OLD", subjects=["ms.>"], duplicate_window=1.0)
        )
        log = EventLog(client, "OLD")
        # When memstream starts on it
        await log.ensure_stream()
        # Then the stream has what memstream relies on, and keeps its subjects
        config = (await client.jetstream().stream_info("OLD")).config
        assert config.allow_direct
        assert config.allow_atomic
        assert config.duplicate_window == 120.0
        assert config.subjects == ["ms.>"]
        # And message deletes stay allowed: admin purge overwrites what it erases with them
        # (who may delete is for NATS permissions to say)
        assert not config.deny_delete
    finally:
        await client.close()
