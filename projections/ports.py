"""The read-model ports: what the workers, the client and the CLI use of a read-model backend.

A backend (SQLite in ``projections/sqlite/``, PostgreSQL in ``projections/postgres/``)
implements them. Plain values
cross them (dataclasses, dicts, strings, the domain's aggregates), never a driver's connection,
cursor or error: a backend translates its damage errors into
:class:`~memstream.domain.errors.ReadModelDamagedError`.

- :class:`ReadModelCopy`: one read-model copy (a SQLite file, a PostgreSQL database) before it is
  opened; :func:`~memstream.projections.read_models.open_read_models` picks it from the
  settings.
- :class:`ReadModels`: the read side a client holds: session and context queries, snapshot
  sources for the writers' aggregates, positions.
- :class:`ReadModelStore`: the write side a projector (or a rebuild) holds: it applies a batch of
  log records for its projections and records their positions, in one transaction it owns.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Generator, Hashable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Protocol, TypeVar

from eventsourcing.domain import Aggregate

from memstream.domain.context import ContextDocument, SearchIndex
from memstream.domain.errors import ReadModelDamagedError
from memstream.domain.messages import Message
from memstream.domain.session import SessionAggregate
from memstream.domain.session_registry import SessionRecord
from memstream.projections.overlays import Compaction
from memstream.projections.recent_history import RecentHistory
from memstream.projections.registry import PROJECTIONS, PROJECTOR_PROJECTIONS
from memstream.projections.tracking import TrackingRows

A = TypeVar("A", bound=Aggregate)

# A failing event is retried with its batch; after this many failures it is a dead letter.
MAX_ATTEMPTS = 5
REBUILD_HINT = "run `memstream projections rebuild` to move it aside and rebuild it from the log"


# -- records and results ---------------------------------------------------------------------


class TextEncoder(Protocol):
    """An embedding model (the indexer's and recall's; :mod:`memstream.workers.embeddings`)."""

    @property
    def model_name(self) -> str:
        """The name recorded with its vectors (a model change reindexes, never mixes)."""

    def encode(self, texts: Sequence[str]) -> Any:
        """The texts' vectors: a float32 array of L2-normalised rows."""


class LogRecord(Protocol):
    """One event of the log as a store applies it (:class:`memstream.workers.log.event_log.LogEntry`
    is one). The store decodes only the records some projection has not applied yet."""

    @property
    def seq(self) -> int:
        """Its stream sequence."""

    @property
    def subject(self) -> str: ...

    def namespace(self) -> str:
        """The namespace of its subject."""

    def decode(self) -> object:
        """The domain event (raises when the payload cannot be decoded: a dead letter)."""

    def event_type(self) -> str:
        """Its event type name, for a dead letter (never raises)."""

    def identity(self) -> str:
        """What tells this event from any other the log could hold at its sequence (its
        ``Nats-Msg-Id``, else a digest of its payload): recorded with a tracking row, so that a
        copy can tell a log that lost or replaced its tail (see
        :mod:`memstream.workers.log.log_position`)."""


# Upper bounds (seconds) of the batch-time histogram of ProjectorStats.
BATCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


@dataclass
class ProjectorStats:
    """Counters for status output and tests: events applied (by at least one projection) and
    skipped (already applied by all), dead letters recorded (one per projection), and batches
    committed. ``attempts`` counts the failures of each event across rolled-back batches."""

    batches: int = 0
    applied: int = 0
    skipped: int = 0
    dead_lettered: int = 0
    transient_failures: int = 0
    attempts: dict[int, int] = field(default_factory=dict)
    # Batches a worker fetched and committed, timed: a count per bucket of BATCH_BUCKETS
    # (seconds, upper bounds; slower ones only in the total), their total time.
    timed_batches: int = 0
    batch_seconds: float = 0.0
    batch_buckets: list[int] = field(default_factory=lambda: [0] * len(BATCH_BUCKETS))

    def timed(self, seconds: float) -> None:
        """Count one batch that took ``seconds``."""
        self.timed_batches += 1
        self.batch_seconds += seconds
        for index, bound in enumerate(BATCH_BUCKETS):
            if seconds <= bound:
                self.batch_buckets[index] += 1
                return


class StoreTransaction(Protocol):
    """A write transaction of a :class:`ReadModelStore` (see its :meth:`transaction`)."""

    @property
    def position(self) -> int:
        """The lowest position of its projections, what it applied included."""

    def apply(
        self, records: Sequence[LogRecord], stats: ProjectorStats
    ) -> Generator[None, None, None]:
        """Apply ``records``, pausing after each event, as :meth:`ReadModelStore.steps` does;
        on a failure (raised) the caller rolls back."""

    def expose(self) -> None:
        """Write what the projections hold back until the commit: reads through the store's
        connection then see everything applied."""

    def commit(self, stats: ProjectorStats) -> int:
        """Record the positions and commit; the lowest position committed. ``stats`` gets the
        counts of the transaction. On a failure (raised) it is rolled back."""

    def rollback(self) -> None:
        """Roll back (nothing once it has ended)."""


class StoreBusy(Exception):
    """Another connection holds the read model's write lock (raised only to a caller that
    asked not to wait for it: ``wait=False``)."""


class ReadModelRewound(Exception):
    """The read model's tracked position went backwards (it was dropped for a rebuild), or it
    was damaged or replaced: the projector re-binds its consumer to the new position."""


@dataclass(frozen=True, slots=True)
class Difference:
    """Where two builds of a projection first differ: the part, and the first row of it that
    is not the same on both sides (``None``: that side has no more rows)."""

    part: str
    live: tuple[Any, ...] | None
    rebuilt: tuple[Any, ...] | None


OnDamage = Callable[[ReadModelDamagedError], NoReturn]


def step(steps: Generator[None, None, int]) -> int | None:
    """Run a batch's :meth:`ReadModelStore.steps` to their next pause; their result (the
    position committed) once they have ended."""
    try:
        next(steps)
    except StopIteration as finished:
        result: int = finished.value
        return result
    return None


def run_to_end(steps: Generator[None, None, None]) -> None:
    """Run steps that return nothing (:meth:`StoreTransaction.apply`) to their end."""
    for _ in steps:
        pass


def run_steps(steps: Generator[None, None, int]) -> int:
    """Run a batch's :meth:`ReadModelStore.steps` to their end, without pausing."""
    while (result := step(steps)) is None:
        pass
    return result


# -- the read side ---------------------------------------------------------------------------


class SessionQueries(Protocol):
    """Reads of the sessions read model (complete results, never cursors)."""

    def history(
        self, namespace: str, session_id: str, leaf_id: str | None = None
    ) -> list[Message]: ...

    def recent_history(
        self,
        namespace: str,
        session_id: str,
        max_content_bytes: int,
        min_recent_messages: int = 1,
    ) -> RecentHistory: ...

    def path_messages_containing(
        self, namespace: str, session_id: str, role: str, needle: str
    ) -> list[Message]: ...

    def row_stats(self, namespace: str, session_id: str) -> list[dict[str, Any]]: ...

    def message(self, namespace: str, session_id: str, message_id: str) -> Message | None: ...

    def latest_leaf(self, namespace: str, session_id: str) -> Message | None: ...

    def path_length(self, namespace: str, session_id: str, leaf_id: str | None = None) -> int: ...

    def branches(self, namespace: str, session_id: str, message_id: str) -> list[Message]: ...

    def compactions(self, namespace: str, session_id: str) -> list[Compaction]: ...

    def sessions(self, namespace: str) -> list[dict[str, Any]]: ...

    def summary(self, namespace: str, session_id: str) -> dict[str, Any] | None: ...

    def empty_summary(self, namespace: str, session_id: str) -> dict[str, Any]: ...

    def message_count(self, namespace: str, session_id: str) -> int: ...

    def search(
        self, namespace: str, session_id: str | None, query: str, limit: int
    ) -> list[dict[str, Any]]: ...


class ContextQueries(Protocol):
    """Reads of the context read model."""

    def block_content(self, namespace: str, label: str, session_id: str) -> str | None: ...

    def blocks(self, namespace: str, session_id: str | None = None) -> list[dict[str, Any]]: ...

    def cached_prompt(self, namespace: str, session_id: str) -> str | None: ...

    def loaded_skills(self, namespace: str, session_id: str) -> list[str]: ...

    def entry_count(self, namespace: str, block_key: str) -> int: ...

    def search_entries(
        self, namespace: str, block_key: str, query: str, limit: int
    ) -> list[tuple[str, str]]: ...


class Snapshot(Protocol[A]):
    """An aggregate as a read model holds it, after the subject's event at :attr:`seq`."""

    @property
    def seq(self) -> int:
        """The stream sequence of the last event of the subject it reflects (0: none)."""

    def restore(self) -> A:
        """The aggregate as of :attr:`seq`."""

    def rebind(self, aggregate: A) -> None:
        """Point an aggregate restored from an earlier reading at this one's state (called
        only while its overlay of later events is still valid on top of this snapshot)."""


class SnapshotSource(Protocol[A]):
    """Where aggregates are restored from instead of replaying their subjects."""

    def reading(self) -> AbstractContextManager[None]:
        """A consistent view for :meth:`snapshot` and every lookup of a decision."""

    def snapshot(self, key: str) -> Snapshot[A]:
        """The snapshot of aggregate ``key`` (inside :meth:`reading`)."""

    def guard(self, low: int, high: int) -> None:
        """Let restored aggregates look up outside a reading, each lookup checking that the
        snapshot it reads is at a position within ``low..high`` (and raising
        :class:`~memstream.domain.message_index.StoredMessagesMoved` otherwise), until the
        next reading."""


class RegistryQueries(Protocol):
    """Reads of the session registry: registered sessions as ``SessionInfo`` dicts (``id``,
    ``name``, ``parent_session_id``, ``model``, ``source``, ``input_tokens``,
    ``output_tokens``, ``estimated_cost``, ``end_reason``, ``created_at``, ``updated_at``)."""

    def session(self, namespace: str, session_id: str) -> dict[str, Any] | None: ...

    def page(
        self, namespace: str, limit: int, before: int | None = None
    ) -> tuple[list[dict[str, Any]], int | None]:
        """Up to ``limit`` sessions, most recently active first, last active before log
        position ``before``; and the position to continue from (``None``: no more)."""

    def count(self, namespace: str) -> int: ...


class AnalyticsQueries(Protocol):
    """Reads of the analytics projection."""

    def daily(
        self, namespace: str | None, since: str | None = None, until: str | None = None
    ) -> list[dict[str, Any]]:
        """One row per namespace (every one when ``None``), day (ISO dates, bounds
        inclusive), model and source: ``sessions`` (first seen that day), ``messages``,
        ``input_tokens``, ``output_tokens``, ``cost``, ``memories`` (by type), ``remembered``,
        ``ingested_messages``, ``ingested_bytes``; ordered by day."""


class VectorSearch(Protocol):
    """Nearest vectors by cosine similarity: a profile's vectors of one kind, searched in
    memory (:class:`memstream.projections.vector_search.VectorIndex`) or by the database."""

    def search(
        self,
        query: Any,
        k: int,
        *,
        min_score: float | None = None,
        exclude: Collection[str] = (),
    ) -> list[tuple[str, float]]:
        """The ``k`` ids most similar to ``query`` (a normalised vector), best first, as
        ``(id, score)``; below ``min_score`` or in ``exclude``: left out."""


class MemoryQueries(Protocol):
    """Reads of the memory and vectors read models, each scoped by (namespace, profile)
    (:class:`memstream.projections.sqlite.memory_queries.SqliteMemoryQueries` documents
    each)."""

    def profiles(self, namespace: str) -> list[dict[str, Any]]: ...

    def exists(self, namespace: str, profile: str) -> bool: ...

    def memory(self, namespace: str, profile: str, memory_id: str) -> dict[str, Any] | None: ...

    def memories(
        self, namespace: str, profile: str, ids: Sequence[str]
    ) -> dict[str, dict[str, Any]]: ...

    def page(
        self,
        namespace: str,
        profile: str,
        limit: int,
        after: int | None = None,
        *,
        session_id: str | None = None,
        type: str | None = None,
    ) -> tuple[list[dict[str, Any]], int | None]: ...

    def all_memories(self, namespace: str, profile: str) -> list[dict[str, Any]]: ...

    def message(self, namespace: str, profile: str, message_id: str) -> dict[str, Any] | None: ...

    def history(
        self, namespace: str, profile: str, memory_id: str
    ) -> list[dict[str, Any]] | None: ...

    def extraction(
        self, namespace: str, profile: str, source: str
    ) -> tuple[int, int | None] | None: ...

    def pending_extractions(self, namespace: str, profile: str) -> int: ...

    def search_memories(
        self, namespace: str, profile: str, terms: Sequence[str], limit: int
    ) -> list[str]: ...

    def search_messages(
        self, namespace: str, profile: str, terms: Sequence[str], limit: int
    ) -> list[str]: ...

    def memories_of_messages(
        self, namespace: str, profile: str, message_ids: Sequence[str]
    ) -> dict[str, list[str]]: ...

    def memories_by_topic(
        self, namespace: str, profile: str, keys: Sequence[str], limit: int
    ) -> list[str]: ...

    def memories_between(
        self, namespace: str, profile: str, start: str, end: str, limit: int
    ) -> list[str]: ...

    def vectors(
        self, namespace: str, profile: str, kind: str, model: str
    ) -> tuple[list[str], list[bytes]]: ...

    def vector_state(self, namespace: str, profile: str, kind: str) -> tuple[int, int]: ...

    def vectors_position(self) -> int: ...

    def vector_search(
        self, namespace: str, profile: str, kind: str, model: str
    ) -> VectorSearch | None:
        """A search the database runs itself over the profile's vectors of ``kind`` made by
        ``model`` (PostgreSQL with pgvector), or ``None``: load them (:meth:`vectors`)."""


class ReadModels(Protocol):
    """The read side of an open read-model copy. Queries hand damage to the ``on_damage`` they
    were opened with; everything else raises :class:`ReadModelDamagedError` for it."""

    @property
    def sessions(self) -> SessionQueries: ...

    @property
    def context(self) -> ContextQueries: ...

    @property
    def registry(self) -> RegistryQueries: ...

    @property
    def memory(self) -> MemoryQueries: ...

    @property
    def analytics(self) -> AnalyticsQueries: ...

    @property
    def identity(self) -> Hashable | None:
        """What tells this copy's storage from a replacement (``None``: not replaceable)."""

    def session_snapshots(self, namespace: str) -> SnapshotSource[SessionAggregate]: ...

    def document_snapshots(self, namespace: str) -> SnapshotSource[ContextDocument]: ...

    def search_snapshots(self, namespace: str) -> SnapshotSource[SearchIndex]: ...

    def record_snapshots(self, namespace: str) -> SnapshotSource[SessionRecord]: ...

    def lent(self) -> bool:
        """Whether reads now go through the store a projector of this process lends."""

    def tracked_seq(self, projection: str) -> int:
        """The last stream sequence ``projection`` committed (0: none); of a partitioned one,
        the lowest of its partitions'."""

    def tracked_partitions(self, projection: str) -> dict[int, int]:
        """Each partition's position of a partitioned ``projection`` (see
        :class:`TrackingRows`); empty when it is not partitioned."""

    def marks(self) -> list[tuple[str, int, str | None]]:
        """Every tracking row of the copy past 0: its name, its sequence, and the identity of
        the event there (:meth:`LogRecord.identity`; ``None`` when it was recorded before
        identities were), what :mod:`memstream.workers.log.log_position` checks against the
        log."""

    def copy_id(self) -> str:
        """The id of the copy (kept inside it)."""

    def dead_letters(self) -> list[dict[str, object]]:
        """Every recorded dead letter, oldest first."""

    def replaced(self) -> bool:
        """Whether the copy was replaced since it was opened (then open it again)."""

    def damage_translated(self) -> AbstractContextManager[None]:
        """Translates the backend's damage errors met inside into :class:`ReadModelDamagedError`
        (for reads outside the queries, e.g. by snapshots while a command decides)."""

    def close(self) -> None: ...


# -- the write side --------------------------------------------------------------------------


class ReadModelStore(Protocol):
    """The write side of an open read-model copy, for one set of projections.

    Damage raises :class:`ReadModelDamagedError`; a transient failure (locked, busy,
    unreachable) raises anything else, and the batch is retried.
    """

    @property
    def projections(self) -> Sequence[str]:
        """The names of the projections it applies batches for."""

    @property
    def identity(self) -> Hashable | None:
        """See :attr:`ReadModels.identity`."""

    @property
    def renewable(self) -> bool:
        """Whether :meth:`renew` can replace damaged storage (a file or database it opened)."""

    @property
    def fresh(self) -> bool:
        """Whether opening it replaced a damaged copy with a new, empty one."""

    def copy_id(self) -> str: ...

    @property
    def rows(self) -> TrackingRows:
        """Where it records positions (see :meth:`track`)."""

    def track(self, rows: TrackingRows) -> None:
        """Record positions in ``rows`` from now on: a projector of some partitions of a
        partitioned stream (creating every partition's rows that are missing)."""

    def positions(self) -> dict[str, int]:
        """The last stream sequence each of its tracking rows committed (0: none): one per
        projection, or one per projection and partition it consumes (see :meth:`track`)."""

    def marks(self) -> list[tuple[str, int, str | None]]:
        """See :meth:`ReadModels.marks` (every row of the copy, not only its own)."""

    def steps(
        self,
        records: Sequence[LogRecord],
        stats: ProjectorStats,
        *,
        committed: int | None = None,
        wait: bool = True,
    ) -> Generator[None, None, int]:
        """Apply ``records`` in one transaction with the projections' new positions, pausing
        (``yield``) after each event; the generator returns the lowest position now committed.
        Closing it before its end rolls the transaction back.

        A record at or below a projection's position is skipped for it. When the positions are
        below ``committed`` (the caller's last commit: someone dropped the read model), nothing
        is written and :class:`ReadModelRewound` is raised. A failing event raises (the batch
        rolls back, to be retried); after :data:`MAX_ATTEMPTS` failures, or at once when it
        cannot be decoded, it is recorded as a dead letter and passed over. ``stats`` counts
        only what a committed transaction did (``attempts`` survives rollbacks).

        ``wait=False``: when another connection holds the write lock, the first step raises
        :class:`StoreBusy` at once instead of waiting for it (an event loop must not block)."""

    def apply(
        self, records: Sequence[LogRecord], stats: ProjectorStats, *, committed: int | None = None
    ) -> int:
        """:meth:`steps` driven to its end without pausing."""

    def transaction(self, *, committed: int | None = None, wait: bool = True) -> StoreTransaction:
        """Begin a write transaction that applies records batch after batch until it commits
        (what :meth:`steps` does for one batch). ``committed`` and ``wait``: as for
        :meth:`steps`.

        Raises:
            ReadModelRewound: the positions are below ``committed``.
            StoreBusy: ``wait`` is false and another connection holds the write lock.
        """

    def replaced(self) -> bool:
        """Whether another process replaced the copy since this store opened it."""

    def renew(self, damage: str | None) -> None:
        """Open the copy again: a damaged one (``damage`` says why) is moved aside and a fresh
        one created, to be rebuilt from the log; else the one another process put in place.

        Raises:
            MemstreamError: it could not be replaced or opened (try again later).
        """

    def drop(self, projection: str) -> None:
        """Empty ``projection`` and reset its position (for a rebuild from the log)."""

    def dead_letters(self) -> list[dict[str, object]]: ...

    def forget_dead_letters(self, letters: Sequence[tuple[str, int]]) -> int:
        """Delete the dead letters ``(projection, seq)`` (the events were erased from the log:
        nothing of them may stay); how many there were."""

    def checksum(self, projection: str) -> str:
        """A digest of ``projection``'s whole content, equal for equal content."""

    def first_difference(self, other: ReadModelStore, projection: str) -> Difference | None:
        """Where ``projection`` first differs between this store (live) and ``other``."""

    def close(self) -> None: ...


class CopyLock(Protocol):
    """The projector locks of some projections of one read-model copy."""

    @property
    def held(self) -> bool: ...

    def release(self) -> None: ...


class ReadModelCopy(Protocol):
    """One read-model copy (a SQLite file, a PostgreSQL database), not opened yet."""

    @property
    def location(self) -> str:
        """Where it lives, for messages (a path, a redacted URL)."""

    def exists(self) -> bool: ...

    def reader(
        self,
        *,
        on_damage: OnDamage,
        lender: Callable[[], ReadModelStore | None] | None = None,
        check: bool = False,
    ) -> ReadModels:
        """Open it for reading. ``lender`` may lend the idle store of a projector in this
        process (reads may use it when it writes the same copy); ``check`` (the process that
        runs the projector) moves a damaged or foreign copy aside first.

        Raises:
            ReadModelDamagedError: it is damaged or foreign (and ``check`` is off or it cannot
                be moved aside).
            UnavailableError: it cannot be opened.
        """

    def store(
        self,
        projections: Sequence[str] = PROJECTOR_PROJECTIONS,
        *,
        long_lived: bool = False,
        repair: bool = True,
        encoder: TextEncoder | None = None,
    ) -> ReadModelStore:
        """Open it for writing ``projections`` (``encoder`` embeds texts for ``vectors``); with
        ``repair``, a damaged or foreign copy is
        moved aside first (then :attr:`ReadModelStore.fresh`). ``long_lived``: a projector's
        store, open for the process's life (it may do the backend's upkeep in the background).

        Raises:
            ReadModelDamagedError: it is damaged and cannot be moved aside.
            UnavailableError: it cannot be opened.
        """

    def scratch(
        self,
        projections: Sequence[str] = PROJECTOR_PROJECTIONS,
        *,
        encoder: TextEncoder | None = None,
    ) -> ReadModelStore:
        """A new, empty, temporary store of the same kind (gone when closed), e.g. to verify."""

    def claim(self, projections: Sequence[str] = PROJECTIONS) -> CopyLock:
        """Take the projector locks of ``projections`` of the copy (one projector per
        projection of a copy) for a projector this process runs: all or none.

        Raises:
            ProjectorRunningError: another projector runs one of them for this copy.
            UnavailableError: it cannot be opened.
        """

    def repair(self) -> str | None:
        """Check the copy whole and move it aside if it is damaged or foreign; the name it was
        moved to (``None``: intact).

        Raises:
            ReadModelDamagedError: it is damaged and cannot be moved aside.
        """


class ReadModelSettings(Protocol):
    """What :func:`~memstream.projections.read_models.open_read_models` needs of the
    settings (:class:`memstream.settings.Settings` and the workers' config have it)."""

    @property
    def database_path(self) -> Path: ...

    @property
    def database_url(self) -> str | None: ...
