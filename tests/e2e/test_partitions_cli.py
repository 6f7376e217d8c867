"""The CLI's partition options: refused before anything runs when they cannot work, and a
stream created partitioned by ``--stream-partitions``."""

from __future__ import annotations

import json
from pathlib import Path

from support.processes import clean_env, memstream

from memstream.workers.log.subjects import partition_of


def test_partition_options_are_refused_when_they_cannot_work(cli_env: dict[str, str]) -> None:
    env = cli_env
    refusals = [
        (("worker", "indexer", "--partitions"), "--partitions is for the projector"),
        (
            ("worker", "projector", "--partitions", "--projections", "sessions,analytics"),
            "projections analytics cannot be projected by partition",
        ),
        (("worker", "projector", "--partitions", "--lease-ttl", "0.1"), "--lease-ttl is 0.1"),
        (("--stream-partitions", "2000", "sessions", "list"), "between 0 and 1024"),
        # A stream created without partitions (by this first command) has none to share
        (("worker", "projector", "--partitions"), "has no partitions"),
    ]
    memstream(env, "sessions", "list")  # creates the stream, without partitions
    for args, message in refusals:
        result = memstream(env, *args, expect=1)
        assert message in result.stderr, (args, result.stderr)


def test_stream_partitions_creates_a_partitioned_stream(tmp_path: Path) -> None:
    # The embedded platform (each command runs the workers while it owns the data dir)
    env = clean_env(MEMSTREAM_DATA_DIR=str(tmp_path / "embedded"))
    memstream(env, "--stream-partitions", "4", "append", "chat-1", "--text", "hello")
    # Asked for another count, the stream is refused, naming both
    refused = memstream(env, "--stream-partitions", "8", "sessions", "list", expect=1)
    assert "has 4 partitions" in refused.stderr
    assert "asks for 8" in refused.stderr
    # Without the option the stream's own partitions are used, by reads and by the log
    assert "hello" in memstream(env, "sessions", "history", "chat-1").stdout
    exported = memstream(env, "events", "export", "--id", "chat-1").stdout.splitlines()
    subjects = {json.loads(line)["subject"] for line in exported}
    partition = partition_of("ms.default.session.chat-1", 4)
    assert subjects == {f"ms.default.session.chat-1.{partition}"}
