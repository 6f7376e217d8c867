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
