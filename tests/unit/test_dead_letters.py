"""Which subjects are purge records (asked of every batch a projector applies)."""

from __future__ import annotations

import pytest

from memstream.workers.dead_letters import is_purge_record


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        ("ms.default.purge.log", True),
        ("ms.default.purge.log.3", True),  # as a partitioned stream stores it
        ("ms.purge.purge.log", True),
        ("ms.purge.session.x", False),  # a namespace called purge
        ("ms.default.session.purge", False),  # a session called purge
        ("ms.default.session.purge.2", False),
        ("ms.default.profile.a=2Epurge=2Eb", False),  # dots in an id are escaped
        ("ms.default.purge", False),  # not a subject of the log
        ("purge.x.purge.y.z.w", False),
    ],
)
def test_purge_records_are_told_by_their_aggregate(subject: str, expected: bool) -> None:
    assert is_purge_record(subject) is expected
