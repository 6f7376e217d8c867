"""Read-your-writes is bounded: with no projector keeping up, reads fail with a clear error."""

from __future__ import annotations

import time

import pytest

from memstream.client import open_memstream
from memstream.domain.errors import ProjectionLagError
from memstream.settings import Settings


async def test_a_read_whose_projection_lags_raises_projection_lag_error(settings: Settings) -> None:
    # Given a client with no projector anywhere and a short read timeout
    ms = await open_memstream(settings.with_(read_timeout=0.3), workers=False)
    try:
        session = ms.session("s")
        seq = await session.append_message({"id": "m1", "role": "user", "content": "hi"})
        # When it reads its own write
        started = time.monotonic()
        with pytest.raises(ProjectionLagError) as raised:
            await session.get_history()
        # Then it waited about the timeout, not forever, and the error names the projection
        assert time.monotonic() - started < 5
        assert raised.value.projection == "sessions"
        assert raised.value.wanted == seq
        assert raised.value.reached == 0
        assert "'sessions'" in str(raised.value)
    finally:
        await ms.close()


@pytest.mark.sqlite_only
async def test_reads_use_the_idle_projector_connection_of_their_process(settings: Settings) -> None:
    # The projector's connection has a warm page cache; the client's own connection loses its
    # cache at each of the projector's commits.
    ms = await open_memstream(settings, workers=True)
    try:
        projector = ms.core.workers.projector
        assert projector is not None
        session = ms.session("s")
        for n in range(20):
            await session.append_message({"id": f"m{n}", "role": "user", "content": f"hi {n}"})
            history = await session.get_history()
            assert [m["id"] for m in history] == [f"m{i}" for i in range(n + 1)]
            assert ms.core.reads.read_models.reads.current() is projector.store.connection
        # While a batch is being applied the projector's connection is not lent.
        projector._applying = True
        assert ms.core.reads.read_models.reads.current() is ms.core.reads.read_models.connection
        projector._applying = False
    finally:
        await ms.close()
    assert projector.idle_store() is None  # a closed projector lends nothing


@pytest.mark.sqlite_only
async def test_reads_without_a_projector_here_use_their_own_connection(
    settings: Settings,
) -> None:
    writer = await open_memstream(settings, workers=True)
    reader = await open_memstream(settings, workers=False)
    try:
        await writer.session("s").append_message({"id": "m1", "role": "user", "content": "hi"})
        await reader.sync("sessions")
        assert [m["id"] for m in await reader.session("s").get_history()] == ["m1"]
        assert (
            reader.core.reads.read_models.reads.current()
            is reader.core.reads.read_models.connection
        )
    finally:
        await reader.close()
        await writer.close()
