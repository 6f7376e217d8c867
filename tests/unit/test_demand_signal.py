"""The demand signal readers send to projectors elsewhere (see ``workers/position.py``)."""

from __future__ import annotations

import pytest

from memstream.workers.position import DEMAND_MAX_BYTES, encode_demand, wanted_by


def test_a_signal_without_partitions_asks_its_sequence_of_every_projector() -> None:
    signal = encode_demand(42)
    assert signal == b"42"
    assert wanted_by(signal, None) == 42
    assert wanted_by(signal, 3) == 42  # a stream-wide wait presses every partition


def test_a_signal_with_partitions_asks_each_partition_for_its_own_target() -> None:
    signal = encode_demand(90, {2: 90, 0: 41})
    assert signal == b"90 0:41,2:90"
    assert wanted_by(signal, 0) == 41
    assert wanted_by(signal, 2) == 90
    # A partition the reader does not wait for is asked nothing
    assert wanted_by(signal, 1) == 0
    # A projector of every partition is asked for the highest
    assert wanted_by(signal, None) == 90


@pytest.mark.parametrize(
    "junk",
    [
        b"",
        b"abc",
        b"-",
        b"-5",
        b"9" * 5000,
        "\u00e9".encode(),
        b"7 ",
        b"7 1",
        b"7 1:",
        b"7 a:3",
        b"7 1:-3",
        b"7 1:3,",
        b"7 " + b"1:1," * (DEMAND_MAX_BYTES // 4) + b"1:1",
    ],
)
def test_a_signal_that_is_not_one_is_ignored(junk: bytes) -> None:
    assert wanted_by(junk, None) is None
    assert wanted_by(junk, 1) is None
