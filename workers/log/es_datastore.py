"""The NATS side of the eventsourcing adapter: a private event loop thread and the log operations.

:class:`NatsDatastore` owns one NATS connection served by an asyncio loop in a background thread;
its synchronous methods submit coroutines to that loop and wait for them, bounded by timeouts, and
translate failures into eventsourcing's persistence errors. The recorders in
:mod:`memstream.workers.log.es_persistence` are thin over it.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
from eventsourcing.persistence import (
    DatabaseError,
    DataError,
    IntegrityError,
    InterfaceError,
    Notification,
    OperationalError,
    ProgrammingError,
    StoredEvent,
)
from nats.aio.client import Client

from memstream.domain.errors import IncompatibleServerError, UnavailableError
from memstream.workers.log.codec import H_ORIGINATOR_ID, H_ORIGINATOR_VERSION, H_TOPIC
from memstream.workers.log.event_log import (
    EventLog,
    ExpectedSequenceMismatch,
    LogEntry,
    OutgoingMessage,
    connect_nats,
)

T = TypeVar("T")

H_ORIGINATOR_ID_TYPE = "Ms-Originator-Id-Type"
ATOMIC_BATCH_TOO_LARGE = 10199
DUPLICATE_MESSAGE_ID = 10201
MAX_ATTEMPTS = 20
READ_BATCH = 1000


class NatsDatastore:
    """One NATS connection and the private event loop thread that serves it."""

    def __init__(
        self,
        url: str,
        stream: str,
        subject_prefix: str,
        *,
        timeout: float = 5.0,
        call_timeout: float = 60.0,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        creds: str | None = None,
    ) -> None:
        self.call_timeout = call_timeout
        self._closed = False
        self._close_hooks: set[Callable[[], None]] = set()
        self._close_lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"memstream-es-{stream}", daemon=True
        )
        self._thread.start()
        try:
            self.client: Client = self.run(
                connect_nats(
                    url,
                    name="memstream-eventsourcing",
                    user=user,
                    password=password,
                    token=token,
                    creds=creds,
                )
            )
        except BaseException:
            self._stop_loop()
            raise
        self.log = EventLog(self.client, stream, subject_prefix, timeout=timeout)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the datastore's loop and wait for its result, at most ``timeout``.

        Raises:
            OperationalError: NATS is unreachable or the call did not finish in time.
            InterfaceError: the datastore is closed.
        """
        if self._closed:
            coro.close()
            raise InterfaceError("the NATS datastore is closed")
        if threading.current_thread() is self._thread:
            coro.close()
            raise ProgrammingError("a recorder was called from its own event loop thread")
        limit = self.call_timeout if timeout is None else timeout
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(limit)
        except TimeoutError as error:
            if not future.done():
                future.cancel()
                raise OperationalError(f"NATS call did not finish within {limit:g} s") from None
            raise OperationalError(f"NATS timed out: {error!r}") from error
        except IncompatibleServerError:
            raise  # one line that says what to upgrade, before anything is written
        except UnavailableError as error:
            raise OperationalError(str(error)) from error
        except nats.js.errors.APIError as error:
            raise DatabaseError(f"JetStream refused a request: {error}") from error
        except (nats.errors.Error, OSError) as error:
            raise OperationalError(f"NATS failed: {error!r}") from error

    def ensure_stream(self) -> None:
        """Create the stream if it is missing."""
        self.run(self.log.ensure_stream())

    def append(self, appends: Sequence[Append]) -> list[int]:
        """Append all messages or none, each subject guarded by its last position.

        Returns the stream sequence of each message.

        Raises:
            IntegrityError: a position is not above its subject's last one (or not ascending).
            DataError: more messages than one JetStream atomic batch may hold.
        """
        if not appends:
            return []
        _check_ascending(appends)
        return self.run(_append_guarded(self.log, appends))

    def last_position(self, subject: str, header: str) -> int | None:
        """The ``header`` (a position) of the subject's last message; None if it has none."""
        return self.run(_last(self.log, subject, header))[1]

    def last_seq(self, filter_subject: str) -> int:
        """Stream sequence of the last message matching ``filter_subject``; 0 if none."""
        return self.run(_last(self.log, filter_subject, ""))[0]

    def select_events(
        self,
        subject: str,
        originator_id: uuid.UUID | str,
        *,
        gt: int | None,
        lte: int | None,
        desc: bool,
        limit: int | None,
    ) -> list[StoredEvent]:
        """Events on one originator's subject whose version is in (gt, lte], ordered, limited."""
        entries = self.run(_select(self.log, subject, gt=gt, lte=lte, desc=desc, limit=limit))
        return [
            StoredEvent(
                originator_id=originator_id,
                originator_version=_version(entry.headers, entry.seq),
                topic=_required(entry.headers, H_TOPIC, entry.seq),
                state=entry.payload,
            )
            for entry in entries
        ]

    def notifications(
        self,
        filter_subject: str,
        start_seq: int,
        limit: int,
        stop: int | None,
        topics: Sequence[str],
    ) -> list[Notification]:
        """At most ``limit`` notifications from ``start_seq`` to ``stop``, of the given topics."""
        return self.run(_notifications(self.log, filter_subject, start_seq, limit, stop, topics))

    def add_close_hook(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` when the datastore closes (to wake threads that wait on it)."""
        self._close_hooks.add(hook)

    def remove_close_hook(self, hook: Callable[[], None]) -> None:
        self._close_hooks.discard(hook)

    def close(self) -> None:
        """Close the connection and stop the loop thread (idempotent)."""
        with self._close_lock:
            if self._closed:
                return
            for hook in list(self._close_hooks):
                hook()
            try:
                self.run(self._shutdown(), timeout=10.0)
            finally:
                self._closed = True
                self._stop_loop()

    async def _shutdown(self) -> None:
        await self.client.close()
        current = asyncio.current_task()
        tasks = [task for task in asyncio.all_tasks() if task is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._loop.shutdown_asyncgens()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10.0)
        if not self._thread.is_alive():
            self._loop.close()


@dataclass(frozen=True, slots=True)
class Append:
    """One message to append to a subject at ``position`` (a version or a notification id)."""

    subject: str
    position: int
    position_header: str
    message: OutgoingMessage


def _check_ascending(appends: Sequence[Append]) -> None:
    last: dict[str, int] = {}
    for append in appends:
        previous = last.get(append.subject)
        if previous is not None and append.position <= previous:
            raise IntegrityError(
                f"{append.subject}: position {append.position} follows {previous} in one insert; "
                "positions of a subject must ascend"
            )
        last[append.subject] = append.position


async def _append_guarded(log: EventLog, appends: Sequence[Append]) -> list[int]:
    """Publish after checking each subject's last position; retry when another writer won."""
    subjects = list(dict.fromkeys(append.subject for append in appends))
    first: dict[str, Append] = {}
    for append in appends:
        first.setdefault(append.subject, append)
    messages = [(append.subject, append.message) for append in appends]
    for attempt in range(MAX_ATTEMPTS):
        lasts = await asyncio.gather(
            *(_last(log, subject, first[subject].position_header) for subject in subjects)
        )
        expected: dict[str, int] = {}
        for subject, (seq, position) in zip(subjects, lasts, strict=True):
            if position is not None and first[subject].position <= position:
                raise IntegrityError(
                    f"{subject} already has position {position}; "
                    f"cannot append position {first[subject].position}"
                )
            expected[subject] = seq
        try:
            result = await log.publish_many(messages, expected)
        except ExpectedSequenceMismatch:
            await asyncio.sleep(0.001 * min(attempt, 10))
            continue
        except nats.js.errors.BadRequestError as error:
            raise _translate(error, len(messages)) from error
        if result.duplicate:
            raise IntegrityError(f"{messages[0][1].msg_id} was recorded already")
        return list(range(result.seq - len(messages) + 1, result.seq + 1))
    raise OperationalError(f"{', '.join(subjects)} kept changing for {MAX_ATTEMPTS} attempts")


def _translate(error: nats.js.errors.BadRequestError, count: int) -> DatabaseError:
    if error.err_code == DUPLICATE_MESSAGE_ID:
        return IntegrityError(f"an event of this insert was recorded already: {error}")
    if error.err_code == ATOMIC_BATCH_TOO_LARGE:
        return DataError(f"an insert of {count} messages exceeds the atomic batch limit: {error}")
    return DatabaseError(str(error))


async def _last(log: EventLog, subject: str, header: str) -> tuple[int, int | None]:
    """Stream sequence of the subject's last message (0 if none) and its ``header`` as int."""
    try:
        message = await log.js.get_last_msg(log.stream, subject)
    except nats.js.errors.NotFoundError:
        return 0, None
    except (nats.errors.Error, OSError) as error:
        raise OperationalError(f"cannot read the last message of {subject}: {error!r}") from error
    headers = message.headers or {}
    position = headers.get(header) if header else None
    return int(message.seq or 0), None if position is None else int(position)


async def _read_batch(
    log: EventLog, filter_subject: str, start_seq: int, batch: int
) -> tuple[list[LogEntry], int]:
    """One batch direct get (see :meth:`EventLog.read_batch`) with eventsourcing's errors."""
    try:
        return await log.read_batch(filter_subject, start_seq, batch)
    except UnavailableError as error:
        raise OperationalError(str(error)) from error


async def _scan(
    log: EventLog,
    filter_subject: str,
    start_seq: int,
    keep: Callable[[LogEntry], bool | None],
    batch: int = READ_BATCH,
) -> None:
    """Feed messages from ``start_seq`` on to ``keep`` until it returns None or none are left."""
    seq = start_seq
    while True:
        entries, pending = await _read_batch(log, filter_subject, seq, batch)
        for entry in entries:
            if keep(entry) is None:
                return
        if not entries or pending == 0:
            return
        seq = entries[-1].seq + 1


async def _select(
    log: EventLog, subject: str, *, gt: int | None, lte: int | None, desc: bool, limit: int | None
) -> list[LogEntry]:
    """Messages of one originator whose version is in (gt, lte], ordered and limited."""
    if desc and limit == 1 and lte is None:
        # The common question "what is the latest (snapshot)?" costs one request.
        try:
            last = await log.js.get_last_msg(log.stream, subject)
        except nats.js.errors.NotFoundError:
            return []
        except (nats.errors.Error, OSError) as error:
            raise OperationalError(f"cannot read {subject} from NATS: {error!r}") from error
        headers = dict(last.headers or {})
        version = _version(headers, int(last.seq or 0))
        if gt is not None and version <= gt:
            return []
        return [LogEntry(int(last.seq or 0), subject, last.data or b"", headers)]

    selected: list[LogEntry] = []

    def keep(entry: LogEntry) -> bool | None:
        version = _version(entry.headers, entry.seq)
        if lte is not None and version > lte:
            return None  # versions ascend along the subject
        if gt is None or version > gt:
            selected.append(entry)
        if not desc and limit is not None and len(selected) >= limit:
            return None
        return True

    small = not desc and gt is None and limit is not None
    await _scan(log, subject, 1, keep, min(limit, READ_BATCH) if small and limit else READ_BATCH)
    if desc:
        selected.reverse()
    return selected if limit is None else selected[:limit]


async def _notifications(
    log: EventLog,
    filter_subject: str,
    start_seq: int,
    limit: int,
    stop: int | None,
    topics: Sequence[str],
) -> list[Notification]:
    selected: list[Notification] = []
    if limit <= 0 or (stop is not None and stop < start_seq):
        return selected

    def keep(entry: LogEntry) -> bool | None:
        if stop is not None and entry.seq > stop:
            return None
        if not topics or entry.headers.get(H_TOPIC) in topics:
            selected.append(_notification(entry.seq, entry.payload, entry.headers))
        return None if len(selected) >= limit else True

    await _scan(
        log, filter_subject, start_seq, keep, READ_BATCH if topics else min(limit, READ_BATCH)
    )
    return selected


def _notification(seq: int, payload: bytes, headers: dict[str, str]) -> Notification:
    raw_id = _required(headers, H_ORIGINATOR_ID, seq)
    is_uuid = headers.get(H_ORIGINATOR_ID_TYPE, "uuid") == "uuid"
    return Notification(
        id=seq,
        originator_id=uuid.UUID(raw_id) if is_uuid else raw_id,
        originator_version=_version(headers, seq),
        topic=_required(headers, H_TOPIC, seq),
        state=payload,
    )


def _required(headers: dict[str, str], key: str, seq: int) -> str:
    value = headers.get(key)
    if value is None:
        raise DataError(f"stream message {seq} has no {key} header: not written by this adapter")
    return value


def _version(headers: dict[str, str], seq: int) -> int:
    return int(_required(headers, H_ORIGINATOR_VERSION, seq))
