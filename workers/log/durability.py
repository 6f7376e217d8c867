"""What an acknowledged write survives: the log servers' fsync policy, as far as it can be read.

nats-server acknowledges a JetStream write once it is in its store, and by default writes the
store to disk every 2 minutes (``sync_interval``): an OS crash or a power loss then loses writes
that were acknowledged. memstream starts its servers with ``sync_interval: always``
(:func:`~memstream.workers.runtime.nats_server.sync_config`). Of a server it did not start,
the policy is known only through the server's monitoring endpoint (``/varz``), when the
settings name it (``MEMSTREAM_NATS_MONITOR_URL``).
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from memstream.domain.errors import InvalidInputError
from memstream.domain.redaction import redact_url
from memstream.workers.runtime.nats_server import SYNC_ALWAYS

# nats-server's own default when a config says nothing.
DEFAULT_SYNC = "2m (nats-server's default)"
MONITOR_TIMEOUT = 2.0
# The /varz document of a busy server is a few KiB; read no more than this.
VARZ_MAX_BYTES = 1 << 20
# A /jsz document lists every stream of the server: read no more than this.
JSZ_MAX_BYTES = 8 << 20
_SYNC_LINE = re.compile(r"^\s*sync_interval\s*:\s*([^\s#}]+)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class ServerSync:
    """One log server's fsync policy: ``always``, an interval, or ``None`` (not known), and
    where that was read (``source``)."""

    server: str
    policy: str | None
    source: str

    @property
    def durable(self) -> bool | None:
        """Whether an acknowledged write is on disk (``None``: not known)."""
        return None if self.policy is None else self.policy == SYNC_ALWAYS

    def describe(self) -> str:
        if self.policy is None:
            return f"{self.server}: fsync policy unknown ({self.source})"
        if self.durable:
            return f"{self.server}: syncs every write before acknowledging it ({self.source})"
        return (
            f"{self.server}: sync_interval {self.policy}: an acknowledged write reaches disk only "
            f"later, and an OS crash or power loss can lose it ({self.source})"
        )


def configured_sync(config: Path) -> str | None:
    """The ``sync_interval`` a nats-server config file sets (its default when it sets none);
    ``None`` when the file cannot be read."""
    try:
        text = config.read_text(encoding="utf-8")
    except OSError:
        return None
    found = _SYNC_LINE.search(text)
    return DEFAULT_SYNC if found is None else found.group(1).strip("\"'")


def check_monitor_url(url: str) -> str:
    """A monitoring endpoint's URL, checked: ``http`` or ``https`` with a host.

    Raises:
        InvalidInputError: anything else (named with the setting and the redacted value).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInputError(
            f"nats_monitor_url (MEMSTREAM_NATS_MONITOR_URL) is {redact_url(url)!r}; it must be "
            "an http(s) URL of a nats-server monitoring endpoint, e.g. http://127.0.0.1:8222"
        )
    return url.rstrip("/")


def _varz_sync(url: str) -> ServerSync:
    """Read one server's ``/varz`` (blocking; bounded by :data:`MONITOR_TIMEOUT`)."""
    shown = redact_url(url)
    try:
        with urllib.request.urlopen(f"{url}/varz", timeout=MONITOR_TIMEOUT) as answer:
            varz = json.loads(answer.read(VARZ_MAX_BYTES))
    except (OSError, ValueError) as error:
        return ServerSync(shown, None, f"cannot read {shown}/varz: {type(error).__name__}")
    name = str(varz.get("server_name") or shown)
    config = (varz.get("jetstream") or {}).get("config") or {}
    if config.get("sync_always"):
        return ServerSync(name, SYNC_ALWAYS, f"{shown}/varz")
    interval = config.get("sync_interval")
    policy = f"{int(interval) / 1e9:g}s" if isinstance(interval, int | float) else DEFAULT_SYNC
    return ServerSync(name, policy, f"{shown}/varz")


async def monitored_sync(urls: str) -> list[ServerSync]:
    """Each monitoring endpoint's server policy (``urls``: comma-separated)."""
    checked = [check_monitor_url(u.strip()) for u in urls.split(",") if u.strip()]
    return list(await asyncio.gather(*(asyncio.to_thread(_varz_sync, u) for u in checked)))


@dataclass(frozen=True, slots=True)
class StreamCopy:
    """One server's own copy of the stream, as its monitoring endpoint (``/jsz``) reports it:
    its messages, its sequence range and how many sequences in between it counts as deleted."""

    server: str
    messages: int
    first_seq: int
    last_seq: int
    deleted: int


def _read_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=MONITOR_TIMEOUT) as answer:
        found = json.loads(answer.read(JSZ_MAX_BYTES))
    if not isinstance(found, dict):
        raise ValueError(f"{redact_url(url)} did not answer a JSON object")
    return found


def _jsz_copy(url: str, stream: str) -> StreamCopy | None:
    """One server's copy of ``stream`` (blocking; bounded); ``None`` when the endpoint cannot
    be read or the server holds no copy."""
    try:
        name = str(_read_json(f"{url}/varz").get("server_name") or redact_url(url))
        report = _read_json(f"{url}/jsz?streams=true")
    except (OSError, ValueError):
        return None
    accounts = report.get("account_details")
    for account in accounts if isinstance(accounts, list) else []:
        details = account.get("stream_detail") if isinstance(account, dict) else None
        for detail in details if isinstance(details, list) else []:
            if not isinstance(detail, dict) or detail.get("name") != stream:
                continue
            state = detail.get("state") or {}
            return StreamCopy(
                name,
                int(state.get("messages") or 0),
                int(state.get("first_seq") or 0),
                int(state.get("last_seq") or 0),
                int(state.get("num_deleted") or 0),
            )
    return None


async def monitored_copies(urls: str, stream: str) -> list[StreamCopy]:
    """Each monitored server's copy of ``stream`` (``urls``: comma-separated endpoints; those
    that cannot be read, or hold no copy, are left out)."""
    checked = [check_monitor_url(u.strip()) for u in urls.split(",") if u.strip()]
    found = await asyncio.gather(*(asyncio.to_thread(_jsz_copy, u, stream) for u in checked))
    return [copy for copy in found if copy is not None]


def missing_events(copies: Sequence[StreamCopy], stream: str) -> list[tuple[str, str]]:
    """Copies that end where the fullest copy ends yet hold fewer messages: the others hold
    events these count as deleted, which a deletion on purpose (a purge) never leaves (it
    deletes on every replica). What a store whose files were damaged serves after a restart
    (nats-server 2.15.1 counts what it lost as deleted and reports itself current). A copy
    that ends earlier is catching up, not damaged: the replica's lag names it. Each such
    server, with a line that says what it misses."""
    if len(copies) < 2:
        return []
    end = max(copy.last_seq for copy in copies)
    fullest = max(copy.messages for copy in copies if copy.last_seq == end)
    return [
        (
            copy.server,
            f"server {copy.server}'s copy of stream {stream} holds {copy.messages} messages up "
            f"to sequence {end} where another holds {fullest}: {fullest - copy.messages} events "
            f"acknowledged earlier are missing from its store (damaged files?), and reads it "
            f"answers miss them",
        )
        for copy in copies
        if copy.last_seq == end and copy.messages < fullest
    ]
