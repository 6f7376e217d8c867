"""doctor's judgement: each finding, what makes it wrong, and the command that mends it."""

from __future__ import annotations

from dataclasses import replace

from memstream.workers.admin.doctor import diagnose
from memstream.workers.admin.status import (
    PlatformStatus,
    ProjectionStatus,
    ReplicaStatus,
    StreamStatus,
)
from memstream.workers.log.durability import ServerSync, StreamCopy, missing_events

HEALTHY = PlatformStatus(
    stream=StreamStatus("MEMSTREAM", 10, 1000, 1, 10, 3),
    consumers=[],
    copies=[],
    copy_id="abcdef012345",
    projections=[ProjectionStatus("sessions", 10, 0), ProjectionStatus("vectors", 10, 0)],
    dead_letter_count=0,
    dead_letters=[],
    durability=[ServerSync("embedded nats-server", "always", "its config")],
)


def wrong(
    status: PlatformStatus, before: PlatformStatus | None = None, **kw: bool
) -> dict[str, str]:
    options = {"embedded": True, "idle": False} | kw
    findings = diagnose(before or status, status, versions={"nats-server": "2.15.1"}, **options)
    return {f.check: f.mend or "" for f in findings if not f.ok}


def test_a_healthy_deployment_has_nothing_wrong() -> None:
    findings = diagnose(
        HEALTHY, HEALTHY, embedded=True, idle=False, versions={"nats-server": "2.15.1"}
    )
    assert all(f.ok for f in findings)
    assert {f.check for f in findings} >= {
        "durability",
        "read model",
        "dead letters",
        "lag",
        "version",
    }


def test_a_lazy_fsync_policy_is_wrong_and_mended_by_the_setting_or_the_config() -> None:
    lazy = replace(HEALTHY, durability=[ServerSync("n1", "2m0s", "http://n1:8222/varz")])
    assert "MEMSTREAM_NATS_SYNC" in wrong(lazy)["durability"]
    assert "sync_interval: always" in wrong(lazy, embedded=False)["durability"]
    unknown = replace(HEALTHY, durability=[ServerSync("n1", None, "no monitoring URL")])
    assert "durability" not in wrong(unknown)


def test_a_copy_ahead_of_the_log_is_mended_by_a_rebuild() -> None:
    ahead = replace(HEALTHY, log_gap="read model ahead of the log: tracked 150, log ends at 100")
    assert wrong(ahead)["read model"].startswith("memstream projections rebuild")


def test_dead_letters_are_wrong_and_named_by_projection() -> None:
    letters = [{"projection": "sessions", "seq": 4}, {"projection": "memory", "seq": 7}]
    status = replace(HEALTHY, dead_letter_count=2, dead_letters=letters)
    assert wrong(status)["dead letters"].endswith("memstream projections rebuild memory,sessions")


def test_lag_is_wrong_only_when_it_does_not_move_and_someone_should_move_it() -> None:
    behind = replace(HEALTHY, projections=[ProjectionStatus("sessions", 4, 6)])
    moving_from = replace(HEALTHY, projections=[ProjectionStatus("sessions", 2, 8)])
    assert "lag" not in wrong(behind, moving_from)
    assert "lag" not in wrong(behind, idle=True)  # the next process on the data dir catches up
    assert wrong(behind, embedded=False)["lag"] == "memstream worker projector"
    vectors = replace(HEALTHY, projections=[ProjectionStatus("vectors", 4, 6)])
    assert wrong(vectors, embedded=False)["lag"] == "memstream worker indexer"


def test_an_offline_or_lagging_replica_is_named() -> None:
    replicas = [
        ReplicaStatus("n1", True, True, False, 0),
        ReplicaStatus("n2", False, False, False, 12),
        ReplicaStatus("n3", False, False, True, 0),
    ]
    findings = diagnose(
        HEALTHY,
        replace(HEALTHY, replicas=replicas),
        embedded=False,
        idle=False,
        versions={},
    )
    named = [f.detail for f in findings if f.check == "replica" and not f.ok]
    assert named == [
        "stream replica n2 is not current (12 behind)",
        "stream replica n3 is offline",
    ]


def test_a_replica_whose_copy_misses_events_the_others_hold_is_named_with_its_mend() -> None:
    # n2 ends where the others end, but counts 7 of their messages as deleted
    copies = [
        StreamCopy("n1", 157, 1, 157, 0),
        StreamCopy("n2", 150, 1, 157, 7),
        StreamCopy("n3", 157, 1, 157, 0),
    ]
    damaged = replace(HEALTHY, stream_copies=copies)
    assert damaged.problems == [
        "server n2's copy of stream MEMSTREAM holds 150 messages up to sequence 157 where "
        "another holds 157: 7 events acknowledged earlier are missing from its store (damaged "
        "files?), and reads it answers miss them"
    ]
    mend = wrong(damaged, embedded=False)["replica"]
    assert mend.startswith("stop nats-server n2, move jetstream/<account>/streams/MEMSTREAM")
    assert "nats stream cluster peer-remove MEMSTREAM n2" in mend


def test_copies_that_lag_or_were_purged_alike_are_not_damaged() -> None:
    # a replica catching up ends earlier; a purge deletes on every replica alike
    lagging = [StreamCopy("n1", 157, 1, 157, 0), StreamCopy("n2", 120, 1, 120, 0)]
    purged = [StreamCopy("n1", 150, 1, 157, 7), StreamCopy("n2", 150, 1, 157, 7)]
    alone = [StreamCopy("n1", 150, 1, 157, 7)]
    for copies in (lagging, purged, alone):
        assert missing_events(copies, "MEMSTREAM") == []
        assert replace(HEALTHY, stream_copies=copies).problems == []
