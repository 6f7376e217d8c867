"""A read-model copy's identity and its single-projector lock; grouping consumers by copy."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from memstream.domain.errors import ProjectorRunningError
from memstream.projections.sqlite.copy import ProjectorLock, copy_id, lock_path
from memstream.projections.sqlite.database import open_database
from memstream.workers.admin.status import ConsumerStatus, copy_of, copy_statuses


def test_a_copy_id_is_created_with_the_database_and_kept_inside_it(tmp_path: Path) -> None:
    # Given two fresh read-model databases
    first, second = open_database(tmp_path / "a.db"), open_database(tmp_path / "b.db")
    try:
        # Then each has its own id of 12 hex digits, and a reopened database keeps its id
        assert re.fullmatch(r"[0-9a-f]{12}", copy_id(first))
        assert copy_id(first) != copy_id(second)
        reopened = open_database(tmp_path / "a.db")
        assert copy_id(reopened) == copy_id(first)
        reopened.close()
    finally:
        first.close()
        second.close()


def test_one_copy_has_one_projector_lock(tmp_path: Path) -> None:
    database = tmp_path / "memstream.db"
    # Given a projector lock held for a copy
    held = ProjectorLock.acquire(database, "abc")
    try:
        # When another holder asks for it (another open file: flock is per open file)
        with pytest.raises(ProjectorRunningError) as refused:
            ProjectorLock.acquire(database, "abc")
        # Then it is refused, naming the copy, the first projection held (in name order) and
        # the holder
        assert f"read-model copy abc ({database}), projection analytics" in str(refused.value)
        assert f"process {os.getpid()} on " in str(refused.value)
        # And the lock files are readable by their owner only
        for projection in ("sessions", "context"):
            assert stat.S_IMODE(lock_path(database, projection).stat().st_mode) == 0o600
    finally:
        held.release()
    # When the holder released it, Then the next one gets it
    again = ProjectorLock.acquire(database, "abc")
    assert again.held
    again.release()
    again.release()  # idempotent
    assert not again.held


def test_projectors_of_disjoint_projections_run_side_by_side(tmp_path: Path) -> None:
    database = tmp_path / "memstream.db"
    # Given a projector of the sessions projection
    sessions = ProjectorLock.acquire(database, "abc", ["sessions"])
    try:
        # Then a projector of the context projection may run beside it
        context = ProjectorLock.acquire(database, "abc", ["context"])
        # But one of both is refused, naming the projection held, and takes neither lock
        with pytest.raises(ProjectorRunningError, match="projection context"):
            ProjectorLock.acquire(database, "abc", ["sessions", "context"])
        context.release()
        with pytest.raises(ProjectorRunningError, match="projection sessions"):
            ProjectorLock.acquire(database, "abc", ["sessions", "context"])
        both_free = ProjectorLock.acquire(database, "abc", ["context"])
        both_free.release()
    finally:
        sessions.release()


def test_consumers_are_grouped_by_copy(tmp_path: Path) -> None:
    def consumer(name: str, floor: int, durable: bool = True, pending: int = 1) -> ConsumerStatus:
        return ConsumerStatus(name, durable, pending, 0, 0, floor)

    # Given the consumers of two copies, an ephemeral reader and a consumer of someone else,
    # and one partition's consumer of copy c that has nothing left to deliver (its partition's
    # last event is at 40)
    consumers = [
        consumer("projector-aaaaaaaaaaaa", 90),
        consumer("indexer-aaaaaaaaaaaa", 70),
        consumer("projector-bbbbbbbbbbbb", 100),
        consumer("projector-cccccccccccc", 5, durable=False),
        consumer("my-analytics", 3),
        consumer("projector-dddddddddddd-p3", 40, pending=0),
        consumer("projector-dddddddddddd-p1", 95),
    ]
    # When they are grouped, with the stream at 100 and copy a being this data dir's
    copies = copy_statuses(consumers, 100, local="aaaaaaaaaaaa")
    # Then each copy shows its consumers, its slowest floor and that lag (a consumer with
    # nothing pending is as far as the stream)
    assert [(c.copy_id, c.consumers, c.ack_floor, c.lag, c.local) for c in copies] == [
        ("aaaaaaaaaaaa", ["indexer-aaaaaaaaaaaa", "projector-aaaaaaaaaaaa"], 70, 30, True),
        ("bbbbbbbbbbbb", ["projector-bbbbbbbbbbbb"], 100, 0, False),
        (
            "dddddddddddd",
            ["projector-dddddddddddd-p1", "projector-dddddddddddd-p3"],
            95,
            5,
            False,
        ),
    ]
    assert copy_of("projector-dddddddddddd-p3") == "dddddddddddd"
    assert copy_of("my-analytics") is None
    assert copy_of("projector-ABCDEFABCDEF") is None
