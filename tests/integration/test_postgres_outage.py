"""PostgreSQL going away under a running client and projector, and coming back: writes keep
going to the log, reads fail in time naming the database (password masked), and the projection
resumes without loss or doubles once the server returns."""

from __future__ import annotations

import asyncio
import time
import traceback
from pathlib import Path

import pytest
from support.deployment import deployment_settings
from support.postgres_server import PrivatePostgres

from memstream.client import open_memstream
from memstream.domain.errors import UnavailableError
from memstream.projections.postgres.copy import PostgresCopy
from memstream.workers.admin.rebuild import verify
from memstream.workers.runtime.nats_server import NatsServerProcess

pytestmark = pytest.mark.postgres
SECRET = "pw-4411-secret"


async def test_the_projection_resumes_without_loss_when_postgresql_returns(
    tmp_path: Path,
    nats_server: NatsServerProcess,
    private_postgres: PrivatePostgres,
) -> None:
    url = private_postgres.url(SECRET)  # trust auth: the password is sent and ignored
    settings = deployment_settings(
        nats_server.url, tmp_path / "data", database_url=url, read_timeout=3.0
    )
    client = await open_memstream(settings, workers=True)
    try:
        session = client.session("s")
        for i in range(20):
            await session.append_message({"id": f"m{i}", "role": "user", "content": f"#{i}"})
        assert len(await session.get_history()) == 20
        # When PostgreSQL goes away mid-conversation
        private_postgres.stop()
        # Then writes still go to the log (the only source of truth)
        for i in range(20, 60):
            await session.append_message({"id": f"m{i}", "role": "user", "content": f"#{i}"})
        # And a read fails within its timeout, naming the database with its password masked
        started = time.monotonic()
        with pytest.raises(UnavailableError) as caught:
            await session.get_history()
        assert time.monotonic() - started < settings.read_timeout + 2
        shown = "".join(traceback.format_exception(caught.value))
        assert SECRET not in shown
        assert f"127.0.0.1:{private_postgres.port}" in str(caught.value)
        # When PostgreSQL comes back
        private_postgres.start()
        # Then the projection resumes: every message once, in order
        expected = [f"m{i}" for i in range(60)]
        deadline = time.monotonic() + 30
        while True:
            try:
                history = [m["id"] for m in await session.get_history()]
            except UnavailableError:  # the projector may still be retrying its batch
                history = []
            if history == expected or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert history == expected
        # And writes are decided on the read model again
        await session.append_message({"id": "m60", "role": "user", "content": "back"})
        assert [m["id"] for m in await session.get_history()][-1] == "m60"
        results = await verify(client.core.log, PostgresCopy(url))
        assert all(r.ok for r in results), results
    finally:
        await client.close()


def test_a_private_server_leaves_nothing_behind() -> None:
    server = PrivatePostgres()
    server.start()
    root = server.root
    assert (root / "data" / "PG_VERSION").exists()
    server.close()
    assert not root.exists()
