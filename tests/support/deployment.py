"""One memstream deployment per test: its own stream and subject prefix (so that the tests of a
worker share one nats-server), its own data dir, and the environment of its processes."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import nats
from support.processes import clean_env

from memstream.settings import Settings


def unique_stream(initial: str = "T") -> str:
    """A stream name no other test uses (``initial`` tells whose it is in a server's list)."""
    return initial + uuid.uuid4().hex[:12].upper()


def unique_subject_prefix() -> str:
    """A subject prefix no other test uses: two streams on one server cannot share subjects."""
    return "t" + uuid.uuid4().hex[:12]


def deployment_settings(nats_url: str, data_dir: Path, **changes: Any) -> Settings:
    """Settings of a new deployment on ``nats_url``: a unique stream and subject prefix, read
    models in ``data_dir`` (``changes`` override any field)."""
    fields: dict[str, Any] = {
        "data_dir": data_dir,
        "nats_url": nats_url,
        "stream": unique_stream(),
        "subject_prefix": unique_subject_prefix(),
    }
    return Settings(**(fields | changes))


def deployment_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a CLI or worker process of ``settings``' deployment (the test
    process's own ``MEMSTREAM_*`` variables removed), plus ``extra``."""
    env = {
        "MEMSTREAM_DATA_DIR": str(settings.data_dir),
        "MEMSTREAM_STREAM": settings.stream,
        "MEMSTREAM_SUBJECT_PREFIX": settings.subject_prefix,
    }
    if settings.nats_url is not None:
        env["MEMSTREAM_NATS_URL"] = settings.nats_url
    if settings.database_url is not None:
        env["MEMSTREAM_DATABASE_URL"] = settings.database_url
    if settings.stream_partitions:
        env["MEMSTREAM_STREAM_PARTITIONS"] = str(settings.stream_partitions)
    return clean_env(**(env | extra))


async def delete_streams(url: str) -> list[str]:
    """Delete every stream on the server at ``url`` (KV buckets too: they are streams); the
    names deleted."""
    client = await nats.connect(url, connect_timeout=5, allow_reconnect=False)
    try:
        js = client.jetstream()
        names = [info.config.name for info in await js.streams_info()]
        for name in names:
            await js.delete_stream(str(name))
        return [str(name) for name in names]
    finally:
        await client.close()
