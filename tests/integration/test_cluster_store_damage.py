"""A 3-node JetStream cluster on loopback whose follower's stream files are damaged while it is
down: one message block truncated, another with bytes flipped. The two others keep the stream
writable; once back, the damaged server must serve the same log as they do.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.partition_client import open_when_placed
from support.processes import clean_env
from support.processes import memstream as memstream_cli

from memstream import Memstream, UnavailableError
from memstream.domain.session import SessionAggregate
from memstream.settings import Settings
from memstream.workers.runtime.nats_server import (
    MAX_PAYLOAD,
    NatsServerProcess,
    free_port,
    liveness_config,
    nats_server_binary,
)

NODES = ("n1", "n2", "n3")
SESSIONS = ("s0", "s1", "s2")
# Large messages, so that the stream spans several message blocks (``*.blk``) on each server.
TEXT_BYTES = 200_000
BEFORE = 90  # writes before the follower goes down
WHILE_DOWN = 30  # writes while it is down
AFTER = 30  # writes once it is back
SETTLE_TIMEOUT = 30.0  # a restarted server is current again within this
READS = 8  # times the log is read through the healthy servers (each read: any server's copy)
# What nats-server logs about a damaged store (printed for the record).
STORE_NEWS = re.compile(
    r"corrupt|checksum|lost|truncat|rebuil|recover|catchup|catching up|mismatch|reset|\[ERR\]",
    re.IGNORECASE,
)


@dataclass
class Node:
    """One server of the cluster, restartable on its ports with its store."""

    name: str
    folder: Path
    port: int
    cluster_port: int
    http_port: int  # the monitoring endpoint: this server's own copy of the stream
    routes: list[int]
    server: NatsServerProcess | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def store(self) -> Path:
        return self.folder / "store"

    @property
    def log_path(self) -> Path:
        return self.folder / "nats.log"

    def start(self) -> None:
        """``nats-server`` with JetStream, clustered with the servers on ``routes``; its log is
        appended to, so that a restart keeps the story."""
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self.folder / "nats.conf"
        solicited = ", ".join(f'"nats://127.0.0.1:{route}"' for route in self.routes)
        config.write_text(
            f'server_name: "{self.name}"\n'
            f"max_payload: {MAX_PAYLOAD}\n"
            f'http: "127.0.0.1:{self.http_port}"\n'
            + liveness_config()
            + f'jetstream {{ store_dir: "{self.store}", sync_interval: always }}\n'
            "cluster {\n"
            '  name: "memstream-damage"\n'
            f'  listen: "127.0.0.1:{self.cluster_port}"\n'
            f"  routes: [{solicited}]\n"
            "}\n"
        )
        self.log_path.touch()
        offset = self.log_path.stat().st_size
        command = [nats_server_binary(), "-c", str(config), "-a", "127.0.0.1"]
        command += ["-p", str(self.port), "-l", str(self.log_path)]
        process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        self.server = NatsServerProcess(process, self.port, self.store, self.log_path)
        self.server.wait_ready(log_offset=offset)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.server is not None:
            self.server.stop(sig)

    def copy_of(self, stream: str) -> dict[str, int]:
        """This server's copy of ``stream`` (its monitoring endpoint's ``/jsz``): messages,
        first and last sequence, and how many sequences in between it holds as deleted."""
        url = f"http://127.0.0.1:{self.http_port}/jsz?streams=true"
        with urllib.request.urlopen(url, timeout=5) as response:
            report = json.load(response)
        for account in report.get("account_details", []):
            for detail in account.get("stream_detail", []):
                if detail["name"] == stream:
                    state = detail["state"]
                    keys = ("messages", "first_seq", "last_seq", "num_deleted")
                    return {key: int(state.get(key) or 0) for key in keys}
        raise AssertionError(f"{self.name} holds no copy of {stream}: {report}")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, Node]]:
    """Three clustered ``nats-server -js`` processes on loopback, each with its own store."""
    ports = {name: (free_port(), free_port(), free_port()) for name in NODES}
    nodes = {
        name: Node(
            name,
            tmp_path / name,
            port,
            cluster_port,
            http_port,
            [ports[other][1] for other in NODES if other != name],
        )
        for name, (port, cluster_port, http_port) in ports.items()
    }
    try:
        for node in nodes.values():
            node.start()
        yield nodes
    finally:
        for node in nodes.values():
            node.stop(signal.SIGKILL)


async def _replicas(ms: Memstream) -> tuple[str, dict[str, bool]]:
    """The stream's leader and whether each follower is current."""
    info = await ms.core.log.js.stream_info(ms.core.log.stream)
    assert info.cluster is not None
    replicas = info.cluster.replicas or []
    return info.cluster.leader or "", {str(r.name): bool(r.current) for r in replicas}


async def _until_replicated(ms: Memstream, followers: int = 2) -> str:
    """Wait (bounded) until the stream has a leader and ``followers`` current followers;
    return the leader's name."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while True:
        try:
            leader, current = await _replicas(ms)
        except UnavailableError:
            leader, current = "", {}
        if leader and sum(current.values()) >= followers:
            return leader
        assert time.monotonic() < deadline, (leader, current)
        await asyncio.sleep(0.1)


def _replicated(cluster: dict[str, Node], tmp_path: Path) -> Settings:
    """Settings of a client of the whole cluster, on a new 3-replica stream."""
    return Settings(
        data_dir=tmp_path / "all",
        nats_url=",".join(node.url for node in cluster.values()),
        stream="D" + uuid.uuid4().hex[:12].upper(),
        stream_replicas=3,
        read_timeout=SETTLE_TIMEOUT,
    )


def _follower(ms: Memstream, cluster: dict[str, Node], leader: str) -> Node:
    """A server that neither leads the stream nor serves ``ms``."""
    used = ms.core.nats.connected_url.port if ms.core.nats.connected_url else 0
    return next(node for node in cluster.values() if node.name != leader and node.port != used)


def _message(index: int) -> dict[str, object]:
    body = f"message {index} " + "x" * TEXT_BYTES
    return {"id": f"m{index:04d}", "role": "user", "content": body}


async def _write(ms: Memstream, first: int, count: int, acknowledged: dict[str, list[str]]) -> None:
    """Append messages ``first`` … ``first + count - 1`` to the sessions in turn, each once
    acknowledged (a write refused while the cluster changes its mind is tried again: its
    message id makes the retry a no-op if the first attempt was stored)."""
    for index in range(first, first + count):
        session_id = SESSIONS[index % len(SESSIONS)]
        message = _message(index)
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            try:
                await ms.session(session_id).append_message(message)
            except UnavailableError:
                assert time.monotonic() < deadline, message["id"]
                await asyncio.sleep(0.05)
                continue
            acknowledged[session_id].append(str(message["id"]))
            break


async def _logged(ms: Memstream) -> dict[str, list[str]]:
    """Each session's message ids, as the log reads through ``ms``'s server."""
    found: dict[str, list[str]] = {}
    for session_id in SESSIONS:
        events = [
            e.decode()
            async for e in ms.core.log.read_subject(ms.core.commands.session_subject(session_id))
        ]
        assert all(isinstance(e, SessionAggregate.MessageAppended) for e in events)
        found[session_id] = [
            e.message_id for e in events if isinstance(e, SessionAggregate.MessageAppended)
        ]
    return found


def _blocks(node: Node, stream: str) -> list[Path]:
    """The stream's message block files in ``node``'s store, in order."""
    folders = list(node.store.glob(f"jetstream/*/streams/{stream}/msgs"))
    assert len(folders) == 1, folders
    return sorted(folders[0].glob("*.blk"), key=lambda path: int(path.stem))


def _damage(blocks: list[Path]) -> str:
    """Truncate the first block to a third of its size and flip every byte of a 4 KiB stretch
    in the middle of the second; say what was done."""
    truncated, flipped = blocks[0], blocks[1]
    size = truncated.stat().st_size
    with truncated.open("r+b") as file:
        file.truncate(size // 3)
    middle = flipped.stat().st_size // 2
    with flipped.open("r+b") as file:
        file.seek(middle)
        stretch = file.read(4096)
        file.seek(middle)
        file.write(bytes(b ^ 0xFF for b in stretch))
    return (
        f"{truncated.name}: {size} -> {size // 3} bytes; "
        f"{flipped.name}: {len(stretch)} bytes flipped at {middle}"
    )


def _news(node: Node, since: int) -> list[str]:
    """What ``node`` logged about its store from line ``since`` on (route chatter left out)."""
    lines = node.log_path.read_text().splitlines()[since:]
    return [line for line in lines if STORE_NEWS.search(line) and "route" not in line.lower()]


async def _copies(cluster: dict[str, Node], stream: str) -> dict[str, dict[str, int]]:
    return {name: await asyncio.to_thread(node.copy_of, stream) for name, node in cluster.items()}


async def _settled_copies(
    cluster: dict[str, Node], stream: str, healthy: dict[str, int]
) -> dict[str, dict[str, int]]:
    """Each server's copy of ``stream`` once all are ``healthy``, or as they are when
    SETTLE_TIMEOUT has passed: a follower the leader counts as current may not have stored the
    last writes yet, so its copy is read again until it has."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while True:
        try:
            copies = await _copies(cluster, stream)
        except AssertionError as missing:  # a restarted server has no copy yet
            copies = {"missing": {"error": str(missing)[:200]}}  # type: ignore[dict-item]
        if copies == dict.fromkeys(cluster, healthy) or time.monotonic() >= deadline:
            return copies
        await asyncio.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize(
    "stop",
    [
        pytest.param(signal.SIGKILL, id="killed"),
        pytest.param(
            signal.SIGTERM,
            id="shut-down",
            marks=pytest.mark.xfail(
                strict=True,
                reason=(
                    "nats-server 2.15.1, restarted after a clean shutdown with damaged blocks, "
                    "counts the lost messages as deleted, reports itself current, never "
                    "repairs its copy from the others, and answers direct gets from it: reads "
                    "through any server miss acknowledged writes"
                ),
            ),
        ),
    ],
)
async def test_a_follower_with_damaged_stream_files_rejoins_with_every_acknowledged_write(
    cluster: dict[str, Node], tmp_path: Path, stop: signal.Signals
) -> None:
    # Given a 3-replica stream holding acknowledged writes on every server
    settings = _replicated(cluster, tmp_path)
    stream = settings.stream
    acknowledged: dict[str, list[str]] = {session_id: [] for session_id in SESSIONS}
    ms = await open_when_placed(settings, workers=True)
    try:
        await _write(ms, 0, BEFORE, acknowledged)
        leader = await _until_replicated(ms)
        # When a follower (not the server this client uses) is stopped and two of its stream's
        # message blocks are damaged: one truncated, one with bytes flipped
        victim = _follower(ms, cluster, leader)
        victim.stop(stop)
        blocks = _blocks(victim, stream)
        assert len(blocks) >= 2, [(b.name, b.stat().st_size) for b in blocks]
        damage = _damage(blocks)
        print(f"\n{victim.name} ({stop.name}; leader {leader}): {len(blocks)} blocks; {damage}")
        log_offset = len(victim.log_path.read_text().splitlines())
        # Then the two others go on taking writes and serving reads
        await _write(ms, BEFORE, WHILE_DOWN, acknowledged)
        assert await _logged(ms) == acknowledged
        # When the damaged follower is started again
        restarted = time.monotonic()
        victim.start()
        await _until_replicated(ms)
        caught_up = time.monotonic() - restarted
        await _write(ms, BEFORE + WHILE_DOWN, AFTER, acknowledged)
        await _until_replicated(ms)
        copies = await _copies(cluster, stream)
        news = _news(victim, log_offset)
        print(f"{victim.name} current {caught_up:.2f} s after its restart; copies: {copies}")
        print("its log:\n" + "\n".join(news[-30:]))
        # Then every acknowledged write is in the log once, however often it is read (a read
        # is answered by any of the servers, the damaged one too)
        for _ in range(READS):
            logged = await _logged(ms)
            for session_id in SESSIONS:
                counts = Counter(logged[session_id])
                assert all(n == 1 for n in counts.values()), session_id
            assert logged == acknowledged
        # And the damaged server's copy of the stream is the others' again
        total = sum(len(ids) for ids in acknowledged.values())
        healthy = {"messages": total, "first_seq": 1, "last_seq": total, "num_deleted": 0}
        copies = await _settled_copies(cluster, stream, healthy)
        assert copies == dict.fromkeys(cluster, healthy)
        # And every acknowledged write is in the read model of the client's projector
        for session_id in SESSIONS:
            history = await ms.session(session_id).get_history()
            assert [m["id"] for m in history] == acknowledged[session_id]
        # And the damaged server, leading the stream, serves the same log to a client that
        # reaches it alone
        reply = await ms.core.nats.request(
            f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}",
            json.dumps({"placement": {"preferred": victim.name}}).encode(),
            timeout=SETTLE_TIMEOUT,
        )
        assert json.loads(reply.data).get("success"), reply.data
    finally:
        await ms.close()
    alone = settings.with_(data_dir=tmp_path / "alone", nats_url=victim.url)
    ms = await open_when_placed(alone, workers=False)
    try:
        assert await _until_replicated(ms) == victim.name
        assert await _logged(ms) == acknowledged
        # And it takes writes as the leader
        await _write(ms, BEFORE + WHILE_DOWN + AFTER, 3, acknowledged)
        assert await _logged(ms) == acknowledged
    finally:
        await ms.close()


@pytest.mark.slow
async def test_a_follower_serving_a_damaged_copy_is_named_by_doctor_and_mended_by_its_command(
    cluster: dict[str, Node], tmp_path: Path
) -> None:
    # Given a 3-replica stream whose follower was shut down cleanly, had two of its message
    # blocks damaged, and was started again (nats-server 2.15.1 then counts what it lost as
    # deleted and reports itself current)
    settings = _replicated(cluster, tmp_path)
    stream = settings.stream
    acknowledged: dict[str, list[str]] = {session_id: [] for session_id in SESSIONS}
    ms = await open_when_placed(settings, workers=False)
    try:
        await _write(ms, 0, BEFORE, acknowledged)
        leader = await _until_replicated(ms)
        victim = _follower(ms, cluster, leader)
        victim.stop(signal.SIGTERM)
        _damage(_blocks(victim, stream))
        victim.start()
        await _until_replicated(ms)
        await _write(ms, BEFORE, AFTER, acknowledged)
        await _until_replicated(ms)
        total = sum(len(ids) for ids in acknowledged.values())
        copies = await _copies(cluster, stream)
        if copies[victim.name]["messages"] == total:
            pytest.skip(f"this nats-server repaired the damaged copy itself: {copies}")
        # When an operator runs memstream doctor with the servers' monitoring endpoints
        monitors = ",".join(f"http://127.0.0.1:{node.http_port}" for node in cluster.values())
        env = clean_env(
            MEMSTREAM_DATA_DIR=str(tmp_path / "operator"),
            MEMSTREAM_NATS_URL=settings.nats_url or "",
            MEMSTREAM_STREAM=stream,
            MEMSTREAM_STREAM_REPLICAS="3",
            MEMSTREAM_NATS_MONITOR_URL=monitors,
        )
        doctor = await asyncio.to_thread(memstream_cli, env, "doctor", expect=1)
        # Then it names the damaged server, what it misses, and the command that mends it
        assert f"server {victim.name}'s copy of stream {stream}" in doctor.stdout, doctor.stdout
        assert f"where another holds {total}" in doctor.stdout
        assert f"stop nats-server {victim.name}, move jetstream/" in doctor.stdout
        status = await asyncio.to_thread(memstream_cli, env, "status", expect=1)
        assert f"server {victim.name}'s copy" in status.stderr
        # When the operator does what it says: the server stopped, its copy moved aside
        victim.stop(signal.SIGTERM)
        (folder,) = victim.store.glob(f"jetstream/*/streams/{stream}")
        folder.rename(folder.with_name(f"{stream}.damaged"))
        victim.start()
        # Then the stream is copied anew and every server's copy holds every write again
        healthy = {"messages": total, "first_seq": 1, "last_seq": total, "num_deleted": 0}
        copies = await _settled_copies(cluster, stream, healthy)
        assert copies == dict.fromkeys(cluster, healthy)
        assert await _logged(ms) == acknowledged
        # and doctor finds nothing wrong with the replicas any more
        after = await asyncio.to_thread(memstream_cli, env, "doctor", "--json", expect=1)
        findings = json.loads(after.stdout)["findings"]
        assert [f for f in findings if f["check"] == "replica" and not f["ok"]] == []
        versions = [f["detail"] for f in findings if f["check"] == "version"]
        assert len(versions) == 1
        assert re.fullmatch(r"nats-server \d+\.\d+\.\d+\S*", versions[0])
    finally:
        await ms.close()
