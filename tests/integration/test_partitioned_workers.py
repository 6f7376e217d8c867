"""Projectors of a partitioned stream in separate OS processes, sharing its partitions by leases:
two build what one builds, a SIGKILLed one's partitions are taken over, nothing is lost or
doubled, and readers in other processes read their writes."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import nats.js.errors
import psycopg
import pytest
from support.deployment import deployment_env, deployment_settings
from support.postgres import FreshDatabases
from support.processes import json_of, start_worker, stop, wait_for_text

from memstream.client import Memstream, open_memstream
from memstream.settings import Settings
from memstream.workers.log.subjects import partition_of
from memstream.workers.runtime.nats_server import NatsServerProcess

PARTITIONS = 4
SESSIONS = 12
ROUNDS = 60

# A writer without workers: appends ROUNDS messages to each of SESSIONS sessions, round robin
# (one command each), then reads every session back (each read waits for its partition).
WRITER = f"""
import asyncio, json, sys
import memstream

async def main(first: int, rounds: int) -> None:
    async with memstream.connect(workers=False) as ms:
        manager = ms.session_manager()
        if first == 0:
            for s in range({SESSIONS}):
                await manager.create(f"chat {{s}}", session_id=f"chat-{{s}}")
        for r in range(first, first + rounds):
            for s in range({SESSIONS}):
                await ms.session(f"chat-{{s}}").append_message(
                    {{"id": f"m{{r}}", "role": "user", "content": f"chat {{s}} note {{r}}"}}
                )
        counts = {{}}
        for s in range({SESSIONS}):
            counts[s] = len(await ms.session(f"chat-{{s}}").get_history())
        print(json.dumps(counts))

asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
"""


def writer(env: dict[str, str], first: int, rounds: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(first), str(rounds)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(process: subprocess.Popen[str]) -> dict[str, int]:
    out, err = process.communicate(timeout=180)
    assert process.returncode == 0, err
    import json

    counts: dict[str, int] = json.loads(out)
    return counts


def checksums(env: dict[str, str]) -> dict[str, str]:
    verified = json_of(env, "projections", "verify", "--json")
    assert all(v["ok"] for v in verified), [v["difference"] for v in verified if not v["ok"]]
    return {v["projection"]: v["live"] for v in verified}


@pytest.fixture(params=["sqlite", "postgresql"])
def databases(request: pytest.FixtureRequest) -> Iterator[tuple[str | None, str | None]]:
    """Two read-model copies' databases: SQLite in each data dir, or two PostgreSQL ones."""
    if request.param == "sqlite":
        yield None, None
        return
    fresh: FreshDatabases = request.getfixturevalue("fresh_databases")
    urls = [fresh.take(), fresh.take()]
    try:
        yield urls[0], urls[1]
    finally:
        for url in urls:
            fresh.drop(url)


def test_two_projectors_share_four_partitions_and_survive_a_sigkill(
    tmp_path: Path, nats_server: NatsServerProcess, databases: tuple[str | None, str | None]
) -> None:
    shared = _partitioned_env(nats_server, tmp_path / "two")
    stream = shared["MEMSTREAM_STREAM"]
    one = {**shared, "MEMSTREAM_DATA_DIR": str(tmp_path / "one")}
    if databases[0] is not None:
        shared["MEMSTREAM_DATABASE_URL"], one["MEMSTREAM_DATABASE_URL"] = databases
    # Given two projectors of one copy sharing a stream of 4 partitions by leases of 2 s
    options = ("--partitions", "--lease-ttl", "2", "--linger", "0")
    first = start_worker(shared, tmp_path / "first.log", *options)
    second = start_worker(shared, tmp_path / "second.log", *options)
    try:
        wait_for_text(tmp_path / "first.log", "by partition: 4 partitions", first)
        wait_for_text(tmp_path / "second.log", "by partition: 4 partitions", second)
        # Each takes two partitions (the fair share), disjoint
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            owned = [_owned(tmp_path / f"{n}.log") for n in ("first", "second")]
            if all(len(o) == 2 for o in owned) and not owned[0] & owned[1]:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"partitions not shared out: {owned}")
        # When a writer in a third process writes to 12 sessions, and the first projector is
        # killed (SIGKILL: no clean-up runs) while it writes
        running = writer(shared, 0, ROUNDS)
        time.sleep(0.5)
        assert running.poll() is None, "the writer finished before the kill"
        stop(first, signal.SIGKILL)
        counts = finished(running)
        # Then the other took its partitions over (within the lease time), and the writer read
        # all its writes back
        assert set(counts.values()) == {ROUNDS}, counts
        deadline = time.monotonic() + 10
        while _owned(tmp_path / "second.log") != set(range(PARTITIONS)):
            assert time.monotonic() < deadline, _owned(tmp_path / "second.log")
            time.sleep(0.2)
        # And a writer in a new process writes more and reads everything
        assert set(finished(writer(shared, ROUNDS, 5)).values()) == {ROUNDS + 5}
        # Nothing lost or doubled
        counted, rows = _messages_and_rows(tmp_path / "two" / "memstream.db", databases[0])
        assert counted == (SESSIONS * (ROUNDS + 5), SESSIONS * (ROUNDS + 5))
        assert {f"sessions@{p}" for p in range(PARTITIONS)} <= rows
        two = checksums(shared)
        # A partition whose row reached its last event counts as caught up
        lags = {p["name"]: p["lag"] for p in json_of(shared, "projections", "list")}
        assert lags["sessions"] == lags["registry"] == lags["context"] == 0, lags
    finally:
        stop(first)
        stop(second)
    # And one projector of the whole stream, in a second data dir, builds the same read model
    alone = start_worker(one, tmp_path / "alone.log", "--linger", "0")
    try:
        wait_for_text(tmp_path / "alone.log", "projector: stream", alone)
        assert checksums(one) == two
        # And status lists the first copy with its partitions' consumers, all caught up
        status = json_of(one, "status")
        copies = {c["copy_id"]: c for c in status["copies"]}
        (first_copy,) = set(copies) - {status["copy_id"]}
        partitioned = [f"projector-{first_copy}-p{p}" for p in range(PARTITIONS)]
        assert copies[first_copy]["consumers"] == partitioned
        assert copies[first_copy]["lag"] == 0
        # And forgetting that copy deletes its consumers and its lease bucket
        bucket = f"KV_memstream_leases_{stream}_projector-{first_copy}"
        assert asyncio.run(_bucket_exists(nats_server.url, bucket))
        forgotten = json_of(one, "projections", "forget-copy", first_copy)
        assert forgotten["deleted_consumers"] == partitioned
        assert [c["copy_id"] for c in json_of(one, "status")["copies"]] == [status["copy_id"]]
        assert not asyncio.run(_bucket_exists(nats_server.url, bucket))
    finally:
        stop(alone)


async def _bucket_exists(url: str, stream: str) -> bool:
    client = await nats.connect(url)
    try:
        await client.jetstream().stream_info(stream)
    except nats.js.errors.NotFoundError:
        return False
    finally:
        await client.close()
    return True


def _messages_and_rows(path: Path, url: str | None) -> tuple[tuple[int, int], set[str]]:
    """How many message rows there are and how many distinct (session, id), and the tracking
    rows' names."""
    count = "SELECT count(*), count(DISTINCT sid || '/' || id) FROM messages"
    if url is None:
        with sqlite3.connect(path) as db:
            counted = db.execute(count).fetchone()
            rows = {str(r[0]) for r in db.execute("SELECT projection FROM tracking")}
        return (int(counted[0]), int(counted[1])), rows
    with psycopg.connect(url) as pg:
        pg.execute("SET search_path TO memstream")
        row = pg.execute(count).fetchone()
        assert row is not None
        names = {str(r[0]) for r in pg.execute("SELECT projection FROM tracking").fetchall()}
    return (int(row[0]), int(row[1])), names


def _partitioned_env(nats_server: NatsServerProcess, data_dir: Path) -> dict[str, str]:
    """The settings of a process on a new stream of PARTITIONS partitions, and ``data_dir``."""
    return deployment_env(
        deployment_settings(nats_server.url, data_dir, stream_partitions=PARTITIONS)
    )


def _owned(log: Path) -> set[int]:
    """The partitions a worker's log says it holds last."""
    owned: set[int] = set()
    for line in log.read_text().splitlines():
        if ": partitions " in line and " of 4" in line:
            listed = line.split(": partitions ", 1)[1].split(" of ", 1)[0]
            owned = set() if listed == "none" else {int(p) for p in listed.split(",")}
    return owned


async def test_a_read_waits_for_its_own_partition_alone(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    env = _partitioned_env(nats_server, tmp_path / "data")
    stream = env["MEMSTREAM_STREAM"]
    # Given two projectors sharing 4 partitions by leases of 5 s, and one of them SIGKILLed
    options = ("--partitions", "--lease-ttl", "5", "--linger", "0")
    first = start_worker(env, tmp_path / "first.log", *options)
    second = start_worker(env, tmp_path / "second.log", *options)
    try:
        deadline = time.monotonic() + 20
        while True:
            owned = [_owned(tmp_path / f"{n}.log") for n in ("first", "second")]
            if all(len(o) == 2 for o in owned) and not owned[0] & owned[1]:
                break
            assert time.monotonic() < deadline, owned
            await asyncio.sleep(0.2)
        stop(first, signal.SIGKILL)
        killed_at = time.monotonic()
        settings = Settings(
            data_dir=tmp_path / "data",
            nats_url=nats_server.url,
            stream=stream,
            subject_prefix=env["MEMSTREAM_SUBJECT_PREFIX"],
            stream_partitions=PARTITIONS,
        )
        ms = await open_memstream(settings, workers=False)
        try:
            live = _session_in(ms, owned[1])
            dead = _session_in(ms, owned[0])
            # When a client writes to a session of a partition whose projector lives
            session = ms.session(live)
            await session.append_message({"id": "a", "role": "user", "content": "hello"})
            # Then it reads it back at once, though another partition has no projector
            assert [m["id"] for m in await session.get_history()] == ["a"]
            assert time.monotonic() - killed_at < 3.0  # (its leases last at least 3.3 s more)
            assert _owned(tmp_path / "second.log") == owned[1]
            # And a write to a session of the dead projector's partition is read back once the
            # other took it over
            other = ms.session(dead)
            await other.append_message({"id": "b", "role": "user", "content": "hello"})
            assert [m["id"] for m in await other.get_history()] == ["b"]
            assert _owned(tmp_path / "second.log") == set(range(PARTITIONS))
        finally:
            await ms.close()
    finally:
        stop(first)
        stop(second)


def _session_in(ms: Memstream, partitions: set[int]) -> str:
    """A session id whose subject is in one of ``partitions``."""
    for n in range(1000):
        if partition_of(ms.core.commands.session_subject(f"s{n}"), PARTITIONS) in partitions:
            return f"s{n}"
    raise AssertionError(f"no session id in partitions {partitions}")
