"""The append-only log: one JetStream stream, one subject per aggregate instance.

Async-native. Publishes carry ``Nats-Msg-Id`` (idempotent retries inside the duplicate window)
and ``Nats-Expected-Last-Subject-Sequence`` (optimistic concurrency per aggregate). Every call is
bounded in time and raises :class:`UnavailableError` instead of hanging when NATS is away.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from memstream.domain.errors import IncompatibleServerError, InvalidInputError, UnavailableError
from memstream.domain.redaction import redact, redact_url, redacted_exception, url_secrets
from memstream.workers.log.codec import (
    H_EXPECTED_LAST_SUBJECT_SEQ,
    H_MSG_ID,
    decode_event,
    event_type,
)
from memstream.workers.log.nats_client import MemstreamNatsClient, frame_batch
from memstream.workers.log.server_version import check_server
from memstream.workers.log.subjects import (
    demand_subject,
    parse_subject,
    partition_filter,
    partition_transform,
    stored_filter,
)
from memstream.workers.position import encode_demand
from memstream.workers.pull import Puller
from memstream.workers.runtime.nats_server import LIVENESS_PING_SECONDS, LIVENESS_PINGS

logger = logging.getLogger(__name__)

WRONG_LAST_SEQUENCE = 10071
# What a replicated stream answers instead while another write to the same subject with an
# expected last sequence is still being stored (nats.py's KV treats it as 10071 too).
WRONG_LAST_SEQUENCE_IN_PROCESS = 10164
NO_SUITABLE_PEERS = 10005  # a replicated stream's servers are not all up (or do not exist)
# The stream leader is storing a message with the same Nats-Msg-Id right now: a client sent it
# again (after a reconnect) before the first copy's acknowledgement.
DUPLICATE_IN_PROCESS = 10158
STILL_STORING_PAUSE = 0.02  # first pause before asking again (doubling, up to 0.5 s)
DUPLICATE_WINDOW_SECONDS = 120.0

_TRANSIENT: tuple[type[BaseException], ...] = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
    nats.js.errors.ServiceUnavailableError,
    asyncio.TimeoutError,
    ConnectionError,
    OSError,
)


# What a caller outside this module translates into UnavailableError (a lost server, a timeout).
TRANSIENT_ERRORS = _TRANSIENT
_CONNECT_ERRORS: tuple[type[BaseException], ...] = (*_TRANSIENT, nats.errors.Error)


class ExpectedSequenceMismatch(Exception):
    """The subject moved on since the caller loaded it (JetStream error 10071)."""


class StillStoringError(UnavailableError):
    """A copy of the message with the same message id is being stored (JetStream error 10158):
    the write's outcome is not known yet."""


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One message to append: payload, headers (without the log's own), and its dedupe id;
    ``event``: the domain event it encodes, when the writer has it (see :class:`LogEntry`)."""

    payload: bytes
    headers: dict[str, str]
    msg_id: str
    event: object | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One message read from the log with its stream sequence."""

    seq: int
    subject: str
    payload: bytes
    headers: dict[str, str]
    # The domain event this payload encodes, when this process decided it (its projector then
    # need not decode its own events again): what decoding the payload gives.
    event: object | None = field(default=None, compare=False, repr=False)

    # What a read-model store needs of a record (memstream.projections.ports.LogRecord).

    def namespace(self) -> str:
        """The namespace of its subject."""
        return parse_subject(self.subject).namespace

    def decode(self) -> object:
        """Its domain event (raises when it cannot be decoded)."""
        if self.event is not None:
            return self.event
        return decode_event(self.payload, self.headers, self.subject)

    def event_type(self) -> str:
        """Its event type (``""`` when it says none)."""
        return event_type(self.payload, self.headers)

    def identity(self) -> str:
        """What tells it from any other event at its sequence (:func:`event_identity`)."""
        return event_identity(self.payload, self.headers)


# Longest identity kept (a message id is a command id, maybe with ":<index>").
IDENTITY_MAX_CHARS = 200


def event_identity(payload: bytes, headers: Mapping[str, str] | None) -> str:
    """The identity of an event as a read-model copy records it beside a tracked sequence: its
    ``Nats-Msg-Id`` (the command's id, unique per event), else ``sha256:`` and a digest of its
    payload (an event some other writer published without one)."""
    msg_id = (headers or {}).get("Nats-Msg-Id")
    if msg_id:
        return msg_id[:IDENTITY_MAX_CHARS]
    return "sha256:" + hashlib.sha256(payload).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class PublishResult:
    """Where the last message of a publish landed; ``duplicate`` if the log had it already."""

    seq: int
    duplicate: bool


async def connect_nats(
    url: str,
    *,
    name: str = "memstream",
    user: str | None = None,
    password: str | None = None,
    token: str | None = None,
    creds: str | None = None,
    connect_timeout: float = 2.0,
) -> Client:
    """Connect to NATS; raise :class:`UnavailableError` at once if it cannot be reached.

    The first connection is tried once (nats-py would otherwise retry it forever with unlimited
    reconnects); once connected, the client reconnects by itself after any outage. ``url`` may
    list a cluster's servers, comma-separated: the client connects to one that answers and,
    after an outage, to another (or to one the cluster announced). Credentials never show in an
    error or a log line (:mod:`memstream.domain.redaction`).

    Raises:
        UnavailableError: NATS cannot be reached or refused the connection.
        IncompatibleServerError: the server is older than a feature memstream needs
            (:mod:`memstream.workers.log.server_version`).
        InvalidInputError: a creds file is given but the nkeys package is missing.
    """
    servers = nats_servers(url)
    options: dict[str, Any] = {
        "servers": servers,
        "name": name,
        "connect_timeout": connect_timeout,
        "allow_reconnect": False,
        "max_reconnect_attempts": 1,
        "reconnect_time_wait": 0.25,
        # A server that stops answering (cut off, paused) is left for another within ~6 s.
        "ping_interval": LIVENESS_PING_SECONDS,
        "max_outstanding_pings": LIVENESS_PINGS,
    }
    if user:
        options["user"] = user
        options["password"] = password
    if token:
        options["token"] = token
    if creds:
        options["user_credentials"] = creds

    secrets = [*(secret for server in servers for secret in url_secrets(server)), password, token]

    async def _quiet(error: Exception) -> None:
        logger.debug("nats: %s", redact(str(error), secrets))

    options["error_cb"] = _quiet
    client: Client = MemstreamNatsClient()
    try:
        await client.connect(**options)
    except _CONNECT_ERRORS as error:
        await _abandon(client)  # nats-py leaves the socket of a refused connection open
        # nats-py's own errors may quote the URL: mask ours and theirs, and the chained cause
        raise UnavailableError(
            f"cannot reach NATS at {','.join(map(redact_url, servers))}: "
            f"{redact(repr(error), secrets)}"
        ) from redacted_exception(error, secrets)
    except ModuleNotFoundError as error:
        await _abandon(client)
        if error.name != "nkeys":
            raise
        raise InvalidInputError(
            "NATS credentials (MEMSTREAM_NATS_CREDS) need the nkeys package: pip install nkeys"
        ) from error
    try:
        check_server(client)  # an older server would accept what it cannot do, and fail later
    except IncompatibleServerError:
        await _abandon(client)
        raise
    client.options["allow_reconnect"] = True  # from now on, ride out outages
    client.options["max_reconnect_attempts"] = -1
    return client


def nats_servers(url: str) -> list[str]:
    """The servers of a NATS URL setting: one URL, or a comma-separated list of a cluster's."""
    servers = [part.strip() for part in url.split(",") if part.strip()]
    if not servers:
        raise InvalidInputError(f"NATS URL {url!r} names no server")
    return servers


async def _abandon(client: Client) -> None:
    """Close a client whose connection failed, whatever state it was left in."""
    with contextlib.suppress(Exception):
        await client.close()


# The acknowledgement of a stored message, as nats-server writes it (anything else is parsed).
_PUB_ACK = re.compile(
    rb'\{"stream":"[^"\\]*",(?:"domain":"[^"\\]*",)?"seq":(\d+)(,"duplicate":true)?\}'
)


def _pub_ack(subject: str, reply: Msg) -> PublishResult:
    """Read a JetStream publish acknowledgement (or its error)."""
    ack = _PUB_ACK.fullmatch(reply.data)
    if ack is not None:
        return PublishResult(seq=int(ack[1]), duplicate=ack[2] is not None)
    try:
        body = json.loads(reply.data)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise UnavailableError(f"no JetStream stream acknowledged the write to {subject}")
    error = body.get("error")
    if error:
        if error.get("err_code") in (WRONG_LAST_SEQUENCE, WRONG_LAST_SEQUENCE_IN_PROCESS):
            raise ExpectedSequenceMismatch(error.get("description", ""))
        if error.get("err_code") == DUPLICATE_IN_PROCESS:
            raise StillStoringError(
                f"NATS is still storing an earlier copy of the write to {subject} (same "
                "message id); its outcome is not known yet"
            )
        raise nats.js.errors.BadRequestError(
            code=error.get("code"),
            err_code=error.get("err_code"),
            description=error.get("description"),
        )
    return PublishResult(seq=int(body["seq"]), duplicate=bool(body.get("duplicate")))


def stream_partitions(config: api.StreamConfig, prefix: str) -> int:
    """How many partitions a stream's subject transform gives it (0: none).

    Raises:
        InvalidInputError: the stream transforms its subjects in another way than memstream's.
    """
    transform = config.subject_transform
    if transform is None or not (transform.dest or transform.src):
        return 0
    match = re.search(r"\{\{\s*partition\(\s*(\d+)\s*,", transform.dest or "")
    if match is None or (transform.src, transform.dest) != partition_transform(
        prefix, int(match.group(1))
    ):
        raise InvalidInputError(
            f"stream {config.name!r} transforms {transform.src!r} to {transform.dest!r}, which "
            "is not memstream's partitioning; point MEMSTREAM_STREAM at a memstream stream"
        )
    return int(match.group(1))


class EventLog:
    """The stream: create/configure it, append to subjects, read subjects back."""

    def __init__(
        self,
        client: Client,
        stream: str,
        subject_prefix: str = "ms",
        timeout: float = 2.0,
        replicas: int = 1,
        partitions: int = 0,
    ) -> None:
        self.client = client
        self.stream = stream
        self.replicas = replicas  # servers holding the stream (a JetStream cluster's R)
        # Partitions of the stream if this log creates it; ``partitions`` holds the stream's own
        # count once known (ensure_stream, or the first read of one subject).
        self.create_partitions = partitions
        self._partitions: int | None = None
        self.subject_prefix = subject_prefix
        self.timeout = timeout
        self.js: JetStreamContext = client.jetstream(timeout=timeout)
        # Messages handed out by read_batch (and so read_subject): what replays cost, for tests.
        self.entries_read = 0

    async def ensure_stream(self) -> None:
        """Create the stream if missing (file storage, dedupe window, deletes denied,
        ``replicas`` servers), or bring an existing one up to the settings memstream relies on
        (direct gets, atomic batches, at least the 2-minute duplicate window, deletes denied, at
        least ``replicas`` servers: a stream with fewer is scaled up, never down).

        Raises:
            InvalidInputError: the server refuses the stream (another stream holds its subjects,
                or ``replicas`` is over 1 on a server that is no cluster).
            UnavailableError: NATS does not answer, or fewer than ``replicas`` servers are up.
            IncompatibleServerError: the server is older than a feature memstream needs (checked
                here too for clients not made by :func:`connect_nats`, e.g. a FastStream broker's).
        """
        check_server(self.client)
        transform = None
        subjects = [f"{self.subject_prefix}.>"]
        if self.create_partitions:
            source, destination = partition_transform(self.subject_prefix, self.create_partitions)
            transform = api.SubjectTransform(src=source, dest=destination)
            # Only 4-token subjects: nobody can store an event under a partition of their own.
            subjects = [source]
        config = api.StreamConfig(
            name=self.stream,
            subjects=subjects,
            subject_transform=transform,
            storage=api.StorageType.FILE,
            retention=api.RetentionPolicy.LIMITS,
            duplicate_window=DUPLICATE_WINDOW_SECONDS,
            # Message deletes allowed: ``admin purge`` overwrites each erased event with one
            # (a purge by subject leaves their bytes in the server's files). Who may delete is
            # for NATS permissions to say ($JS.API.STREAM.MSG.DELETE.<stream>, as for PURGE).
            deny_delete=False,
            allow_direct=True,
            allow_atomic=True,
            num_replicas=self.replicas,
        )
        try:
            try:
                info = await self.js.stream_info(self.stream)
            except nats.js.errors.NotFoundError:
                await self.js.add_stream(config)
                self._partitions = self.create_partitions
                return
            current = info.config
            self._partitions = stream_partitions(current, self.subject_prefix)
            if self.create_partitions and self.create_partitions != self._partitions:
                raise InvalidInputError(
                    f"stream {self.stream!r} has {self._partitions} partitions; "
                    f"MEMSTREAM_STREAM_PARTITIONS asks for {self.create_partitions} (a stream "
                    "keeps the partitions it was created with: export its events and import "
                    "them into a new stream to change them)"
                )
            if not (
                current.allow_direct
                and current.allow_atomic
                and (current.duplicate_window or 0) >= DUPLICATE_WINDOW_SECONDS
                and (current.num_replicas or 1) >= self.replicas
            ):
                current.allow_direct = True
                current.allow_atomic = True
                current.duplicate_window = max(
                    current.duplicate_window or 0, DUPLICATE_WINDOW_SECONDS
                )
                current.num_replicas = max(current.num_replicas or 1, self.replicas)
                await self.js.update_stream(current)
        except nats.js.errors.BadRequestError as error:
            if self.replicas > 1 and error.err_code == NO_SUITABLE_PEERS:
                raise UnavailableError(
                    f"cannot place stream {self.stream!r} on {self.replicas} servers "
                    f"(MEMSTREAM_STREAM_REPLICAS): {error.description}; the cluster has fewer "
                    f"JetStream servers up"
                ) from error
            raise InvalidInputError(
                f"cannot create or configure stream {self.stream!r} for subjects "
                f"{self.subject_prefix}.>: {error.description} (a server holds one memstream "
                "stream: point MEMSTREAM_STREAM at the existing one)"
            ) from error
        except nats.js.errors.ServerError as error:
            if self.replicas == 1:
                raise
            # e.g. 10074 "replicas > 1 not supported in non-clustered mode"
            raise InvalidInputError(
                f"cannot create or configure stream {self.stream!r} with {self.replicas} "
                f"replicas (MEMSTREAM_STREAM_REPLICAS): {error.description}"
            ) from error
        except _TRANSIENT as error:
            raise UnavailableError(f"NATS stream {self.stream!r} unavailable: {error}") from error

    async def publish(
        self,
        subject: str,
        messages: Sequence[OutgoingMessage],
        expected_last_seq: int | None,
        while_waiting: Callable[[], None] | None = None,
    ) -> PublishResult:
        """Append messages to one subject, the first guarded by the expected last sequence.

        A single message is one atomic publish. Several messages are sent as one JetStream atomic
        batch, so they commit all or none. ``while_waiting``: called once a single message is on
        its way, before its acknowledgement is awaited (only by a :class:`MemstreamNatsClient`;
        never for a batch, nor when the message could not be written at once).

        Raises:
            ExpectedSequenceMismatch: the subject moved on (another writer won).
            UnavailableError: NATS did not acknowledge within the timeout.
        """
        if while_waiting is not None and len(messages) == 1:
            return await self._publish_one(subject, messages[0], expected_last_seq, while_waiting)
        expected = {} if expected_last_seq is None else {subject: expected_last_seq}
        return await self.publish_many([(subject, message) for message in messages], expected)

    async def publish_many(
        self,
        messages: Sequence[tuple[str, OutgoingMessage]],
        expected_last_seqs: Mapping[str, int],
    ) -> PublishResult:
        """Append messages to one or more subjects, all or none (one JetStream atomic batch).

        The first message of each subject in ``expected_last_seqs`` carries that subject's
        expected last sequence (the server refuses the header on later messages of a batch).
        The server refuses a batch whose message ids it has seen rather than acknowledging it as
        a duplicate; when the batch's last subject ends with the batch's last message (it was
        stored before: sent again after a reconnect, or a retried command) it is acknowledged
        here as a duplicate of that.

        Raises:
            ExpectedSequenceMismatch: a guarded subject moved on (another writer won).
            UnavailableError: NATS did not acknowledge within the timeout.
        """
        if len(messages) == 1:
            subject, message = messages[0]
            return await self._publish_one(subject, message, expected_last_seqs.get(subject))
        return await self._publish_batch(messages, expected_last_seqs)

    def _check_payload(self, subject: str, payload: bytes, headers: dict[str, str]) -> None:
        """Refuse a message the server would reject for its size, naming both sizes."""
        limit = int(getattr(self.client, "max_payload", 0) or 0)
        if not limit or len(payload) + 65536 < limit:
            return  # headers are far smaller than that: no need to add them up
        size = len(payload) + sum(len(k) + len(v) + 4 for k, v in headers.items()) + 12
        if size > limit:
            raise InvalidInputError(
                f"the event for {subject} is {size} bytes; the NATS server's max_payload is "
                f"{limit} (raise max_payload on the server to store larger messages)"
            )

    async def _publish_one(
        self,
        subject: str,
        message: OutgoingMessage,
        expected_last_seq: int | None,
        while_waiting: Callable[[], None] | None = None,
    ) -> PublishResult:
        headers = dict(message.headers)
        headers[H_MSG_ID] = message.msg_id
        if expected_last_seq is not None:
            headers[H_EXPECTED_LAST_SUBJECT_SEQ] = str(expected_last_seq)
        self._check_payload(subject, message.payload, headers)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        pause = STILL_STORING_PAUSE
        while True:
            try:
                # A plain request with the ack parsed here: js.publish would build a PubAck
                # dataclass field by field for every write (a measurable share of an append).
                client = self.client
                if while_waiting is not None and isinstance(client, MemstreamNatsClient):
                    reply = await client.request_overlapped(
                        subject, message.payload, self.timeout, headers, while_waiting
                    )
                else:
                    reply = await client.request(
                        subject, message.payload, timeout=self.timeout, headers=headers
                    )
            except _TRANSIENT as error:
                raise UnavailableError(
                    f"NATS did not acknowledge a write to {subject}: {error!r}"
                ) from error
            try:
                return _pub_ack(subject, reply)
            except StillStoringError:
                # Our own earlier copy (sent again after a reconnect) is being stored: ask
                # again, until the log acknowledges it as a duplicate or refuses it.
                if loop.time() + pause > deadline:
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, 0.5)
                while_waiting = None  # called once, on the first send

    async def _publish_batch(
        self, messages: Sequence[tuple[str, OutgoingMessage]], expected_last_seqs: Mapping[str, int]
    ) -> PublishResult:
        framed: list[tuple[str, bytes, dict[str, str]]] = []
        guarded: set[str] = set()
        for subject, message in messages:
            headers = dict(message.headers)
            headers[H_MSG_ID] = message.msg_id
            if subject in expected_last_seqs and subject not in guarded:
                headers[H_EXPECTED_LAST_SUBJECT_SEQ] = str(expected_last_seqs[subject])
                guarded.add(subject)
            framed.append((subject, message.payload, headers))
        last_subject, last = messages[-1]
        try:
            if isinstance(self.client, MemstreamNatsClient):
                reply = await self.client.request_batch(framed, self.timeout)
            else:
                reply = await self._publish_batch_stock(framed)
        except _TRANSIENT as error:
            raise UnavailableError(
                f"NATS did not acknowledge a batch to {messages[0][0]}: {error!r}"
            ) from error
        try:
            return _pub_ack(messages[0][0], reply)
        except (ExpectedSequenceMismatch, nats.js.errors.BadRequestError):
            # A batch sent again (by the client after a reconnect, or by a caller retrying a
            # command) that the log stored already is refused, not acknowledged: it is a
            # duplicate when the last message of its last subject is its own last message.
            stored = await self._stored_as_last(last_subject, last.msg_id)
            if stored is None:
                raise
            return PublishResult(seq=stored, duplicate=True)

    async def _stored_as_last(self, subject: str, msg_id: str) -> int | None:
        """The sequence of ``subject``'s last message if its message id is ``msg_id``."""
        try:
            message = await self.js.get_last_msg(self.stream, await self.stored(subject))
        except nats.js.errors.NotFoundError:
            return None
        except _TRANSIENT as error:
            raise UnavailableError(f"cannot read {subject} from NATS: {error!r}") from error
        if (message.headers or {}).get(H_MSG_ID) != msg_id:
            return None
        return int(message.seq or 0)

    async def _publish_batch_stock(self, framed: list[tuple[str, bytes, dict[str, str]]]) -> Msg:
        """An atomic batch through nats-py's own publish (a client not made by
        :func:`connect_nats`): not sent again after a reconnect."""
        inbox = self.client.new_inbox()
        future: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()

        async def _on_reply(msg: Msg) -> None:
            if not future.done():
                future.set_result(msg)

        sub = await self.client.subscribe(inbox, cb=_on_reply)
        try:
            for subject, payload, headers, reply in frame_batch(framed, inbox):
                await self.client.publish(subject, payload, reply=reply, headers=headers)
            return await asyncio.wait_for(future, self.timeout)
        finally:
            await sub.unsubscribe()

    async def partitions(self) -> int:
        """How many partitions the stream has (0: none), asked once."""
        if self._partitions is None:
            try:
                info = await self.js.stream_info(self.stream)
            except _TRANSIENT as error:
                raise UnavailableError(f"cannot read stream {self.stream}: {error!r}") from error
            self._partitions = stream_partitions(info.config, self.subject_prefix)
        return self._partitions

    async def partition_ends(self) -> dict[int, int]:
        """The sequence of each partition's last event (0: none yet); empty on a stream
        without partitions. One direct get per partition, at once."""
        count = await self.partitions()
        if not count:
            return {}
        ends = await asyncio.gather(
            *(self.last_seq(partition_filter(self.subject_prefix, p)) for p in range(count))
        )
        return dict(enumerate(ends))

    async def stored(self, subject: str) -> str:
        """The filter matching the events the stream stored for ``subject`` (one subject or a
        4-token pattern): ``subject.*`` on a partitioned stream (see
        :func:`~memstream.workers.log.subjects.stored_filter`)."""
        return stored_filter(subject, await self.partitions())

    async def nudge(self, seq: int) -> None:
        """Tell the lingering projectors of this stream, wherever they run, that a reader
        waits for ``seq`` (on a partitioned stream, each partition for its last event up to
        there), so that they commit at once; best effort (a reader polls regardless)."""
        ends = await self.partition_ends()
        signal = encode_demand(seq, {p: min(end, seq) for p, end in ends.items() if end})
        with contextlib.suppress(*_TRANSIENT):
            await self.client.publish(demand_subject(self.stream), signal)

    async def stream_last_seq(self) -> int:
        """The stream's last sequence (0 when empty)."""
        try:
            info = await self.js.stream_info(self.stream)
        except _TRANSIENT as error:
            raise UnavailableError(f"cannot read stream {self.stream}: {error!r}") from error
        return int(info.state.last_seq or 0)

    async def last_seq(self, subject: str) -> int:
        """Stream sequence of the subject's last message, 0 if it has none."""
        try:
            message = await self.js.get_last_msg(self.stream, await self.stored(subject))
        except nats.js.errors.NotFoundError:
            return 0
        except _TRANSIENT as error:
            raise UnavailableError(f"cannot read {subject} from NATS: {error!r}") from error
        return int(message.seq or 0)

    async def next_seq(self, subject: str, start_seq: int) -> int | None:
        """The sequence of the first message matching ``subject`` from ``start_seq`` on, as the
        stream's leader holds it (not a direct get: no replica behind it answers); ``None``
        when there is none.

        Raises:
            UnavailableError: NATS did not answer within the timeout, or refused the request.
        """
        try:
            message = await self.js.get_msg(
                self.stream, seq=start_seq, subject=await self.stored(subject), next=True
            )
        except nats.js.errors.NotFoundError:
            return None
        except _TRANSIENT as error:
            raise UnavailableError(f"cannot read {subject} from NATS: {error!r}") from error
        return int(message.seq or 0) or None

    async def holds(self, seq: int) -> bool:
        """Whether the stream still holds the event at ``seq`` (not erased or purged).

        Raises:
            UnavailableError: NATS did not answer within the timeout, or refused the request.
        """
        try:
            await self.js.get_msg(self.stream, seq)
        except nats.js.errors.NotFoundError:
            return False
        except _TRANSIENT as error:
            raise UnavailableError(f"cannot read sequence {seq} from NATS: {error!r}") from error
        return True

    async def identity_at(self, seq: int) -> str | None:
        """The identity (:func:`event_identity`) of the event the stream holds at ``seq``;
        ``None`` when it holds none there (erased, purged, or past its end).

        Raises:
            UnavailableError: NATS did not answer within the timeout, or refused the request.
        """
        try:
            message = await self.js.get_msg(self.stream, seq)
        except nats.js.errors.NotFoundError:
            return None
        except _TRANSIENT as error:
            raise UnavailableError(f"cannot read sequence {seq} from NATS: {error!r}") from error
        return event_identity(message.data or b"", message.headers)

    async def read_batch(
        self, filter_subject: str, start_seq: int, batch: int = 1000
    ) -> tuple[list[LogEntry], int]:
        """Up to ``batch`` messages matching ``filter_subject`` from ``start_seq`` on, by
        JetStream batch direct get, and how many more match after them.

        Any replica may answer a direct get, a paused or cut-off one too: a request that
        goes unanswered for a quarter of the timeout is sent again (NATS picks a replica
        anew), going on from the last message received, until the timeout has passed
        without an answer.

        Raises:
            UnavailableError: no replica answered within the timeout, or NATS refused.
        """
        loop = asyncio.get_running_loop()
        entries: list[LogEntry] = []
        filter_ = await self.stored(filter_subject)
        seq = start_seq
        attempt = max(0.25, self.timeout / 4)
        deadline = loop.time() + self.timeout
        while True:
            got, pending = await self._direct_batch(filter_, seq, batch - len(entries), attempt)
            entries += got
            if got:
                deadline = loop.time() + self.timeout  # a replica answers: wait for it again
                seq = got[-1].seq + 1
            if pending is not None or len(entries) >= batch:
                self.entries_read += len(entries)
                return entries, pending or 0
            if loop.time() > deadline:
                raise UnavailableError(
                    f"cannot read {filter_subject} from NATS: no replica of {self.stream} "
                    f"answered a direct get within {self.timeout:g} s"
                )

    async def _direct_batch(
        self, filter_: str, seq: int, batch: int, wait: float
    ) -> tuple[list[LogEntry], int | None]:
        """One batch direct get: the messages received, and how many more match after them
        (``None``: the answer stopped, or never came, within ``wait`` of the last message)."""
        loop = asyncio.get_running_loop()
        entries: list[LogEntry] = []
        done: asyncio.Future[int] = loop.create_future()

        async def on_message(msg: Msg) -> None:
            headers = dict(msg.headers or {})
            status = headers.get("Status")
            if done.done():
                return
            if status == "204":  # end of batch
                done.set_result(int(headers.get("Nats-Num-Pending", 0)))
            elif status == "404":  # nothing matches from seq on
                done.set_result(0)
            elif status:
                done.set_exception(
                    UnavailableError(f"direct get from {self.stream} failed: {headers}")
                )
            else:
                entries.append(
                    LogEntry(
                        int(headers["Nats-Sequence"]), headers["Nats-Subject"], msg.data, headers
                    )
                )

        request = {"seq": seq, "next_by_subj": filter_, "batch": batch}
        try:
            sub = await self.client.subscribe(inbox := self.client.new_inbox(), cb=on_message)
            try:
                await self.client.publish(
                    f"$JS.API.DIRECT.GET.{self.stream}", json.dumps(request).encode(), reply=inbox
                )
                received = 0
                while True:
                    try:
                        return entries, await asyncio.wait_for(asyncio.shield(done), wait)
                    except TimeoutError:
                        if len(entries) == received:
                            return entries, None  # silent for ``wait``: asked again
                        received = len(entries)
            finally:
                await sub.unsubscribe()
        except _TRANSIENT as error:
            raise UnavailableError(f"cannot read {filter_} from NATS: {error!r}") from error

    async def read_subject(
        self, subject: str, after_seq: int = 0, *, batch: int = 1000, consistent: bool = False
    ) -> AsyncIterator[LogEntry]:
        """Yield the messages matching ``subject`` with sequence greater than ``after_seq``.

        Direct gets are answered by any replica of the stream, and a follower applies what
        the leader acknowledged a moment later: without ``consistent`` a read may end short
        of the newest events. With it, the stream's leader is asked first where the subject
        ends, and the read goes on (asking again, while the replica that answers catches up)
        until it has passed that point: every event acknowledged before the call is yielded.
        What a follower yields is a prefix of the leader's (it applies in order), so nothing
        is yielded twice.

        Raises:
            UnavailableError: NATS did not answer, or (``consistent``) the replicas that
                answer stayed behind the leader, yielding nothing new, for the timeout.
        """
        seq = after_seq + 1
        end = await self.last_seq(subject) if consistent else 0
        deadline = asyncio.get_running_loop().time() + self.timeout
        while True:
            entries, pending = await self.read_batch(subject, seq, batch)
            for entry in entries:
                yield entry
            if entries:
                seq = entries[-1].seq + 1
                deadline = asyncio.get_running_loop().time() + self.timeout  # it moves on
            if entries and pending:
                continue
            if seq > end:
                return
            # The replica that answered holds less than the leader did: it is catching up,
            # or the leader's last event was erased since (asked again below).
            if asyncio.get_running_loop().time() > deadline:
                raise UnavailableError(
                    f"cannot read {subject} from NATS: the stream's replicas answering direct "
                    f"gets stayed behind its leader (sequence {seq - 1} of {end}) for "
                    f"{self.timeout:g} s; `memstream doctor` names a replica that is not current"
                )
            await asyncio.sleep(0.05)
            end = await self.last_seq(subject)

    async def follow(
        self, subject: str, after_seq: int | None = None, *, batch: int = 256
    ) -> AsyncIterator[LogEntry]:
        """Yield the subject's messages as they are appended (from ``after_seq + 1``, or only new
        ones when ``None``) until the caller stops iterating. Survives NATS reconnects."""
        if after_seq is None:
            after_seq = await self.last_seq(subject)
        seq = after_seq
        while True:
            config = api.ConsumerConfig(
                deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=seq + 1,
                ack_policy=api.AckPolicy.NONE,
                filter_subject=await self.stored(subject),
                inactive_threshold=30.0,
                mem_storage=True,
            )
            try:
                puller, _ = await Puller.create(self.client, self.stream, config)
            except _TRANSIENT:
                await asyncio.sleep(0.25)
                continue
            try:
                while True:
                    try:
                        msgs = await puller.fetch(batch, 1.0)
                    except (TimeoutError, nats.errors.TimeoutError):
                        continue
                    for msg in msgs:
                        seq = msg.metadata.sequence.stream
                        yield LogEntry(seq, msg.subject, msg.data, dict(msg.headers or {}))
            except _TRANSIENT:
                await asyncio.sleep(0.25)  # consumer lost with the connection: recreate it
            finally:
                await puller.close()
