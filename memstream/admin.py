"""Administration from Python: what the ``memstream`` CLI does, as functions of a client.

Each function takes a connected client (``memstream.connect()``; a client that should report a
read model ahead of the log rather than refuse it is opened with
``memstream.client.open_memstream(settings, check_log=False)``, as the CLI's ``status``,
``doctor`` and ``projections`` commands do) and returns plain result objects; the CLI only
parses arguments and prints these. Example::

    from memstream import admin

    async with memstream.connect(workers=False) as ms:
        report = await admin.status(ms)
        for finding in await admin.doctor(ms):
            print(finding.check, finding.ok, finding.mend)
        trail = await admin.session_trail(ms, "chat-1")
        check = await admin.verify(ms)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from memstream.client import Memstream
from memstream.domain.errors import NotFoundError, ReadModelAheadError
from memstream.domain.redaction import redact_url
from memstream.projections.analytics_rows import DIMENSIONS, grouped
from memstream.projections.overview import session_overview as _session_overview
from memstream.projections.ports import (
    ContextQueries,
    Difference,
    ReadModelCopy,
    ReadModels,
    SessionQueries,
)
from memstream.projections.read_models import open_read_models, read_models_at
from memstream.projections.registry import MODEL_FREE_PROJECTIONS, PROJECTIONS
from memstream.settings import Settings
from memstream.workers.admin.audit import (
    AGGREGATE_KINDS,
    AuditEvent,
    EventQuery,
    read_events,
    subject_filter,
    tail_events,
)
from memstream.workers.admin.audit import memory_trail as _memory_trail
from memstream.workers.admin.audit import session_trail as _session_trail
from memstream.workers.admin.doctor import SAMPLE_SECONDS, Finding, diagnose
from memstream.workers.admin.event_transfer import ImportResult
from memstream.workers.admin.event_transfer import import_events as _import_events
from memstream.workers.admin.purge import COPIES_WAIT, PurgeReport, check_wait, parse_duration
from memstream.workers.admin.purge import purge as _purge
from memstream.workers.admin.rebuild import VerifyResult, repair
from memstream.workers.admin.rebuild import rebuild as _rebuild
from memstream.workers.admin.rebuild import verify as _verify
from memstream.workers.admin.status import (
    PlatformStatus,
    ProjectionStatus,
    platform_status,
    profiles_last_seq,
    projection_statuses,
)
from memstream.workers.admin.status import forget_copy as _forget_copy
from memstream.workers.admin.time_travel import (
    as_of_reads,
    build_as_of,
    clear_cache,
    parse_as_of,
    sequence_as_of,
)
from memstream.workers.log.codec import CommandMeta
from memstream.workers.log.durability import (
    ServerSync,
    StreamCopy,
    configured_sync,
    monitored_copies,
    monitored_sync,
)
from memstream.workers.log.event_log import nats_servers
from memstream.workers.log.server_version import server_version
from memstream.workers.runtime.nats_server import CONFIG_FILE

__all__ = [
    "AGGREGATE_KINDS",
    "COPIES_WAIT",
    "DIMENSIONS",
    "MODEL_FREE_PROJECTIONS",
    "PROJECTIONS",
    "AsOfReads",
    "AuditEvent",
    "ContextQueries",
    "Difference",
    "EventQuery",
    "Finding",
    "ImportResult",
    "PlatformStatus",
    "ProjectionStatus",
    "PurgeReport",
    "SessionQueries",
    "Verification",
    "VerifyResult",
    "as_of",
    "check_wait",
    "doctor",
    "event_at",
    "events",
    "export_events",
    "forget_copy",
    "grouped",
    "import_events",
    "memory_trail",
    "parse_as_of",
    "parse_duration",
    "projections",
    "purge",
    "read_model_copy",
    "rebuild",
    "repair",
    "session_overview",
    "session_trail",
    "status",
    "subject_filter",
    "tail",
    "verify",
]

Progress = Callable[[int, int], None]


# -- the platform ------------------------------------------------------------------------------


async def _stream_copies(ms: Memstream) -> list[StreamCopy]:
    """Each server's own copy of the stream, read from the monitoring endpoints the
    settings name (``MEMSTREAM_NATS_MONITOR_URL``); none without them."""
    if not ms.settings.nats_monitor_url:
        return []
    return await monitored_copies(ms.settings.nats_monitor_url, ms.core.log.stream)


async def _durability(ms: Memstream) -> list[ServerSync]:
    """Each log server's fsync policy, as far as it can be read: the embedded server's from
    the config this data dir gave it, an external cluster's from the monitoring endpoints
    the settings name (``MEMSTREAM_NATS_MONITOR_URL``), else unknown."""
    settings = ms.settings
    if ms.core.runtime is not None:
        path = settings.data_dir / CONFIG_FILE
        policy = await asyncio.to_thread(configured_sync, path)
        return [ServerSync("embedded nats-server", policy, f"its config {path}")]
    if settings.nats_monitor_url:
        return await monitored_sync(settings.nats_monitor_url)
    return [
        ServerSync(
            ",".join(redact_url(u) for u in nats_servers(settings.nats_url or "")),
            None,
            "set MEMSTREAM_NATS_MONITOR_URL to the servers' monitoring endpoints to check it",
        )
    ]


async def status(ms: Memstream, *, dead_letters: int = 5) -> PlatformStatus:
    """The stream, its consumers, each projection's position and lag, the latest
    ``dead_letters`` dead letters, the servers' fsync policy and the stream's replicas; its
    ``problems`` name what is wrong."""
    return await platform_status(
        ms.core.log,
        ms.core.reads.read_models,
        dead_letter_limit=dead_letters,
        durability=await _durability(ms),
        stream_copies=await _stream_copies(ms),
    )


async def doctor(ms: Memstream) -> list[Finding]:
    """Every check of ``memstream doctor`` (fsync policy, the read model against the log, dead
    letters, lag sampled twice when there is any, replicas, server versions), each with the
    command that mends it when it is wrong."""
    durability = await _durability(ms)
    first = await platform_status(ms.core.log, ms.core.reads.read_models, durability=durability)
    await asyncio.sleep(SAMPLE_SECONDS if any(p.lag for p in first.projections) else 0)
    second = await platform_status(
        ms.core.log,
        ms.core.reads.read_models,
        durability=durability,
        stream_copies=await _stream_copies(ms),
    )
    reported = server_version(ms.core.nats)
    runtime = ms.core.runtime
    return diagnose(
        first,
        second,
        embedded=runtime is not None,
        idle=runtime is not None and runtime.owner,
        versions={"nats-server": "unknown" if reported is None else reported[1]},
    )


# -- read models -------------------------------------------------------------------------------


async def projections(ms: Memstream) -> list[ProjectionStatus]:
    """Each projection of this client's read-model copy: the sequence it has applied, its lag."""
    return projection_statuses(
        ms.core.reads.read_models,
        await ms.core.log.stream_last_seq(),
        await profiles_last_seq(ms.core.log),
        await ms.core.log.partition_ends(),
    )


def read_model_copy(settings: Settings, into: str | None = None) -> ReadModelCopy:
    """The read-model copy ``settings`` name, or another one (``into``: a ``postgresql://`` URL
    or libpq string, a SQLite file or a data dir). Opens nothing yet: :func:`repair` it before
    connecting (a client fails on a damaged copy), then :func:`rebuild` it."""
    return open_read_models(settings) if into is None else read_models_at(into)


async def rebuild(
    ms: Memstream,
    copy: ReadModelCopy,
    names: Sequence[str] | None = None,
    *,
    as_of: int | datetime | None = None,
    progress: Progress | None = None,
) -> int:
    """Drop ``names`` (default: all) in ``copy`` and replay the log into them; with ``as_of``
    (a sequence or a time, :func:`parse_as_of`) the copy holds them as they were then. Returns
    the sequence reached."""
    chosen = list(names) if names else None
    if as_of is not None:
        seq = await sequence_as_of(ms.core.log, as_of)
        return await build_as_of(ms.core.log, copy, seq, chosen, progress=progress)
    # With the embedding model (loaded only if there are texts): vectors too.
    return await _rebuild(
        ms.core.log, copy, chosen, progress=progress, encoder=ms.core.recall.encoder
    )


@dataclass(frozen=True, slots=True)
class Verification:
    """What :func:`verify` found: each projection's checksums, and whether its live model was
    at the sequence verified (only then are its checksums compared)."""

    results: list[VerifyResult]
    comparable: dict[str, bool]

    @property
    def different(self) -> list[str]:
        """The projections whose live checksums differ from the log's."""
        return [r.projection for r in self.results if self.comparable[r.projection] and not r.ok]


async def verify(
    ms: Memstream,
    names: Sequence[str] | None = None,
    *,
    as_of: int | None = None,
    progress: Progress | None = None,
) -> Verification:
    """Compare the checksums of the live read models with a scratch rebuild from the log (at
    ``as_of``, a sequence, if given). By default the projector's projections, and analytics
    where this client counts them; ``vectors`` embeds every text again.

    Raises:
        ReadModelAheadError: the copy holds events the log does not.
    """
    gap = ms.core.reads.found_ahead
    if gap is not None:
        location = ms.core.reads.copy.location
        if ms.core.workers.projector is not None and ms.settings.database_url is None:
            # The embedded default's projector (this process's) moves it aside now.
            raise ReadModelAheadError(
                f"read model {location}: {gap.describe()}; it was moved aside and is "
                "rebuilt from the log"
            )
        raise ReadModelAheadError(gap.refusal(location))
    encoder = ms.core.recall.encoder if names and "vectors" in names else None
    chosen = list(names) if names else None
    if not chosen and ms.core.workers.analytics is not None:  # counted here: verified too
        chosen = list(MODEL_FREE_PROJECTIONS)
    results = await _verify(
        ms.core.log, ms.core.reads.copy, chosen, as_of=as_of, progress=progress, encoder=encoder
    )
    tracked = {s.name: s.tracked_seq for s in projection_statuses(ms.core.reads.read_models, 0)}
    comparable = {}
    for result in results:
        # By partition, a partition's row stays at its last event: the model is at
        # result.seq when none is past it (verify waited for each partition's last event).
        partitions = ms.core.reads.read_models.tracked_partitions(result.projection)
        comparable[result.projection] = (
            max(partitions.values()) <= result.seq and as_of is None
            if partitions
            else tracked[result.projection] == result.seq
        )
    return Verification(results, comparable)


async def forget_copy(ms: Memstream, copy_id: str) -> list[str]:
    """Delete the durable consumers of a read-model copy that no longer exists (this client's
    own is refused); returns their names."""
    return await _forget_copy(ms.core.log, copy_id, local=ms.core.reads.copy_id)


@dataclass(frozen=True, slots=True)
class AsOfReads:
    """Read models as of ``seq`` (:func:`as_of`): close them when done."""

    seq: int
    sessions: SessionQueries
    context: ContextQueries
    models: ReadModels

    def close(self) -> None:
        self.models.close()


async def as_of(
    ms: Memstream, when: int | datetime, *, progress: Progress | None = None
) -> AsOfReads:
    """The session and context read models as they were at ``when`` (a sequence or a time,
    :func:`parse_as_of`), from a copy built once and cached under the data dir."""
    seq, models = await as_of_reads(ms.core.log, ms.settings.data_dir, when, progress=progress)
    return AsOfReads(seq, models.sessions, models.context, models)


async def session_overview(ms: Memstream, session_id: str) -> dict[str, Any]:
    """A session's counts, latest leaf, compactions, context blocks and registration.

    Raises:
        NotFoundError: no such session in the client's namespace.
    """
    await ms.sync("sessions")
    await ms.sync("context")
    overview = _session_overview(
        ms.core.reads.session_queries, ms.core.reads.context_queries, ms.namespace, session_id
    )
    if overview is None:
        raise NotFoundError(f"session {session_id!r} not found in namespace {ms.namespace!r}")
    return overview


# -- the log -----------------------------------------------------------------------------------


async def purge(
    ms: Memstream, older_than: str, *, dry_run: bool = False, wait: float = COPIES_WAIT
) -> PurgeReport:
    """Erase from the stream the events of sessions and profiles deleted longer ago than
    ``older_than`` (``30d``, ``12h``, ``0s``), recorded first as a purge event of the
    namespace with the client's actor; with ``dry_run`` only report them. Cached ``--as-of``
    copies of this data dir are deleted once anything was erased."""
    report = await _purge(
        ms.core.log, older_than, meta=CommandMeta(actor=ms.actor), dry_run=dry_run, wait=wait
    )
    if not dry_run and report.records:
        clear_cache(ms.settings.data_dir)
    return report


async def session_trail(ms: Memstream, session_id: str) -> list[AuditEvent]:
    """Every event that shaped a session, oldest first: messages, overlays, prompt, skills,
    registration and its built-in context blocks."""
    await ms.sync("context")  # (the session's block labels)
    labels = [b["label"] for b in ms.core.reads.context_queries.blocks(ms.namespace, session_id)]
    return await _session_trail(ms.core.log, ms.namespace, session_id, labels)


async def memory_trail(
    ms: Memstream, memory_id: str, profile: str | None = None
) -> list[AuditEvent]:
    """Every event that shaped a memory, oldest first (``profile``: read only its events)."""
    return await _memory_trail(ms.core.log, ms.namespace, memory_id, profile)


def events(ms: Memstream, query: EventQuery) -> AsyncIterator[AuditEvent]:
    """The events ``query`` selects, in log order, up to the log's end when it starts."""
    return read_events(ms.core.log, query)


def tail(
    ms: Memstream, query: EventQuery, *, count: int, follow: bool = False
) -> AsyncIterator[AuditEvent]:
    """The last ``count`` events ``query`` selects (or all from its ``from_seq``), then, with
    ``follow``, each new one as it is stored."""
    return tail_events(ms.core.log, query, count=count, follow=follow)


async def event_at(ms: Memstream, seq: int) -> AuditEvent:
    """The event at stream sequence ``seq``.

    Raises:
        NotFoundError: there is none (the log's last sequence is named).
    """
    async for event in read_events(ms.core.log, EventQuery(from_seq=seq, to_seq=seq)):
        return event
    last = await ms.core.log.stream_last_seq()
    raise NotFoundError(f"no event at sequence {seq}; the log's last sequence is {last}")


async def export_events(ms: Memstream, query: EventQuery, file: IO[str]) -> int:
    """Write the events ``query`` selects to ``file`` as ``events export`` lines (JSONL, one
    object per event: what :func:`import_events` loads); returns how many."""
    exported = 0
    async for event in read_events(ms.core.log, query):
        file.write(json.dumps(event.export_json(), ensure_ascii=False, default=str) + "\n")
        exported += 1
    return exported


async def import_events(
    ms: Memstream,
    path: Path,
    *,
    force: bool = False,
    on_total: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Load an export (``events export``'s JSONL at ``path``, checked whole first) into the
    client's stream, empty unless ``force``."""
    return await _import_events(
        ms.core.log, path, force=force, on_total=on_total, on_progress=on_progress
    )
