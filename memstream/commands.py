"""The command runner of a client: every write decided on an aggregate and appended to the log.

An aggregate is restored from the read model's snapshot plus the events after it (see
:class:`~memstream.workers.log.aggregate_store.AggregateStore`). A write does not depend on a
disposable read model: when the read model turns out damaged, or its server is away, the
command is decided on the aggregate replayed from the log instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from eventsourcing.domain import Aggregate

from memstream.domain.context import ContextDocument, SearchIndex
from memstream.domain.errors import ReadModelDamagedError, ReadModelUnavailableError
from memstream.domain.limits import check_session_id
from memstream.domain.memory_profile import MemoryProfile
from memstream.domain.session import SessionAggregate
from memstream.domain.session_registry import SessionRecord
from memstream.home_loop import home_loop_methods
from memstream.projections.ports import SnapshotSource
from memstream.read_side import ReadSide
from memstream.read_your_writes import ReadYourWrites
from memstream.workers.log.aggregate_store import AggregateStore, CommandResult, Decide
from memstream.workers.log.codec import CommandMeta
from memstream.workers.log.event_log import EventLog
from memstream.workers.log.subjects import subject_for
from memstream.workers.observability.metrics_hooks import hooks
from memstream.workers.observability.tracing import command_span, tracing
from memstream.workers.own_writes import OwnWrites

logger = logging.getLogger(__name__)

A = TypeVar("A", bound=Aggregate)
R = TypeVar("R")

# How long commands are decided on the log alone after the read model's server was away.
READ_MODEL_RETRY_SECONDS = 2.0


@home_loop_methods(lambda part: part.loop)
class CommandRunner:
    """Runs the commands of one client (``namespace``, recorded as ``actor``)."""

    def __init__(
        self,
        log: EventLog,
        namespace: str,
        actor: str,
        reads: ReadSide,
        ryw: ReadYourWrites,
        own: OwnWrites,
    ) -> None:
        # The loop it was made on: a call made on another runs there (see home_loop).
        self.loop = asyncio.get_running_loop()
        self.log = log
        self.namespace = namespace
        self.actor = actor
        self.reads = reads
        self.ryw = ryw
        self.own = own
        self._subjects: dict[str, str] = {}
        self._profiles: dict[str, AggregateStore[MemoryProfile]] = {}
        # While the read model's server is away (PostgreSQL down), commands are decided on the
        # log without trying it again until this monotonic time; warned once per outage.
        self._read_model_back_at = 0.0
        self._read_model_away = False
        self._restore_from_read_models()
        reads.on_replaced.append(self._restore_from_read_models)

    def _store(self, empty: Callable[[str], A], snapshots: SnapshotSource[A]) -> AggregateStore[A]:
        return AggregateStore(
            self.log,
            empty,
            snapshots=snapshots,
            published=self.own.published,
            speculate=self.own.speculate,
        )

    def _restore_from_read_models(self) -> None:
        """Aggregates are restored from the read models (plus the events after them), never
        replayed from their first event: a new read-model copy (one replaced after damage)
        starts new stores, and nothing restored from the old stays."""
        namespace = self.namespace
        read_models = self.reads.read_models
        self.sessions: AggregateStore[SessionAggregate] = self._store(
            lambda key: SessionAggregate.empty(namespace, key),
            read_models.session_snapshots(namespace),
        )
        # Blocks likewise, from the context read model (a block's writes each carry its whole
        # content: replaying them read every version of it).
        self.blocks: AggregateStore[ContextDocument] = self._store(
            lambda key: ContextDocument.empty(namespace, key),
            read_models.document_snapshots(namespace),
        )
        self.search_indexes: AggregateStore[SearchIndex] = self._store(
            lambda key: SearchIndex.empty(namespace, key),
            read_models.search_snapshots(namespace),
        )
        self.records: AggregateStore[SessionRecord] = self._store(
            lambda key: SessionRecord.empty(namespace, key),
            read_models.record_snapshots(namespace),
        )

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
        """Run a command on the aggregate ``kind``/``key`` of this client's namespace."""
        subject = subject_for(self.log.subject_prefix, self.namespace, kind, key)
        return await self._execute(store, subject, key, decide, meta, kind)

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
                published=self.own.published,
                speculate=self.own.speculate,
            )
        subject = subject_for(self.log.subject_prefix, namespace, "profile", profile)
        result = await self._execute(store, subject, profile, decide, meta, "profile")
        self.ryw.wrote_profile(result.seq)
        return result

    async def _execute(
        self,
        store: AggregateStore[A],
        subject: str,
        key: str,
        decide: Decide[A, R],
        meta: CommandMeta | None,
        kind: str,
    ) -> CommandResult[R]:
        """Decide and append, measured and traced when this process does either."""
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
        """Decide on the read model's snapshot; if the read model turns out damaged, report it
        (the projector here replaces it) and decide on the aggregate replayed from the log
        instead. The same command id both times, so the log keeps one copy even if the first
        attempt was published."""
        meta = meta or CommandMeta(actor=self.actor)
        if self._read_model_away and time.monotonic() < self._read_model_back_at:
            result = await store.without_snapshots().execute(subject, key, decide, meta)
            self.ryw.wrote(subject, result.seq)
            return result
        reads = self.reads
        try:
            with reads.read_models.damage_translated():
                result = await store.execute(subject, key, decide, meta)
        except ReadModelDamagedError as error:
            reads.report_damage(error)
            logger.warning(
                "read model %s is damaged (%s); deciding %s on its events from the log",
                reads.copy.location,
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
                logger.warning("read model %s is back", reads.copy.location)
                self._read_model_away = False
        self.ryw.wrote(subject, result.seq)
        return result


__all__ = ["CommandRunner"]
