"""Partition leases in a NATS KV bucket on a real nats-server: an even share per member, one
owner per partition, a dead member's partitions taken over within its lease time, a clean stop
handing them over at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client

from memstream.domain.errors import InvalidInputError
from memstream.workers.leases import PartitionLeases, lease_bucket
from memstream.workers.runtime.nats_server import NatsServerProcess

TTL = 1.5


@pytest.fixture
async def client(nats_server: NatsServerProcess) -> AsyncIterator[Client]:
    connection = await nats.connect(nats_server.url)
    try:
        yield connection
    finally:
        await connection.close()


async def settle(*members: PartitionLeases, partitions: int = 4) -> None:
    """Tick every member until they hold each partition once (bounded)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for member in members:
            await member.tick()
        owned = [p for m in members for p in m.owned]
        if sorted(owned) == list(range(partitions)):
            return
    raise AssertionError([sorted(m.owned) for m in members])


async def test_two_members_share_four_partitions_and_a_dead_ones_are_taken_over(
    client: Client,
) -> None:
    bucket = lease_bucket("T1", "projector-copy")
    changes: list[frozenset[int]] = []
    a = PartitionLeases(client.jetstream(), bucket, "a", 4, ttl=TTL, on_change=changes.append)
    b = PartitionLeases(client.jetstream(), bucket, "b", 4, ttl=TTL)
    await a.start()
    assert a.owned == {0, 1, 2, 3}  # alone: everything
    await b.start()
    await settle(a, b)
    assert len(a.owned) == len(b.owned) == 2
    assert a.owned.isdisjoint(b.owned)
    assert changes[0] == {0, 1, 2, 3}
    assert changes[-1] == a.owned
    # When b dies (stops renewing, releases nothing), a holds all four within the lease time
    await b.stop(release=False)
    started = time.monotonic()
    while a.owned != {0, 1, 2, 3}:
        assert time.monotonic() - started < TTL * 4, sorted(a.owned)
        await asyncio.sleep(0.1)
    await a.stop()


async def test_a_clean_stop_hands_over_at_the_next_tick(client: Client) -> None:
    bucket = lease_bucket("T2", "projector-copy")
    a = PartitionLeases(client.jetstream(), bucket, "a", 3, ttl=TTL)
    b = PartitionLeases(client.jetstream(), bucket, "b", 3, ttl=TTL)
    await a.start()
    await b.start()
    await settle(a, b, partitions=3)
    assert sorted([len(a.owned), len(b.owned)]) == [1, 2]
    await a.stop()
    assert a.owned == frozenset()
    await b.tick()
    assert b.owned == {0, 1, 2}
    # A member that comes back shares again, never holding what the other holds
    c = PartitionLeases(client.jetstream(), bucket, "c", 3, ttl=TTL)
    await c.start()
    await settle(b, c, partitions=3)
    assert b.owned.isdisjoint(c.owned)
    await b.stop()
    await c.stop()


def test_limits_are_checked(client: Client) -> None:
    with pytest.raises(InvalidInputError, match="partitions is 0; it must be between 1 and 1024"):
        PartitionLeases(client.jetstream(), "b", "m", 0)
    with pytest.raises(InvalidInputError, match=r"lease ttl is 0\.1 s"):
        PartitionLeases(client.jetstream(), "b", "m", 4, ttl=0.1)
