"""eventsourcing persistence module over the JetStream log (``PERSISTENCE_MODULE=<this module>``).

Any eventsourcing ``Application`` stores its events in a NATS JetStream stream when its environment
sets ``PERSISTENCE_MODULE=memstream.workers.log.es_persistence``. eventsourcing's recorders are
synchronous and nats-py is asyncio, so the factory owns one NATS connection served by a private
event loop in a background thread; every recorder call submits a coroutine to that loop and waits
for it, bounded by a timeout.

Environment (read through eventsourcing's ``Environment``, so ``<APPLICATION_NAME>_<KEY>`` wins
over ``<KEY>``):

- ``MEMSTREAM_NATS_URL`` (required): the NATS server, e.g. ``nats://127.0.0.1:4222``.
- ``MEMSTREAM_NATS_USER`` / ``MEMSTREAM_NATS_PASSWORD``, ``MEMSTREAM_NATS_TOKEN``,
  ``MEMSTREAM_NATS_CREDS``: optional credentials.
- ``MEMSTREAM_ES_STREAM`` (default ``EVENTSOURCING``): the JetStream stream, created if missing
  unless ``CREATE_TABLE`` is false. Keep it apart from memstream's own stream.
- ``MEMSTREAM_ES_SUBJECT_PREFIX`` (default ``es``): the stream's subjects are ``<prefix>.>``; it
  must differ from memstream's ``ms`` so these events never reach memstream's projector.
- ``MEMSTREAM_ES_TIMEOUT`` (default 5 seconds): bound of one NATS request.
- ``MEMSTREAM_ES_CALL_TIMEOUT`` (default 60 seconds): bound of one recorder call.

Layout: an aggregate recorder of purpose ``P`` (``events``, ``snapshots``) in application ``A``
stores each originator's events on ``<prefix>.<A>.<P>.<originator id>``, and a tracking recorder
stores the position reached in upstream application ``U`` on ``<prefix>.<A>._tracking.<U>``
(names are escaped with :func:`memstream.workers.log.subjects.encode_token`; ``A`` is ``_`` for an
unnamed environment). A notification id is the event's stream sequence, so ids have gaps where the
stream holds other subjects (snapshots, tracking, other applications).

Semantics:

- ``insert_events`` publishes all events of a call (and the tracking record, for a process
  recorder) as one JetStream atomic batch: all commit or none. A batch holds at most 1000
  messages (the server's limit).
- Each subject is append-only: an event's ``originator_version`` must be greater than the last
  one recorded for its originator, else :class:`~eventsourcing.persistence.IntegrityError`. The
  check is made safe against concurrent writers by ``Nats-Expected-Last-Subject-Sequence``;
  ``Nats-Msg-Id`` is ``<subject>@<version>``, so within the stream's duplicate window the server
  itself refuses a second copy of a version.
- Reads use JetStream batch direct get (nats-server 2.11+, ``allow_direct``). On a replicated
  stream a direct get may be answered by a follower a little behind the leader.
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Sequence
from typing import Any, TypeVar

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    InfrastructureFactory,
    InterfaceError,
    ListenNotifySubscription,
    Notification,
    ProcessRecorder,
    ProgrammingError,
    StoredEvent,
    Subscription,
    Tracking,
    TrackingRecorder,
)
from eventsourcing.utils import Environment, EnvType, resolve_topic, strtobool
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from memstream.workers.log.codec import H_ORIGINATOR_VERSION, CommandMeta, stored_headers
from memstream.workers.log.es_datastore import H_ORIGINATOR_ID_TYPE, Append, NatsDatastore
from memstream.workers.log.event_log import OutgoingMessage
from memstream.workers.log.subjects import encode_token

R = TypeVar("R", bound="NatsRecorder")

H_NOTIFICATION_ID = "Ms-Notification-Id"
H_APPLICATION_NAME = "Ms-Application-Name"
TRACKING = "_tracking"


class NatsRecorder:
    """What every recorder shares: the datastore and the application's subject namespace."""

    def __init__(self, datastore: NatsDatastore, namespace: str = "_", purpose: str = "events"):
        if purpose == TRACKING:
            raise ProgrammingError(f"purpose {TRACKING!r} is reserved for tracking records")
        self.datastore = datastore
        self.namespace = namespace
        self.purpose = purpose
        self.events_subjects = f"{datastore.log.subject_prefix}.{namespace}.{encode_token(purpose)}"

    def create_stream(self) -> None:
        """Create the stream if it is missing (eventsourcing's ``create_table``)."""
        self.datastore.ensure_stream()

    def event_subject(self, originator_id: uuid.UUID | str) -> str:
        return f"{self.events_subjects}.{encode_token(str(originator_id))}"

    def tracking_subject(self, application_name: str) -> str:
        prefix = f"{self.datastore.log.subject_prefix}.{self.namespace}.{TRACKING}"
        return f"{prefix}.{encode_token(application_name)}"

    def _event_appends(self, stored_events: Sequence[StoredEvent]) -> list[Append]:
        meta = CommandMeta(actor="eventsourcing")
        appends = []
        for stored in stored_events:
            subject = self.event_subject(stored.originator_id)
            msg_id = f"{subject}@{stored.originator_version}"
            headers = stored_headers(stored, meta, msg_id)
            is_uuid = isinstance(stored.originator_id, uuid.UUID)
            headers[H_ORIGINATOR_ID_TYPE] = "uuid" if is_uuid else "str"
            message = OutgoingMessage(stored.state, headers, msg_id)
            appends.append(
                Append(subject, stored.originator_version, H_ORIGINATOR_VERSION, message)
            )
        return appends

    def _tracking_append(self, tracking: Tracking) -> Append:
        subject = self.tracking_subject(tracking.application_name)
        msg_id = f"{subject}@{tracking.notification_id}"
        headers = {
            H_APPLICATION_NAME: tracking.application_name,
            H_NOTIFICATION_ID: str(tracking.notification_id),
        }
        payload = json.dumps(
            {"application_name": tracking.application_name, "id": tracking.notification_id}
        ).encode()
        message = OutgoingMessage(payload, headers, msg_id)
        return Append(subject, tracking.notification_id, H_NOTIFICATION_ID, message)


class NatsAggregateRecorder(NatsRecorder, AggregateRecorder):
    """Events of each originator on its own subject."""

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        self.datastore.append(self._appends(stored_events, **kwargs))
        return None

    def _appends(self, stored_events: Sequence[StoredEvent], **_: Any) -> list[Append]:
        return self._event_appends(stored_events)

    def select_events(
        self,
        originator_id: uuid.UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        return self.datastore.select_events(
            self.event_subject(originator_id), originator_id, gt=gt, lte=lte, desc=desc, limit=limit
        )


class NatsApplicationRecorder(NatsAggregateRecorder, ApplicationRecorder):
    """Aggregate events plus the application sequence: notification id = stream sequence."""

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        sequences = self.datastore.append(self._appends(stored_events, **kwargs))
        return sequences[: len(stored_events)]

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        first = 1 if start is None else start if inclusive_of_start else start + 1
        return self.datastore.notifications(
            f"{self.events_subjects}.*", max(first, 1), limit, stop, topics
        )

    def max_notification_id(self) -> int | None:
        return self.datastore.last_seq(f"{self.events_subjects}.*") or None

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        return NatsSubscription(self, gt=gt, topics=topics)


class NatsTrackingRecorder(NatsRecorder, TrackingRecorder):
    """The last notification id processed from each upstream application, one subject each."""

    def insert_tracking(self, tracking: Tracking) -> None:
        self.datastore.append([self._tracking_append(tracking)])

    def max_tracking_id(self, application_name: str) -> int | None:
        subject = self.tracking_subject(application_name)
        return self.datastore.last_position(subject, H_NOTIFICATION_ID)


class NatsProcessRecorder(NatsTrackingRecorder, NatsApplicationRecorder, ProcessRecorder):
    """Events and the tracking record of the notification that caused them, in one batch."""

    def _appends(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> list[Append]:
        appends = self._event_appends(stored_events)
        tracking: Tracking | None = kwargs.get("tracking")
        if tracking is not None:
            appends.append(self._tracking_append(tracking))
        return appends


class NatsSubscription(ListenNotifySubscription[NatsApplicationRecorder]):
    """Notifications after ``gt``, then each new one once it is stored.

    eventsourcing's own pull thread reads pages with ``select_notifications`` into a bounded queue
    (so a slow consumer holds little in memory); a headers-only JetStream ordered consumer on the
    application's subjects wakes it when a new event is stored. The consumer exists before the
    first pull, so no event falls between the two.
    """

    def __init__(
        self, recorder: NatsApplicationRecorder, gt: int | None = None, topics: Sequence[str] = ()
    ) -> None:
        self._datastore = recorder.datastore
        self._watch = self._datastore.run(self._start(f"{recorder.events_subjects}.*"))
        self._datastore.add_close_hook(self._on_datastore_closed)
        super().__init__(recorder=recorder, gt=gt, topics=topics)

    async def _start(self, filter_subject: str) -> JetStreamContext.PushSubscription:
        log = self._datastore.log
        config = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.NEW, headers_only=True)
        return await log.js.subscribe(
            filter_subject,
            stream=log.stream,
            cb=self._on_stored,
            ordered_consumer=True,
            config=config,
        )

    async def _on_stored(self, _: Msg) -> None:
        # Before the base class made the event, the first pull has yet to run and will see it.
        notified: threading.Event | None = getattr(self, "_has_been_notified", None)
        if notified is not None:
            notified.set()

    def _on_datastore_closed(self) -> None:
        if self._thread_error is None:
            self._thread_error = InterfaceError(
                "the NATS datastore was closed under a subscription"
            )
        self.stop()

    def stop(self) -> None:
        if self._has_been_stopped:
            return
        super().stop()
        self._datastore.remove_close_hook(self._on_datastore_closed)
        # If the factory was closed first, closing the connection ended the consumer already.
        with contextlib.suppress(InterfaceError):
            self._datastore.run(self._watch.unsubscribe(), timeout=5.0)


class NatsFactory(InfrastructureFactory[NatsTrackingRecorder]):
    """Builds recorders that share one NATS connection (see the module docstring for the env)."""

    NATS_URL = "MEMSTREAM_NATS_URL"
    NATS_USER = "MEMSTREAM_NATS_USER"
    NATS_PASSWORD = "MEMSTREAM_NATS_PASSWORD"
    NATS_TOKEN = "MEMSTREAM_NATS_TOKEN"
    NATS_CREDS = "MEMSTREAM_NATS_CREDS"
    STREAM = "MEMSTREAM_ES_STREAM"
    SUBJECT_PREFIX = "MEMSTREAM_ES_SUBJECT_PREFIX"
    TIMEOUT = "MEMSTREAM_ES_TIMEOUT"
    CALL_TIMEOUT = "MEMSTREAM_ES_CALL_TIMEOUT"
    CREATE_TABLE = "CREATE_TABLE"

    aggregate_recorder_class = NatsAggregateRecorder
    application_recorder_class = NatsApplicationRecorder
    tracking_recorder_class = NatsTrackingRecorder
    process_recorder_class = NatsProcessRecorder

    def __init__(self, env: Environment | EnvType | None):
        super().__init__(env)
        url = self.env.get(self.NATS_URL)
        if not url:
            keys = ", ".join(self.env.create_keys(self.NATS_URL))
            raise OSError(f"NATS URL not found in environment with keys: {keys}")
        prefix = self.env.get(self.SUBJECT_PREFIX, "es")
        if prefix == "ms":
            raise OSError(
                f"{self.SUBJECT_PREFIX} is 'ms', memstream's own subjects; choose another"
            )
        self.datastore = NatsDatastore(
            url,
            self.env.get(self.STREAM, "EVENTSOURCING"),
            prefix,
            timeout=self._seconds(self.TIMEOUT, 5.0),
            call_timeout=self._seconds(self.CALL_TIMEOUT, 60.0),
            user=self.env.get(self.NATS_USER),
            password=self.env.get(self.NATS_PASSWORD),
            token=self.env.get(self.NATS_TOKEN),
            creds=self.env.get(self.NATS_CREDS),
        )
        self.namespace = encode_token(self.env.name) if self.env.name else "_"

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        return self._ready(self.aggregate_recorder_class(self.datastore, self.namespace, purpose))

    def application_recorder(self) -> ApplicationRecorder:
        cls = self._class(self.APPLICATION_RECORDER_TOPIC, self.application_recorder_class)
        return self._ready(cls(self.datastore, self.namespace))

    def tracking_recorder(
        self, tracking_recorder_class: type[NatsTrackingRecorder] | None = None
    ) -> NatsTrackingRecorder:
        cls = tracking_recorder_class or self._class(
            self.TRACKING_RECORDER_TOPIC, self.tracking_recorder_class
        )
        return self._ready(cls(self.datastore, self.namespace))

    def process_recorder(self) -> ProcessRecorder:
        cls = self._class(self.PROCESS_RECORDER_TOPIC, self.process_recorder_class)
        return self._ready(cls(self.datastore, self.namespace))

    def close(self) -> None:
        self.datastore.close()

    def _ready(self, recorder: R) -> R:
        if strtobool(self.env.get(self.CREATE_TABLE) or "yes"):
            recorder.create_stream()
        return recorder

    def _class(self, key: str, default: type[R]) -> type[R]:
        topic = self.env.get(key)
        if not topic:
            return default
        cls = resolve_topic(topic)
        if not (isinstance(cls, type) and issubclass(cls, default)):
            raise ProgrammingError(f"{key}={topic!r} is not a subclass of {default.__name__}")
        return cls

    def _seconds(self, key: str, default: float) -> float:
        value = self.env.get(key)
        if not value:
            return default
        try:
            seconds = float(value)
        except ValueError:
            raise OSError(f"{key} is {value!r}; expected a number of seconds") from None
        if seconds <= 0:
            raise OSError(f"{key} is {value!r}; expected a positive number of seconds")
        return seconds


Factory = NatsFactory
