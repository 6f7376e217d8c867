"""``memstream.connect()``: wires the log, the read models, and (when owned) the workers."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from eventsourcing.domain import Aggregate
from nats.aio.client import Client

from memstream.agent_memory import AgentMemory
from memstream.domain.context import ContextDocument, SearchIndex
from memstream.domain.errors import (
    MemstreamError,
    ProjectionLagError,
    ReadModelAheadError,
    ReadModelDamagedError,
    ReadModelUnavailableError,
    UnavailableError,
)
from memstream.domain.limits import check_actor, check_namespace, check_session_id
from memstream.domain.memory_profile import MemoryProfile
from memstream.domain.redaction import redact_url
from memstream.domain.session import SessionAggregate
from memstream.domain.session_registry import SessionRecord
from memstream.home_loop import home_loop_methods
from memstream.llm_extractor import extractor_from_settings
from memstream.projections.ports import (
    REBUILD_HINT,
    ContextQueries,
    MemoryQueries,
    ReadModelCopy,
    ReadModels,
    ReadModelStore,
    SessionQueries,
)
from memstream.projections.read_models import open_read_models
from memstream.projections.registry import (
    ANALYTICS_PROJECTIONS,
    INDEXER_PROJECTIONS,
    PARTITIONABLE,
    PROJECTIONS,
    PROJECTOR_PROJECTIONS,
)
from memstream.projections.tracking import TrackingRows
from memstream.session import Session
from memstream.session_manager import SessionManager
from memstream.settings import Settings, default_actor
from memstream.summarizers import OpenAICompatibleSummarizer
from memstream.workers.extractor import ExtractorWorker
from memstream.workers.indexer import LazyEncoder
from memstream.workers.log.aggregate_store import AggregateStore, CommandResult, Decide
from memstream.workers.log.codec import H_MSG_ID, CommandMeta
from memstream.workers.log.durability import (
    ServerSync,
    StreamCopy,
    configured_sync,
    monitored_copies,
    monitored_sync,
)
from memstream.workers.log.event_log import (
    EventLog,
    LogEntry,
    OutgoingMessage,
    connect_nats,
    nats_servers,
)
from memstream.workers.log.log_position import LogGap, check_copy
from memstream.workers.log.subjects import demand_subject, partition_of, subject_for
from memstream.workers.observability.metrics_hooks import hooks
from memstream.workers.observability.tracing import command_span, tracing
from memstream.workers.position import Demand, JointDemand, PositionWatch, encode_demand
from memstream.workers.projector import DEFAULT_LINGER, HeldOwn, ProjectorWorker
from memstream.workers.recall_inputs import QueryAnalysis, VectorCache
from memstream.workers.runtime.data_dir import prepare_data_dir, private_database
from memstream.workers.runtime.embedded import EmbeddedRuntime
from memstream.workers.runtime.nats_server import CONFIG_FILE

logger = logging.getLogger(__name__)
# At most this many of a client's own events are kept for the projector of its process to apply
# for a reader (it forgets them as it commits; older ones are its to deliver).
OWN_EVENTS = 10_000
# Writes that apply nothing early (see Memstream._speculate) after one whose sequence another
# writer's event took: 1, 3, 7, ... after 1, 2, 3, ... misses in a row, at most this many.
SPECULATION_PAUSE = 31
# How long a write's events stay applied-but-uncommitted while its acknowledgement is awaited:
# then they are rolled back (the projector and other writers to the read model wait meanwhile).
HOLD_SECONDS = 0.1
A = TypeVar("A", bound=Aggregate)
R = TypeVar("R")

# How long the in-process projector gathers a burst of writes before committing it.
PROJECTOR_LINGER = DEFAULT_LINGER
# How long opening a client with workers waits for their durable consumers.
WORKERS_BOUND_SECONDS = 5.0
# The analytics worker gathers up to this long per transaction: nothing but ``stats`` and
# ``verify`` reads its volumes, and a reader of them (here, or elsewhere through its nudge) cuts
# the lingering short. A burst of writes then pays for its volumes once a second, not 20 times
# (each transaction of a second writer also makes the projector read its positions again).
ANALYTICS_LINGER = 1.0
# How long commands are decided on the log alone after the read model's server was away.
READ_MODEL_RETRY_SECONDS = 2.0
# How long a clean close waits for its own projector to project this client's writes.
CLOSE_DRAIN_SECONDS = 5.0
# How often a client waits to see a copy ahead of the log rebuilt by its owner.
AHEAD_POLL_SECONDS = 0.2


@home_loop_methods(lambda ms: ms.loop)
class Memstream:
    """A connected memstream: sessions and (later) agent memory over one log."""

    def __init__(
        self,
        settings: Settings,
        client: Client,
        log: EventLog,
        copy: ReadModelCopy,
        runtime: EmbeddedRuntime | None,
        *,
        check: bool = False,
    ) -> None:
        self.settings = settings
        # The loop it was connected on: a call made on another runs there (see home_loop).
        self.loop = asyncio.get_running_loop()
        self.namespace = settings.namespace
        # Recorded in every event this client causes (a session may name its own).
        self.actor = check_actor(settings.actor) if settings.actor is not None else default_actor()
        self.client = client
        self.log = log
        self.runtime = runtime
        self.projector: ProjectorWorker | None = None
        # Own writes applied while their acknowledgement is on its way (see _speculate);
        # False: applied after it, for a reader (_apply_own), or when delivered.
        self.overlap_writes = True
        # The projector here takes this client's own events as decided rather than decoding
        # their payloads again (False: it decodes every delivery, as a projector elsewhere).
        self.reuse_own_events = True
        self._own_events: dict[int, LogEntry] = {}  # by sequence, until delivered or committed
        self.indexer: ProjectorWorker | None = None
        self.analytics: ProjectorWorker | None = None
        self.extractor: ExtractorWorker | None = None
        # The embedding model: the indexer's and recall's, loaded at its first use.
        self.encoder = LazyEncoder(settings.embedding_model)
        self._analysis = QueryAnalysis(self.encoder)
        self._vector_cache = VectorCache(self.encoder.model_name)
        self._profiles: dict[str, AggregateStore[MemoryProfile]] = {}
        self._answer_model: Any = None
        self.copy = copy
        self._read_from(self._open_reader(check=check))
        self.demand = Demand()
        # The analytics worker's: only readers of volumes cut its (long) lingering short. They
        # press the projector too: a purge or status elsewhere reads this copy's progress from
        # its consumers' acknowledgements, which the projector sends as it commits.
        self.analytics_demand = JointDemand(self.demand)
        self.positions = self._watch_positions()
        self.last_write_seq = 0
        self.last_profile_seq = 0  # this client's last Agent Memory write
        # The log's end when this client connected: reads see at least that much (what earlier
        # processes wrote), as well as this client's own writes.
        self.connected_seq = 0
        # The copy was ahead of the log when this client opened it (see check_against_log).
        self.found_ahead: LogGap | None = None
        # On a partitioned stream (see TrackingRows): how many partitions, each partition's
        # last event when this client connected, and this client's last write to each.
        self.partitions = 0
        self.connected_partitions: dict[int, int] = {}
        self.own_partitions: dict[int, int] = {}
        self._watchdog: asyncio.Task[None] | None = None
        self._subjects: dict[str, str] = {}
        # This client's events that the projector of this process has not committed yet.
        self._own: deque[LogEntry] = deque()
        # Whether a read waited since this client's last write (see _speculate), and the
        # writes left before it speculates again after a miss.
        self._read_since_write = False
        self._speculation_pause = 0
        self._speculation_misses = 0  # in a row
        # While the read model's server is away (PostgreSQL down), commands are decided on the
        # log without trying it again until this monotonic time; warned once per outage.
        self._read_model_back_at = 0.0
        self._read_model_away = False
        # Writes whose events were applied during their round trip, and those rolled back
        # (another event took their sequence): for tests and benchmarks.
        self.overlapped_writes = 0
        self.missed_overlaps = 0

    def _read_from(self, read_models: ReadModels) -> None:
        self.read_models = read_models
        self.session_queries: SessionQueries = read_models.sessions
        self.context_queries: ContextQueries = read_models.context
        # Sessions are restored from the sessions read model (plus the events after it), never
        # replayed from their first event: see SnapshotSource. A new read-model copy (one
        # replaced after damage) starts a new store: nothing restored from the old stays.
        self.sessions = AggregateStore(
            self.log,
            self._empty_session,
            snapshots=read_models.session_snapshots(self.namespace),
            published=self._published,
            speculate=self._speculate,
        )
        # Blocks likewise, from the context read model (a block's writes each carry its whole
        # content: replaying them read every version of it).
        self.blocks = AggregateStore(
            self.log,
            lambda key: ContextDocument.empty(self.namespace, key),
            snapshots=read_models.document_snapshots(self.namespace),
            published=self._published,
            speculate=self._speculate,
        )
        self.search_indexes = AggregateStore(
            self.log,
            lambda key: SearchIndex.empty(self.namespace, key),
            snapshots=read_models.search_snapshots(self.namespace),
            published=self._published,
            speculate=self._speculate,
        )
        self.records = AggregateStore(
            self.log,
            lambda key: SessionRecord.empty(self.namespace, key),
            snapshots=read_models.record_snapshots(self.namespace),
            published=self._published,
            speculate=self._speculate,
        )

    @property
    def memory_queries(self) -> MemoryQueries:
        return self.read_models.memory

    def query_analysis(self) -> QueryAnalysis:
        return self._analysis

    def vector_cache(self) -> VectorCache:
        return self._vector_cache

    def answer_model(self) -> Any:
        """The chat model of ``MEMSTREAM_LLM_URL``/``_MODEL`` that writes recall answers
        (``None``: none configured, answers are extractive)."""
        if self._answer_model is None and self.settings.llm_url and self.settings.llm_model:
            self._answer_model = OpenAICompatibleSummarizer(
                self.settings.llm_url,
                self.settings.llm_model,
                api_key=self.settings.llm_api_key,
                timeout=30.0,
                max_retries=1,
            )
        return self._answer_model

    def agent_memory(self, namespace: str = "default") -> AgentMemory:
        """Agent Memory of ``namespace`` (1–32 characters of ``[a-z0-9_-]``): its profiles."""
        return AgentMemory(self, namespace)

    async def profile_command(
        self,
        namespace: str,
        profile: str,
        decide: Decide[MemoryProfile, R],
        meta: CommandMeta | None = None,
    ) -> CommandResult[R]:
        """Run a command on the memory profile ``profile`` of ``namespace``."""
        store = self._profiles.get(namespace)
        if store is None:
            store = self._profiles[namespace] = AggregateStore(
                self.log,
                lambda key: MemoryProfile.empty(namespace, key),
                published=self._published,
                speculate=self._speculate,
            )
        subject = subject_for(self.log.subject_prefix, namespace, "profile", profile)
        result = await self._execute(store, subject, profile, decide, meta, "profile")
        self.last_profile_seq = max(self.last_profile_seq, result.seq)
        return result

    async def wait_for_profile(
        self,
        namespace: str,
        profile: str,
        seq: int | None = None,
        timeout: float | None = None,
    ) -> None:
        """Wait until the ``vectors`` projection has the profile's events up to ``seq`` (or
        all of them: its subject's last one now), within ``timeout`` (default: the read
        timeout). The indexer sees Agent Memory events only, so its position is never the
        stream's end.

        Raises:
            ProjectionLagError: not reached within the read timeout.
        """
        self._reopen_if_replaced()
        if seq is None:
            subject = subject_for(self.log.subject_prefix, namespace, "profile", profile)
            seq = await self.log.last_seq(subject)
        await self.positions["vectors"].wait_for(seq, timeout or self.settings.read_timeout)

    def _idle_store(self) -> ReadModelStore | None:
        """The in-process projector's store while it is idle: reads may go through it (its
        caches are warm, where the reader's are dropped by each of the projector's commits)."""
        projector = self.projector
        return None if projector is None else projector.idle_store()

    def _open_reader(self, *, check: bool = False) -> ReadModels:
        return self.copy.reader(on_damage=self._damaged, lender=self._idle_store, check=check)

    def _watch_positions(self) -> dict[str, PositionWatch]:
        return {
            name: PositionWatch(
                name,
                partial(self._tracked_seq, name),
                self.analytics_demand if name in ANALYTICS_PROJECTIONS else self.demand,
                self._nudge,
                pushed=partial(self._projector_running, name),
                read_partitions=partial(self._tracked_partitions, name),
            )
            for name in PROJECTIONS
        }

    def _published(self, subject: str, messages: Sequence[OutgoingMessage], first: int) -> None:
        """Keep this client's events as the log stored them, for :meth:`_apply_own`, while a
        projector runs in this process (it forgets them as it commits: :meth:`_advance`)."""
        if self.projector is None:
            return
        own = self._own
        for index, message in enumerate(messages):
            headers = dict(message.headers)
            headers[H_MSG_ID] = message.msg_id
            event = message.event if self.reuse_own_events else None
            entry = LogEntry(first + index, self._stored(subject), message.payload, headers, event)
            if own and own[-1].seq > entry.seq:  # concurrent commands' acks out of order
                bisect.insort(own, entry, key=lambda e: e.seq)
            else:
                own.append(entry)
            if event is not None:
                self._own_events[entry.seq] = entry
        while len(own) > OWN_EVENTS:
            own.popleft()
        events = self._own_events
        while len(events) > OWN_EVENTS:
            del events[next(iter(events))]

    def _own_event(self, seq: int, payload: bytes) -> object | None:
        """The domain event this client decided and the log stored at ``seq`` with ``payload``
        (the projector here applies it without decoding the payload again); ``None`` if it is
        not one of this client's, or the log holds another payload there."""
        entry = self._own_events.pop(seq, None)
        if entry is None or entry.payload != payload:
            return None
        return entry.event

    def _stored(self, subject: str) -> str:
        """``subject`` as the stream stores it (with its partition, on a partitioned stream)."""
        if not self.partitions:
            return subject
        return f"{subject}.{partition_of(subject, self.partitions)}"

    def _speculate(self, subject: str, messages: Sequence[OutgoingMessage]) -> _OwnWrite | None:
        """Before a publish: have the projector of this process apply the events while their
        acknowledgement is on its way (:meth:`ProjectorWorker.hold_own`), at the sequences
        they get if no other event is stored before them, and keep them if the
        acknowledgement says they did (else roll them back); kept events are committed with
        the next few in the projector's open transaction. The reader that follows finds them
        projected; the projection overlapped the round trip instead of following it.

        Only for a client that reads what it wrote (a read waited since its last write: an
        agent loop, not a burst of writes, which the projector applies in batches), while every
        earlier event of this client is projected, and not for a while after a miss (another
        writer's event came first).
        """
        projector = self.projector
        if (
            projector is None
            or not self.overlap_writes
            or not self._read_since_write
            or len(messages) != 1  # (a batch is published as a whole: nothing to overlap)
        ):
            return None
        self._read_since_write = False
        if self._speculation_pause:
            self._speculation_pause -= 1
            return None
        own = self._own
        committed = projector.committed
        while own and own[0].seq <= committed:
            own.popleft()
        if own:
            return None
        entries = []
        for index, message in enumerate(messages):
            headers = dict(message.headers)
            headers[H_MSG_ID] = message.msg_id
            entries.append(
                LogEntry(committed + 1 + index, self._stored(subject), message.payload, headers)
            )
        return _OwnWrite(self, projector, entries)

    def _speculation_ended(self, committed: bool) -> None:
        if committed:
            self.overlapped_writes += 1
            self._speculation_misses = 0
        else:
            self.missed_overlaps += 1
            self._speculation_misses = misses = min(self._speculation_misses + 1, 5)
            self._speculation_pause = min(2**misses - 1, SPECULATION_PAUSE)

    def _apply_own(self, projection: str, target: int) -> None:
        """A reader here waits for ``target``: if the events up to it are this client's own,
        next in the stream, have the projector of this process apply them now rather than wait
        for their delivery (read-your-writes then costs what a write to the read model does)."""
        projector = self.projector
        own = self._own
        if projector is None or not own or projection not in projector.store.projections:
            return
        committed = projector.committed
        while own and own[0].seq <= committed:
            own.popleft()
        if not own or own[0].seq != committed + 1:
            return
        entries = []
        for entry in own:
            if entry.seq > target:
                break
            entries.append(entry)
        if entries and entries[-1].seq >= target:
            projector.apply_own(entries)  # its commit forgets them (_projected)

    def _projector_running(self, projection: str) -> bool:
        """Whether a projector of this process reports ``projection``'s commits to the readers
        here."""
        for projector in (self.projector, self.indexer, self.analytics):
            if (
                projector is not None
                and projector.running
                and projection in projector.store.projections
            ):
                return True
        return False

    def _tracked_seq(self, projection: str) -> int:
        # A waiting reader polls this: it follows the file the projector replaced meanwhile
        # (the old one would never advance again).
        self._reopen_if_replaced()
        try:
            return self.read_models.tracked_seq(projection)
        except ReadModelDamagedError as error:
            self._damaged(error)

    def _tracked_partitions(self, projection: str) -> dict[int, int]:
        self._reopen_if_replaced()
        try:
            return self.read_models.tracked_partitions(projection)
        except ReadModelDamagedError as error:
            self._damaged(error)

    def _reopen_if_replaced(self) -> None:
        """Read the new file once a damaged read model was replaced (by the projector here or
        elsewhere, or a rebuild): one ``stat`` per read."""
        if not self.read_models.replaced():
            return
        old = self.read_models
        self._read_from(self._open_reader())
        self.positions = self._watch_positions()  # the new file starts again from 0
        old.close()
        logger.info("reading the replaced read model %s", self.copy.location)

    def _damaged(self, error: ReadModelDamagedError) -> NoReturn:
        """A read met damage: have the projector of this process replace the copy, or say how."""
        path = self.copy.location
        if self._report_damage(error):
            raise ReadModelDamagedError(
                f"read model {path} is damaged ({error.reason}); this process moves it aside "
                "and rebuilds it from the log: retry in a moment",
                reason=error.reason,
            ) from error
        raise ReadModelDamagedError(
            f"read model {path} is damaged ({error.reason}); {REBUILD_HINT}", reason=error.reason
        ) from error

    def _report_damage(self, error: ReadModelDamagedError) -> bool:
        """Tell the projector of this process (if any: True) that the read model is damaged."""
        if self.projector is None:
            return False
        self.projector.report_damage(error.reason, self.read_models.identity)
        return True

    @property
    def copy_id(self) -> str:
        """The id of the read-model copy this client reads (kept inside it)."""
        return self.read_models.copy_id()

    def _empty_session(self, session_id: str) -> SessionAggregate:
        return SessionAggregate.empty(self.namespace, session_id)

    def session(self, session_id: str = "", *, actor: str | None = None) -> Session:
        """A Session builder for ``session_id`` (``""`` is the default session). ``actor``
        names who causes the session's events (default: this client's :attr:`actor`)."""
        return Session(self, session_id, actor=actor)

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
        await self.sync("analytics")
        namespace = None if all_namespaces else self.namespace
        return self.read_models.analytics.daily(namespace, since, until)

    def session_manager(self) -> SessionManager:
        """A SessionManager of this client's namespace: registered sessions with names, usage,
        fork and split, cross-session search (spec §10)."""
        return SessionManager(self)

    def session_subject(self, session_id: str) -> str:
        """The subject a session's events live on (memoised: it is needed on every write)."""
        subject = self._subjects.get(session_id)
        if subject is None:
            subject = subject_for(self.log.subject_prefix, self.namespace, "session", session_id)
            if len(self._subjects) >= 4096:
                self._subjects.clear()
            self._subjects[session_id] = subject
        return subject

    async def session_command(
        self,
        session_id: str,
        decide: Decide[SessionAggregate, R],
        meta: CommandMeta | None = None,
    ) -> CommandResult[R]:
        """Run a session command; its result's ``seq`` is what to wait for when reading."""
        check_session_id(session_id)
        return await self._execute(
            self.sessions, self.session_subject(session_id), session_id, decide, meta, "session"
        )

    async def command(
        self,
        store: AggregateStore[A],
        kind: str,
        key: str,
        decide: Decide[A, R],
        meta: CommandMeta | None = None,
    ) -> CommandResult[R]:
        """Run a command on the aggregate ``kind``/``key``."""
        subject = subject_for(self.log.subject_prefix, self.namespace, kind, key)
        return await self._execute(store, subject, key, decide, meta, kind)

    async def _execute(
        self,
        store: AggregateStore[A],
        subject: str,
        key: str,
        decide: Decide[A, R],
        meta: CommandMeta | None,
        kind: str,
    ) -> CommandResult[R]:
        """Decide on the read model's snapshot; if the read model turns out damaged, report it
        (the projector here replaces it) and decide on the aggregate replayed from the log
        instead: a write does not depend on a disposable read model. The same command id both
        times, so the log keeps one copy even if the first attempt was published."""
        observer = hooks.observer  # metrics, when this process serves them
        if observer is None and not tracing():  # (asked each time: cheap)
            return await self._decide_and_append(store, subject, key, decide, meta)
        started = time.perf_counter()
        try:
            with command_span(kind, subject) as (span, traceparent):
                if traceparent:
                    meta = dataclasses.replace(
                        meta or CommandMeta(actor=self.actor), traceparent=traceparent
                    )
                result = await self._decide_and_append(store, subject, key, decide, meta)
                if span is not None:
                    span.set_attribute("memstream.seq", result.seq)
                return result
        finally:
            if observer is not None:
                observer.command(kind, time.perf_counter() - started)

    async def _decide_and_append(
        self,
        store: AggregateStore[A],
        subject: str,
        key: str,
        decide: Decide[A, R],
        meta: CommandMeta | None,
    ) -> CommandResult[R]:
        meta = meta or CommandMeta(actor=self.actor)
        if self._read_model_away and time.monotonic() < self._read_model_back_at:
            result = await store.without_snapshots().execute(subject, key, decide, meta)
            self._wrote(subject, result.seq)
            return result
        try:
            with self.read_models.damage_translated():
                result = await store.execute(subject, key, decide, meta)
        except ReadModelDamagedError as error:
            self._report_damage(error)
            logger.warning(
                "read model %s is damaged (%s); deciding %s on its events from the log",
                self.copy.location,
                error.reason,
                subject,
            )
            result = await store.without_snapshots().execute(subject, key, decide, meta)
        except ReadModelUnavailableError as error:
            # The read model's server is away (PostgreSQL): the log alone decides meanwhile, and
            # the server is not tried again for a moment (a connect may wait its timeout).
            if not self._read_model_away:
                logger.warning("%s; deciding commands on their events from the log", error)
            self._read_model_away = True
            self._read_model_back_at = time.monotonic() + READ_MODEL_RETRY_SECONDS
            result = await store.without_snapshots().execute(subject, key, decide, meta)
        else:
            if self._read_model_away:
                logger.warning("read model %s is back", self.copy.location)
                self._read_model_away = False
        self._wrote(subject, result.seq)
        return result

    def _wrote(self, subject: str, seq: int) -> None:
        """Remember this client's write to ``subject`` at ``seq``, for its reads to wait for."""
        if seq > self.last_write_seq:
            self.last_write_seq = seq
        if self.partitions:
            partition = partition_of(subject, self.partitions)
            if seq > self.own_partitions.get(partition, 0):
                self.own_partitions[partition] = seq

    def partition_targets(self) -> dict[int, int]:
        """What a read waits for in each partition of a partitioned stream: the partition's
        last event when this client connected or this client's last write to it, whichever
        is later (read-your-writes and the log as of connect)."""
        targets: dict[int, int] = {}
        for partition in range(self.partitions):
            target = max(
                self.connected_partitions.get(partition, 0),
                self.own_partitions.get(partition, 0),
            )
            if target:
                targets[partition] = target
        return targets

    async def _partition_targets_upto(self, seq: int) -> dict[int, int]:
        """What a wait for everything up to ``seq`` waits for in each partition: its last
        event up to ``seq``, or ``seq`` itself where the partition has later events (its row
        passes ``seq`` only once every event of it up to ``seq`` is applied). Each partition's
        end is asked of the log, unless the ends at connect cover ``seq``."""
        if seq <= self.connected_seq:
            ends = self.connected_partitions
        else:
            ends = await self.log.partition_ends()
        return {partition: min(end, seq) for partition, end in ends.items() if end}

    async def wait_for_sessions(self, seq: int | None = None) -> None:
        """Read-your-writes: wait until the sessions read model has this client's last write."""
        await self.wait_for("sessions", seq)

    async def wait_to_read_sessions(self, subject: str | None = None) -> None:
        """:meth:`wait_to_read` of the sessions read model (for a read of one session's rows
        only: ``subject``, its subject)."""
        await self.wait_to_read("sessions", subject=subject)

    @property
    def read_floor(self) -> int:
        """The stream sequence every read waits for: this client's last write, or the log's end
        when it connected if that is later."""
        return max(self.last_write_seq, self.connected_seq)

    async def wait_for(self, projection: str, seq: int | None = None) -> None:
        """Wait until ``projection`` has committed this client's last write (or ``seq``) and
        everything the log held when this client connected.

        Raises:
            ProjectionLagError: not reached within the read timeout.
            ReadModelDamagedError: the read model is damaged (and being rebuilt, when this
                process runs the projector).
        """
        await self._wait(projection, seq, uncommitted=False)

    async def wait_to_read(
        self, projection: str, seq: int | None = None, *, subject: str | None = None
    ) -> None:
        """:meth:`wait_for`, for a read through this client's read models (``read_models``)
        that follows at once: it may see its client's own writes before they are committed
        (in the open transaction of the projector here, which it then reads through).
        ``subject``: the read concerns only the rows of that aggregate (on a partitioned
        stream it waits for that aggregate's partition alone).
        """
        await self._wait(projection, seq, uncommitted=True, subject=subject)

    async def _wait(
        self, projection: str, seq: int | None, *, uncommitted: bool, subject: str | None = None
    ) -> None:
        self._reopen_if_replaced()
        self._read_since_write = True
        target = self.read_floor if seq is None else max(seq, self.connected_seq)
        watch = self.positions[projection]
        if target > watch.position:
            if self._own:
                self._apply_own(projection, target)
            projector = self.projector
            if projector is not None and projector.readable(projection, target):
                if uncommitted and self.read_models.lent():
                    return  # read through the projector's transaction, which has them
                projector.flush()  # commit them now rather than within GROUP_SECONDS
        if self.partitions and projection in PARTITIONABLE and target > watch.position:
            # Partitions are projected apart: each must reach its own target (one without
            # new events never holds a read up), unless this process projects them all.
            if seq is None:
                targets = self.partition_targets()
            else:
                targets = await self._partition_targets_upto(target)
            if subject is not None:
                partition = partition_of(subject, self.partitions)
                targets = {p: t for p, t in targets.items() if p == partition}
            await watch.wait_for_partitions(targets, target, self.settings.read_timeout)
            return
        await watch.wait_for(target, self.settings.read_timeout)

    async def sync(self, projection: str) -> None:
        """Wait until ``projection`` has every event committed before this call (not only this
        client's): what a fresh process such as a CLI command needs before it reads.

        Raises:
            ProjectionLagError: not reached within the read timeout (no projector running?).
        """
        if self.partitions and projection in PARTITIONABLE:
            for partition, end in (await self.log.partition_ends()).items():
                if end > self.connected_partitions.get(partition, 0):
                    self.connected_partitions[partition] = end
        await self.wait_for(projection, max(self.last_write_seq, await self.log.stream_last_seq()))

    async def _nudge(self, seq: int, partitions: Mapping[int, int] | None = None) -> None:
        """Tell the projectors of other processes that a reader here waits for ``seq`` (in
        each of ``partitions``, their targets), so that they stop lingering; the projector in
        this process sees its readers without this."""
        if self.projector is not None:
            return
        signal = encode_demand(seq, partitions)
        with contextlib.suppress(Exception):  # best effort: the reader polls regardless
            await self.client.publish(demand_subject(self.log.stream), signal)

    def _advance(self, projections: tuple[str, ...], seq: int) -> None:
        # A projector reports the lowest position over its projections.
        for name in projections:
            self.positions[name].advance(seq)

    def _projected(self, seq: int) -> None:
        """The projector of this process committed up to ``seq``."""
        self._advance(PROJECTOR_PROJECTIONS, seq)
        own = self._own
        while own and own[0].seq <= seq:
            own.popleft()
        events = self._own_events
        while events and next(iter(events)) <= seq:  # applied without a delivery (apply_own)
            del events[next(iter(events))]

    def _embed(self) -> Any:
        """The model as the extractor's prototype classifier calls it (loaded now if need be)."""
        from memstream.workers.embeddings import as_embed

        return as_embed(self.encoder.embedder())

    async def stream_copies(self) -> list[StreamCopy]:
        """Each server's own copy of the stream, read from the monitoring endpoints the
        settings name (``MEMSTREAM_NATS_MONITOR_URL``); none without them."""
        if not self.settings.nats_monitor_url:
            return []
        return await monitored_copies(self.settings.nats_monitor_url, self.log.stream)

    async def durability(self) -> list[ServerSync]:
        """Each log server's fsync policy, as far as it can be read: the embedded server's from
        the config this data dir gave it, an external cluster's from the monitoring endpoints
        the settings name (``MEMSTREAM_NATS_MONITOR_URL``), else unknown."""
        if self.runtime is not None:
            path = self.settings.data_dir / CONFIG_FILE
            policy = await asyncio.to_thread(configured_sync, path)
            return [ServerSync("embedded nats-server", policy, f"its config {path}")]
        if self.settings.nats_monitor_url:
            return await monitored_sync(self.settings.nats_monitor_url)
        return [
            ServerSync(
                ",".join(redact_url(u) for u in nats_servers(self.settings.nats_url or "")),
                None,
                "set MEMSTREAM_NATS_MONITOR_URL to the servers' monitoring endpoints to check it",
            )
        ]

    async def check_against_log(self, *, healer: bool, refuse: bool = True) -> None:
        """Refuse to serve a read-model copy ahead of the log (the log lost or replaced its
        tail: :mod:`memstream.workers.log.log_position`). A SQLite copy is moved aside and rebuilt
        by the projector of the process that owns it: that is this one when ``healer``, else
        this waits (up to the read timeout) for the owner to do it. A shared copy (PostgreSQL)
        is never replaced by a client. What was found stays in :attr:`found_ahead`;
        ``refuse=False`` only finds it (for the commands that report or mend it).

        Raises:
            ReadModelAheadError: the copy is ahead of the log (and was not rebuilt in time).
        """
        gap = self.found_ahead = await check_copy(self.log, self.read_models.marks())
        if gap is None or not refuse:
            return
        location = self.copy.location
        if self.settings.database_url is not None:
            raise ReadModelAheadError(gap.refusal(location))
        if healer:
            return  # this process's projector checks it before it binds, and rebuilds it
        if self.runtime is None or self.runtime.owner:
            # No other process here runs its projector (a worker elsewhere may: it rebuilds it)
            raise ReadModelAheadError(gap.refusal(location))
        deadline = asyncio.get_running_loop().time() + self.settings.read_timeout
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(AHEAD_POLL_SECONDS)
            self._reopen_if_replaced()
            gap = await check_copy(self.log, self.read_models.marks())
            if gap is None:
                return
        raise ReadModelAheadError(gap.refusal(location))

    def start_workers(self) -> None:
        """Run the workers in this process: the projector, the indexer (its model is loaded
        when the first text to embed arrives) and the extractor."""
        if self.projector is not None:
            return
        self.projector = ProjectorWorker.open(
            self.log,
            self.copy,
            PROJECTOR_PROJECTIONS,
            on_commit=self._projected,
            demand=self.demand,
            linger=PROJECTOR_LINGER,
            own_event=self._own_event,
            # Of a partitioned stream: every partition, each tracked (see TrackingRows).
            rows=TrackingRows(self.partitions, frozenset(range(self.partitions)))
            if self.partitions
            else None,
        )
        self.projector.start()
        try:
            self.indexer = ProjectorWorker.open(
                self.log,
                self.copy,
                INDEXER_PROJECTIONS,
                encoder=self.encoder,
                on_commit=partial(self._advance, INDEXER_PROJECTIONS),
                batch_size=256,
            )
        except MemstreamError as error:  # e.g. an indexer runs for this copy elsewhere
            logger.warning("not indexing %s here: %s", self.settings.data_dir, error)
        else:
            self.indexer.start()
        try:
            self.analytics = ProjectorWorker.open(
                self.log,
                self.copy,
                ANALYTICS_PROJECTIONS,
                on_commit=partial(self._advance, ANALYTICS_PROJECTIONS),
                batch_size=1000,
                demand=self.analytics_demand,  # readers of sessions never wait for it
                linger=ANALYTICS_LINGER,
            )
        except MemstreamError as error:  # e.g. an analytics worker runs for this copy elsewhere
            logger.warning("not counting analytics of %s here: %s", self.settings.data_dir, error)
        else:
            self.analytics.start()
        self.extractor = ExtractorWorker(
            self.log, extractor_from_settings(self.settings), embed=self._embed
        )
        self.extractor.start()

    async def workers_bound(self, timeout: float = WORKERS_BOUND_SECONDS) -> None:
        """Wait (at most ``timeout``) until the projector and the analytics worker of this
        process have their durable consumers: from then on the copy is known to be projected
        by them (``projections verify`` counts analytics for it). Without NATS they keep
        trying in the background; this returns at the timeout."""
        workers = [w for w in (self.projector, self.analytics) if w is not None]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(worker.bound.wait() for worker in workers)), timeout
            )

    def watch_ownership(self, run_workers: bool, interval: float = 0.5) -> None:
        """As a guest of another process's embedded server, take it over when that owner
        exits: restart the server from the same store on the same port (the NATS client
        reconnects by itself) and, if ``run_workers``, run the workers here from then on."""
        runtime = self.runtime
        if runtime is None or runtime.owner or self._watchdog is not None:
            return

        async def watch() -> None:
            while True:
                try:
                    if await asyncio.to_thread(runtime.try_take_over):
                        break
                except Exception as error:  # e.g. the server did not start: keep watching
                    logger.warning("cannot take over the embedded NATS server: %s", error)
                await asyncio.sleep(interval)
            logger.info("took over the embedded NATS server of %s", runtime.data_dir)
            if run_workers:
                try:
                    self.start_workers()
                except MemstreamError as error:  # e.g. a projector runs for this copy already
                    logger.warning("not projecting %s here: %s", runtime.data_dir, error)

        self._watchdog = asyncio.create_task(watch(), name="memstream-ownership")

    async def _project_own_writes(self) -> None:
        """Before the projector of this process stops: let it project this client's writes, so
        that the next process reads them at once (bounded; a later projector would anyway)."""
        timeout = min(self.settings.read_timeout, CLOSE_DRAIN_SECONDS)
        for name, watch in self.positions.items():
            if name in ANALYTICS_PROJECTIONS:
                continue  # volumes: the next analytics worker of the copy counts what is left
            last = self.last_profile_seq if name in INDEXER_PROJECTIONS else self.last_write_seq
            try:
                await watch.wait_for(last, timeout)
            except (ProjectionLagError, UnavailableError):  # lagging, or its database away
                logger.warning(
                    "closing before projection %s reached this client's last write %d; "
                    "the next projector of %s will project it",
                    name,
                    self.last_write_seq,
                    self.settings.data_dir,
                )
                return

    async def close(self) -> None:
        """Stop workers, close connections, and release the embedded server if owned."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            # A take-over whose projector failed to start must not keep us from releasing.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watchdog
            self._watchdog = None
        if self.projector is not None:
            await self._project_own_writes()
            if self.extractor is not None:
                await self.extractor.close()
                self.extractor = None
            if self.indexer is not None:
                await self.indexer.close()
                self.indexer = None
            if self.analytics is not None:
                await self.analytics.close()
                self.analytics = None
            await self.projector.close()
            self.projector = None
        with contextlib.suppress(Exception):
            await self.client.flush(timeout=2)
        with contextlib.suppress(Exception):
            await self.client.close()
        self.read_models.close()
        if self.runtime is not None:
            await asyncio.to_thread(self.runtime.release)


async def open_memstream(
    settings: Settings, *, workers: bool | None = None, check_log: bool = True
) -> Memstream:
    """Connect everything ``settings`` describes (see :func:`connect`). ``check_log=False``
    opens a copy ahead of the log without refusing it (what ``status`` and ``projections
    rebuild`` need: see :meth:`Memstream.check_against_log`)."""
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
        ms = Memstream(settings, client, log, copy, runtime, check=run_workers)
    except BaseException:
        if client is not None:  # e.g. the stream could not be created: leave nothing open
            with contextlib.suppress(Exception):
                await client.close()
        if runtime is not None:
            await asyncio.to_thread(runtime.release)
        raise
    ms.connected_seq = connected_seq
    ms.partitions = await log.partitions()
    ms.connected_partitions = connected_partitions
    try:
        await ms.check_against_log(healer=run_workers, refuse=check_log)
    except BaseException:
        await ms.close()
        raise
    if run_workers:
        try:
            ms.start_workers()
            await ms.workers_bound()
        except BaseException:
            await ms.close()
            raise
    elif runtime is not None and workers is None:
        ms.watch_ownership(run_workers=True)
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


class _OwnWrite:
    """A client's events applied while their acknowledgement is on its way (a
    :class:`~memstream.workers.log.aggregate_store.Speculation`): see
    :meth:`Memstream._speculate`."""

    __slots__ = ("_client", "_entries", "_held", "_projector", "_timer")

    def __init__(
        self, client: Memstream, projector: ProjectorWorker, entries: list[LogEntry]
    ) -> None:
        self._client = client
        self._projector = projector
        self._entries = entries
        self._held: HeldOwn | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def first(self) -> int:
        return self._entries[0].seq

    def start(self) -> None:
        try:
            self._held = self._projector.hold_own(self._entries)
        except Exception:  # called inside a publish, which must not fail for it
            logger.debug("holding own events failed", exc_info=True)
        if self._held is not None:
            self._timer = asyncio.get_running_loop().call_later(HOLD_SECONDS, self.finish, None)

    def finish(self, first: int | None) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        held, self._held = self._held, None
        if held is None:
            return
        if first == self._entries[0].seq:
            if held.commit():  # kept; the group's commit forgets them (_projected)
                self._client._speculation_ended(True)
        else:
            held.abandon()
            self._client._speculation_ended(False)
