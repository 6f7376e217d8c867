"""Settings: read once from the environment in entry points, then passed down explicitly."""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from memstream.domain.errors import InvalidInputError
from memstream.domain.limits import (
    ACTOR_MAX_CHARS,
    MAX_PARTITIONS,
    check_actor,
    check_int,
    check_namespace,
    check_stream_name,
    check_subject_prefix,
)
from memstream.domain.redaction import MASK, redact_url
from memstream.workers.log.durability import check_monitor_url
from memstream.workers.runtime.nats_server import SYNC_ALWAYS, check_sync

_SECRETS = frozenset({"nats_password", "nats_token", "llm_api_key"})
_URLS = frozenset({"nats_url", "database_url", "llm_url", "nats_monitor_url"})
# JetStream keeps a stream on 1 to 5 servers (odd counts keep a majority through a failure).
STREAM_REPLICAS_MAX = 5
_REPLICAS_NAME = "stream_replicas (MEMSTREAM_STREAM_REPLICAS)"
_PARTITIONS_NAME = "stream_partitions (MEMSTREAM_STREAM_PARTITIONS)"


@dataclass(frozen=True, slots=True, repr=False)
class Settings:
    """Everything configurable about a memstream deployment (its repr masks credentials)."""

    data_dir: Path = Path(".memstream")
    nats_url: str | None = None
    nats_creds: str | None = None
    nats_user: str | None = None
    nats_password: str | None = None
    nats_token: str | None = None
    database_url: str | None = None
    stream: str = "MEMSTREAM"
    # The first token of every subject memstream writes (``<prefix>.<namespace>.<kind>.<id>``):
    # deployments that share one NATS account keep apart by stream and prefix.
    subject_prefix: str = "ms"
    stream_replicas: int = 1  # servers holding the stream, when memstream creates or scales it
    # Partitions of a stream memstream creates (0: none); an existing stream keeps its own.
    stream_partitions: int = 0
    namespace: str = "default"
    embedding_model: str | None = None
    llm_url: str | None = None
    llm_model: str | None = None
    llm_api_key: str | None = None
    read_timeout: float = 10.0
    write_timeout: float = 5.0
    actor: str | None = None  # recorded in every event; None: the OS user and host
    # JetStream's fsync policy on the servers memstream starts: "always" (a write is on disk
    # before its acknowledgement) or a duration that relaxes it (see docs/durability.md).
    nats_sync: str = SYNC_ALWAYS
    # Monitoring endpoints of an external cluster's servers (comma-separated http URLs): where
    # `memstream status` and `doctor` read their fsync policy.
    nats_monitor_url: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from ``MEMSTREAM_*`` variables; explicit overrides win when not None."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {
            "data_dir": Path(env.get("MEMSTREAM_DATA_DIR", ".memstream")),
            "nats_url": env.get("MEMSTREAM_NATS_URL") or None,
            "nats_creds": env.get("MEMSTREAM_NATS_CREDS") or None,
            "nats_user": env.get("MEMSTREAM_NATS_USER") or None,
            "nats_password": env.get("MEMSTREAM_NATS_PASSWORD") or None,
            "nats_token": env.get("MEMSTREAM_NATS_TOKEN") or None,
            "database_url": env.get("MEMSTREAM_DATABASE_URL") or None,
            "stream": env.get("MEMSTREAM_STREAM", "MEMSTREAM"),
            "subject_prefix": env.get("MEMSTREAM_SUBJECT_PREFIX") or "ms",
            "stream_replicas": _replicas(env.get("MEMSTREAM_STREAM_REPLICAS") or "1"),
            "stream_partitions": _count(
                _PARTITIONS_NAME, env.get("MEMSTREAM_STREAM_PARTITIONS") or "0"
            ),
            "namespace": env.get("MEMSTREAM_NAMESPACE", "default"),
            "embedding_model": env.get("MEMSTREAM_EMBEDDING_MODEL") or None,
            "llm_url": env.get("MEMSTREAM_LLM_URL") or None,
            "llm_model": env.get("MEMSTREAM_LLM_MODEL") or None,
            "llm_api_key": env.get("MEMSTREAM_LLM_API_KEY") or None,
            "actor": env.get("MEMSTREAM_ACTOR") or None,
            "nats_sync": env.get("MEMSTREAM_NATS_SYNC") or SYNC_ALWAYS,
            "nats_monitor_url": env.get("MEMSTREAM_NATS_MONITOR_URL") or None,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        if "data_dir" in overrides and overrides["data_dir"] is not None:
            values["data_dir"] = Path(overrides["data_dir"])
        settings = cls(**values)
        check_namespace(settings.namespace)
        check_stream_name(settings.stream)
        check_subject_prefix(settings.subject_prefix)
        check_int(_REPLICAS_NAME, settings.stream_replicas, minimum=1, maximum=STREAM_REPLICAS_MAX)
        check_int(_PARTITIONS_NAME, settings.stream_partitions, minimum=0, maximum=MAX_PARTITIONS)
        if settings.actor is not None:
            check_actor(settings.actor)
        for url in (settings.nats_monitor_url or "").split(","):
            if url.strip():
                check_monitor_url(url.strip())
        return replace(settings, nats_sync=check_sync(settings.nats_sync))

    def __repr__(self) -> str:
        shown = []
        for field in fields(self):
            value = getattr(self, field.name)
            if value is not None and field.name in _SECRETS:
                value = MASK
            elif isinstance(value, str) and field.name in _URLS:
                value = ",".join(redact_url(url) for url in value.split(","))  # a server list
            shown.append(f"{field.name}={value!r}")
        return f"Settings({', '.join(shown)})"

    def with_(self, **changes: Any) -> Settings:
        """A copy with some fields changed."""
        return replace(self, **changes)

    @property
    def database_path(self) -> Path:
        """The SQLite read-model database in the data dir."""
        return self.data_dir / "memstream.db"


def _replicas(text: str) -> int:
    """``MEMSTREAM_STREAM_REPLICAS`` as a number (its range is checked with the other limits)."""
    try:
        return int(text)
    except ValueError:
        raise InvalidInputError(
            f"{_REPLICAS_NAME} is {text!r}; it must be an integer between 1 and "
            f"{STREAM_REPLICAS_MAX}"
        ) from None


def _count(name: str, text: str) -> int:
    """A whole-number variable (its range is checked with the other limits)."""
    try:
        return int(text)
    except ValueError:
        raise InvalidInputError(f"{name} is {text!r}; it must be an integer") from None


def default_actor() -> str:
    """Who causes events when nobody says: the OS user and host (``user@host``)."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment (getpass raises OSError or KeyError)
        user = "unknown"
    text = f"{user}@{socket.gethostname() or 'localhost'}"
    printable = "".join(char for char in text if char.isprintable())
    return printable[:ACTOR_MAX_CHARS] or "memstream"
