"""The embedded runtime: one nats-server per data dir, found by later processes, taken over."""

from __future__ import annotations

import asyncio
from pathlib import Path

from memstream.client import open_memstream
from memstream.settings import Settings


async def test_second_client_uses_the_running_server_and_takes_over(tmp_path: Path) -> None:
    # Given an owner process on a data dir and a second client on the same data dir
    settings = Settings(data_dir=tmp_path / "data")
    owner = await open_memstream(settings)
    guest = await open_memstream(settings)
    try:
        assert owner.runtime is not None
        assert owner.runtime.owner
        assert guest.runtime is not None
        assert not guest.runtime.owner
        assert guest.runtime.url == owner.runtime.url
        # When the guest writes, the owner's projector serves the guest's read-your-writes
        await guest.session("s").append_message({"id": "m1", "role": "user", "content": "one"})
        assert [m["id"] for m in await guest.session("s").get_history()] == ["m1"]
        # When the owner exits
        await owner.close()
        # Then the guest takes ownership, restarts the server from the same store, runs the
        # projector, and nothing acknowledged is lost
        async with asyncio.timeout(30):
            while True:
                if guest.runtime.owner and guest.projector is not None:
                    break
                await asyncio.sleep(0.05)
            while True:
                try:
                    await guest.session("s").append_message(
                        {"id": "m2", "role": "user", "content": "two"}
                    )
                    break
                except Exception:  # the client reconnects to the restarted server meanwhile
                    await asyncio.sleep(0.1)
        history = await guest.session("s").get_history()
        assert [m["id"] for m in history] == ["m1", "m2"]
    finally:
        await guest.close()
        await owner.close()
