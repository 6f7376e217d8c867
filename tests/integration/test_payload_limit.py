"""An external NATS with the default 1 MB max_payload: large events are refused clearly."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstream.client import open_memstream
from memstream.domain.errors import InvalidInputError
from memstream.settings import Settings
from memstream.workers.runtime.nats_server import NatsServerProcess

DEFAULT_MAX_PAYLOAD = 1024 * 1024


@pytest.fixture
def default_nats(tmp_path: Path) -> Iterator[str]:
    """A nats-server with NATS's default max_payload (1 MB), as an external server may have."""
    server = NatsServerProcess.start(tmp_path / "nats", max_payload=DEFAULT_MAX_PAYLOAD)
    try:
        yield server.url
    finally:
        server.stop()


async def test_an_event_over_the_servers_max_payload_is_an_input_error(
    default_nats: str, tmp_path: Path
) -> None:
    # Given a client of a server that accepts at most 1 MB per message
    settings = Settings(
        data_dir=tmp_path / "d", nats_url=default_nats, stream="P" + uuid.uuid4().hex[:8]
    )
    ms = await open_memstream(settings, workers=True)
    try:
        session = ms.session("big")
        await session.append_message({"id": "small", "role": "user", "content": "fits"})
        # When a message within our 1 MiB limit but whose event exceeds the server's limit is sent
        # (1,048,538 bytes of message JSON, plus the event's own fields around it)
        big = {"id": "big", "role": "user", "content": "x" * (1024 * 1024 - 100)}
        with pytest.raises(InvalidInputError, match="max_payload is 1048576"):
            await session.append_message(big)
        # Then nothing was written and the session still works
        await session.append_message({"id": "after", "role": "user", "content": "still fine"})
        assert [m["id"] for m in await session.get_history()] == ["small", "after"]
    finally:
        await ms.close()
