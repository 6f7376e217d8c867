"""Partitioned subjects and tracking rows (pure functions)."""

from __future__ import annotations

import pytest

from memstream.domain.errors import InvalidInputError
from memstream.projections.tracking import TrackingRows, advance, projection_of
from memstream.workers.log.subjects import (
    logical_subject,
    parse_subject,
    partition_filter,
    partition_of,
    partition_transform,
    stored_filter,
)


def test_partition_of_is_fnv1a_of_namespace_and_id_tokens() -> None:
    # FNV-1a (32 bits) of the namespace token followed by the id token, as the server hashes
    value = 0x811C9DC5
    for byte in b"defaultchat-1":
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    for partitions in (1, 2, 7, 8, 1024):
        assert partition_of("ms.default.session.chat-1", partitions) == value % partitions
    # A session's session and registry subjects share a partition
    assert partition_of("ms.ns.session.x", 8) == partition_of("ms.ns.registry.x", 8)


def test_subjects_with_and_without_a_partition() -> None:
    name = parse_subject("ms.default.session.a=2Eb.3")
    assert (name.identifier, name.partition) == ("a.b", 3)
    assert str(name) == "ms.default.session.a=2Eb"  # what writers publish to
    assert parse_subject("ms.default.session.a=2Eb").partition is None
    assert logical_subject("ms.default.session.a=2Eb.3") == "ms.default.session.a=2Eb"
    assert logical_subject("ms.default.session.a") == "ms.default.session.a"
    with pytest.raises(InvalidInputError, match=r"\[\.<partition>\]"):
        parse_subject("ms.default.session.a.b")  # a 5th token that is no partition
    assert stored_filter("ms.default.session.a", 0) == "ms.default.session.a"
    assert stored_filter("ms.default.session.a", 4) == "ms.default.session.a.*"
    assert stored_filter("ms.*.profile.*", 4) == "ms.*.profile.*.*"
    assert stored_filter("ms.>", 4) == "ms.>"
    assert stored_filter("ms.default.session.a.2", 4) == "ms.default.session.a.2"
    assert partition_filter("ms", 5) == "ms.*.*.*.5"
    assert partition_transform("ms", 8) == (
        "ms.*.*.*",
        "ms.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{partition(8,1,3)}}",
    )


def test_tracking_rows() -> None:
    plain = TrackingRows()
    assert plain.names("sessions") == ("sessions",)
    assert plain.row("sessions", "ms.default.session.a") == "sessions"
    rows = TrackingRows(4, frozenset({1, 3}))
    assert rows.names("sessions") == ("sessions@1", "sessions@3")
    assert rows.every("context") == tuple(f"context@{p}" for p in range(4))
    assert rows.row("sessions", "ms.default.session.a.3") == "sessions@3"
    assert projection_of("sessions@3") == "sessions"
    assert projection_of("sessions") == "sessions"
    with pytest.raises(ValueError, match="no partition token"):
        rows.row("sessions", "ms.default.session.a")  # never silently skipped


def test_advance_moves_every_consumed_partition_forward_never_back() -> None:
    positions = {"sessions@1": 10, "sessions@3": 50}
    advance(positions, ("sessions@1", "sessions@3"), 40)
    assert positions == {"sessions@1": 40, "sessions@3": 50}
