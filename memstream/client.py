"""``memstream.connect()``: the one composition root, and the client it returns.

:class:`Memstream` is a façade: sessions, the session manager, Agent Memory, volumes and the
waits a user needs. What it is made of (:class:`~memstream.core.Core`) is put together here and
nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from nats.aio.client import Client

from memstream.agent_memory import AgentMemory, RecallModels
from memstream.commands import CommandRunner
from memstream.core import Core
from memstream.domain.limits import check_actor, check_namespace
from memstream.home_loop import home_loop_methods
from memstream.local_workers import LocalWorkers
from memstream.projections.ports import ReadModelCopy
from memstream.projections.read_models import open_read_models
from memstream.read_side import ReadSide
from memstream.read_your_writes import ReadYourWrites
from memstream.session import Session
from memstream.session_manager import SessionManager
from memstream.settings import Settings, default_actor
from memstream.workers.log.event_log import EventLog, connect_nats
from memstream.workers.own_writes import OwnWrites
from memstream.workers.runtime.data_dir import prepare_data_dir, private_database
from memstream.workers.runtime.embedded import EmbeddedRuntime


@home_loop_methods(lambda ms: ms.core.loop)
class Memstream:
    """A connected memstream: sessions, the session manager and Agent Memory over one log.

    ``core`` holds what it is made of (the log, the read side, the command runner,
    read-your-writes, own writes, the workers of this process): see :class:`~memstream.core.Core`.
    """

    def __init__(self, core: Core) -> None:
        self.core = core
        self.settings = core.settings
        self.namespace = core.namespace
        # Recorded in every event this client causes (a session may name its own).
        self.actor = core.actor

    def session(self, session_id: str = "", *, actor: str | None = None) -> Session:
        """A Session builder for ``session_id`` (``""`` is the default session). ``actor``
        names who causes the session's events (default: this client's :attr:`actor`)."""
        return Session(self.core, session_id, actor=actor)

    def session_manager(self) -> SessionManager:
        """A SessionManager of this client's namespace: registered sessions with names, usage,
        fork and split, cross-session search (spec §10)."""
        return SessionManager(self.core)

    def agent_memory(self, namespace: str = "default") -> AgentMemory:
        """Agent Memory of ``namespace`` (1–32 characters of ``[a-z0-9_-]``): its profiles."""
        return AgentMemory(self.core, namespace)

    async def stats(
        self,
        *,
        since: str | None = None,
        until: str | None = None,
        all_namespaces: bool = False,
    ) -> list[dict[str, Any]]:
        """Daily volumes from the analytics projection: one row per namespace (this client's,
        or every one), UTC day (``since``/``until``: ISO dates, inclusive), model and source,
        with ``sessions``, ``messages``, ``input_tokens``, ``output_tokens``, ``cost``,
        ``memories`` (by type), ``remembered``, ``ingested_messages``, ``ingested_bytes``.

        Raises:
            ProjectionLagError: the analytics worker did not catch up within the read timeout
                (none runs?).
        """
        await self.core.ryw.sync("analytics")
        namespace = None if all_namespaces else self.namespace
        return self.core.reads.read_models.analytics.daily(namespace, since, until)

    async def wait_for(self, projection: str = "sessions", seq: int | None = None) -> None:
        """Wait until ``projection`` (a read model: ``sessions``, ``context``, ``memory``,
        ``vectors``, ...) has committed this client's last write (or the stream sequence
        ``seq``) and everything the log held when this client connected. Reads wait by
        themselves; this is for a reader elsewhere given ``seq``.

        Raises:
            ProjectionLagError: not reached within the read timeout.
            ReadModelDamagedError: the read model is damaged (and being rebuilt, when this
                process runs the projector).
        """
        await self.core.ryw.wait_for(projection, seq)

    async def sync(self, projection: str) -> None:
        """Wait until ``projection`` has every event committed before this call (not only this
        client's): what a fresh process such as a CLI command needs before it reads.

        Raises:
            ProjectionLagError: not reached within the read timeout (no projector running?).
        """
        await self.core.ryw.sync(projection)

    async def close(self) -> None:
        """Stop workers, close connections, and release the embedded server if owned."""
        core = self.core
        await core.workers.close()
        with contextlib.suppress(Exception):
            await core.nats.flush(timeout=2)
        with contextlib.suppress(Exception):
            await core.nats.close()
        core.reads.close()
        if core.runtime is not None:
            await asyncio.to_thread(core.runtime.release)


def _assemble(
    settings: Settings,
    client: Client,
    log: EventLog,
    copy: ReadModelCopy,
    runtime: EmbeddedRuntime | None,
    *,
    check: bool,
) -> Memstream:
    """Put a client's parts together (see :class:`~memstream.core.Core`). They refer to each
    other: the read side lends the store of the projector here, the own writes name the
    stream's partitions, and read-your-writes asks the workers here whether they report."""
    actor = check_actor(settings.actor) if settings.actor is not None else default_actor()
    reads = ReadSide(settings, log, copy, runtime, lambda: local.projector, check=check)
    own = OwnWrites(lambda subject: ryw.stored(subject))
    ryw = ReadYourWrites(
        settings,
        client,
        log,
        reads,
        own,
        pushed=lambda projection: local.pushed(projection),
        local=lambda: local.local(),
    )
    recall = RecallModels.of(settings)
    local = LocalWorkers(settings, log, copy, runtime, ryw, own, recall.encoder)
    commands = CommandRunner(log, settings.namespace, actor, reads, ryw, own)
    core = Core(
        settings=settings,
        namespace=settings.namespace,
        actor=actor,
        loop=asyncio.get_running_loop(),
        nats=client,
        log=log,
        runtime=runtime,
        reads=reads,
        ryw=ryw,
        own=own,
        commands=commands,
        workers=local,
        recall=recall,
    )
    return Memstream(core)


async def open_memstream(
    settings: Settings, *, workers: bool | None = None, check_log: bool = True
) -> Memstream:
    """Connect everything ``settings`` describes (see :func:`connect`). ``check_log=False``
    opens a copy ahead of the log without refusing it (what ``status`` and ``projections
    rebuild`` need: see :meth:`~memstream.read_side.ReadSide.check_against_log`)."""
    copy = open_read_models(settings)  # opens nothing yet
    runtime: EmbeddedRuntime | None = None
    url = settings.nats_url
    if url is None:
        # Waits (bounded) while another process starts the server, never failing for it.
        runtime = await asyncio.to_thread(
            EmbeddedRuntime.acquire, settings.data_dir, sync=settings.nats_sync
        )
        url = runtime.url
    else:
        await asyncio.to_thread(prepare_data_dir, settings.data_dir)
    client: Client | None = None
    run_workers = workers if workers is not None else (runtime is not None and runtime.owner)
    try:
        if settings.database_url is None:  # SQLite read models: 0600, -wal too
            await asyncio.to_thread(private_database, settings.database_path)
        client = await connect_nats(
            url,
            user=settings.nats_user,
            password=settings.nats_password,
            # The embedded server takes only its data dir's token.
            token=runtime.token if runtime is not None else settings.nats_token,
            creds=settings.nats_creds,
        )
        log = EventLog(
            client,
            settings.stream,
            settings.subject_prefix,
            timeout=settings.write_timeout,
            replicas=settings.stream_replicas,
            partitions=settings.stream_partitions,
        )
        await log.ensure_stream()
        connected_seq = await log.stream_last_seq()
        # Read after the stream's end: at least what it held then (a partition's later end
        # covers the same).
        connected_partitions = await log.partition_ends()
        # The projector's process moves a copy that is no read model aside before reading it
        # (the projector checks it whole, and rebuilds it).
        ms = _assemble(settings, client, log, copy, runtime, check=run_workers)
    except BaseException:
        if client is not None:  # e.g. the stream could not be created: leave nothing open
            with contextlib.suppress(Exception):
                await client.close()
        if runtime is not None:
            await asyncio.to_thread(runtime.release)
        raise
    core = ms.core
    core.ryw.connected_seq = connected_seq
    core.ryw.partitions = await log.partitions()
    core.ryw.connected_partitions = connected_partitions
    try:
        await core.reads.check_against_log(healer=run_workers, refuse=check_log)
    except BaseException:
        await ms.close()
        raise
    if run_workers:
        try:
            core.workers.start()
            await core.workers.bound()
        except BaseException:
            await ms.close()
            raise
    elif runtime is not None and workers is None:
        core.workers.watch_ownership(run_workers=True)
    return ms


@contextlib.asynccontextmanager
async def connect(
    *,
    data_dir: str | Path | None = None,
    nats_url: str | None = None,
    database_url: str | None = None,
    namespace: str = "default",
    workers: bool | None = None,
    settings: Settings | None = None,
    actor: str | None = None,
) -> AsyncIterator[Memstream]:
    """Connect to memstream (embedded by default) for the duration of an ``async with``.

    Unset arguments come from ``MEMSTREAM_*`` settings. ``workers=None`` runs the workers in this
    process exactly when it owns the embedded log. ``actor`` is recorded in every event this
    client causes (``MEMSTREAM_ACTOR``; default: the OS user and host, ``user@host``).

    Example:
        async with memstream.connect() as ms:
            await ms.session("chat-1").append_message({"role": "user", "content": "Hi"})
    """
    base = settings or Settings.from_env()
    overrides: dict[str, Any] = {
        "data_dir": Path(data_dir) if data_dir is not None else None,
        "nats_url": nats_url,
        "database_url": database_url,
        "actor": None if actor is None else check_actor(actor),
    }
    if namespace != "default" or settings is None:
        overrides["namespace"] = check_namespace(namespace) if namespace != "default" else None
    resolved = base.with_(**{k: v for k, v in overrides.items() if v is not None})
    ms = await open_memstream(resolved, workers=workers)
    try:
        yield ms
    finally:
        await ms.close()
