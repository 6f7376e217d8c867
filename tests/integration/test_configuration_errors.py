"""Configuration mistakes are user errors (InvalidInputError) with one clear message."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from memstream.client import open_memstream
from memstream.domain.errors import InvalidInputError
from memstream.settings import Settings
from memstream.workers.log.event_log import connect_nats
from memstream.workers.runtime.nats_server import NatsServerProcess


@pytest.mark.parametrize("name", ["a.b", "a b", "x>", "a*", "a/b", "", "tab\there"])
def test_a_stream_name_jetstream_refuses_is_refused_by_name(name: str) -> None:
    with pytest.raises(InvalidInputError, match=r"^stream "):
        Settings.from_env({"MEMSTREAM_STREAM": name})
    assert Settings.from_env({"MEMSTREAM_STREAM": "T0_ok-Name"}).stream == "T0_ok-Name"


async def test_a_second_stream_over_the_same_subjects_is_a_user_error(
    settings: Settings, tmp_path: Path
) -> None:
    # Given a server that already holds memstream's stream
    first = await open_memstream(settings, workers=False)
    try:
        # When another stream name is configured against it
        other = settings.with_(stream="OTHER", data_dir=tmp_path / "other")
        with pytest.raises(InvalidInputError, match="cannot create or configure stream 'OTHER'"):
            await open_memstream(other, workers=False)
    finally:
        await first.close()


async def test_credentials_without_nkeys_are_a_user_error(
    nats_server: NatsServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    creds = tmp_path / "user.creds"
    creds.write_text("-----BEGIN NATS USER JWT-----\nx\n------END NATS USER JWT------\n")
    # nkeys is a dependency now; hide it, as in an environment installed without it
    monkeypatch.setitem(sys.modules, "nkeys", None)
    with pytest.raises(InvalidInputError, match="need the nkeys package: pip install nkeys"):
        await connect_nats(nats_server.url, creds=str(creds))
