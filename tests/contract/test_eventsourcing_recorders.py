"""eventsourcing's own recorder test cases, run against the JetStream adapter on a real nats-server.

Each test class starts one nats-server; each test gets a stream of its own, so notification ids
start at 1 as eventsourcing's cases expect. The base cases are reached through the module
(``contract.X``) so that pytest does not collect the abstract classes themselves. That module
imports eventsourcing's AES cipher, so it needs pycryptodome (``eventsourcing[crypto]``).
"""

from __future__ import annotations

import tempfile
import threading
import unittest
import uuid
from pathlib import Path
from typing import Any, ClassVar, cast

import pytest
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    DataError,
    IntegrityError,
    ProcessRecorder,
    StoredEvent,
    TrackingRecorder,
)
from eventsourcing.tests import persistence as contract
from eventsourcing.utils import Environment

from memstream.workers.log.es_persistence import (
    NatsAggregateRecorder,
    NatsApplicationRecorder,
    NatsFactory,
    NatsProcessRecorder,
    NatsTrackingRecorder,
)
from memstream.workers.runtime.nats_server import NatsServerProcess

PERSISTENCE_MODULE = "memstream.workers.log.es_persistence"


class NatsServerMixin:
    """One nats-server per test class, one fresh stream (and factory) per test."""

    server: ClassVar[NatsServerProcess]
    store: ClassVar[tempfile.TemporaryDirectory[str]]
    stream: str

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()  # type: ignore[misc]
        cls.store = tempfile.TemporaryDirectory(prefix="es-nats-")
        root = Path(cls.store.name)
        cls.server = NatsServerProcess.start(root / "store", log_path=root / "nats.log")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()
        cls.store.cleanup()
        super().tearDownClass()  # type: ignore[misc]

    def setUp(self) -> None:
        self.stream = "ES" + uuid.uuid4().hex[:12].upper()
        super().setUp()  # type: ignore[misc]

    def nats_env(self) -> dict[str, str]:
        return {
            "PERSISTENCE_MODULE": PERSISTENCE_MODULE,
            "MEMSTREAM_NATS_URL": self.server.url,
            "MEMSTREAM_ES_STREAM": self.stream,
            # Streams on one server may not share subjects: a prefix per test too.
            "MEMSTREAM_ES_SUBJECT_PREFIX": self.stream.lower(),
        }

    def new_factory(self) -> NatsFactory:
        factory = NatsFactory(env=self.nats_env())
        cast(unittest.TestCase, self).addCleanup(factory.close)
        return factory


class TestNatsAggregateRecorder(NatsServerMixin, contract.AggregateRecorderTestCase):
    def create_recorder(self) -> AggregateRecorder:
        return self.new_factory().aggregate_recorder()


class TestNatsApplicationRecorder(
    NatsServerMixin, contract.ApplicationRecorderTestCase[NatsApplicationRecorder]
):
    def create_recorder(self) -> NatsApplicationRecorder:
        return cast(NatsApplicationRecorder, self.new_factory().application_recorder())

    def test_insert_subscribe(self) -> None:
        self.optional_test_insert_subscribe()

    def test_one_insert_across_originators_commits_all_or_none(self) -> None:
        # Given originator b already has version 1
        recorder = self.create_recorder()
        a, b = uuid.uuid4(), uuid.uuid4()
        recorder.insert_events([StoredEvent(b, 1, "t", b"b1")])
        # When one insert carries a new event of a and a conflicting event of b
        with pytest.raises(IntegrityError):
            recorder.insert_events([StoredEvent(a, 1, "t", b"a1"), StoredEvent(b, 1, "t", b"b1")])
        # Then nothing of it is recorded, and the application sequence did not move
        assert recorder.select_events(a) == []
        assert recorder.max_notification_id() == 1
        # And a non-conflicting insert across both commits both, with consecutive ids
        ids = recorder.insert_events([StoredEvent(a, 1, "t", b"a1"), StoredEvent(b, 2, "t", b"b2")])
        assert ids == [2, 3]

    def test_an_insert_beyond_one_atomic_batch_is_refused_whole(self) -> None:
        # Given 1001 events, one more than a JetStream atomic batch holds
        recorder = self.create_recorder()
        originator = uuid.uuid4()
        events = [StoredEvent(originator, v, "t", b"{}") for v in range(1, 1002)]
        # When they are inserted in one call, Then the insert fails and records nothing
        with pytest.raises(DataError, match="1001 messages"):
            recorder.insert_events(events)
        assert recorder.select_events(originator) == []
        assert recorder.max_notification_id() is None

    def test_text_originator_ids_round_trip_exactly(self) -> None:
        # Given text ids, one shaped like a UUID and one with subject-hostile characters
        recorder = self.create_recorder()
        uuid_text = str(uuid.uuid4())
        odd = "dog 1.*>/ü"
        # When events are recorded under them
        recorder.insert_events(
            [StoredEvent(uuid_text, 1, "t", b"a"), StoredEvent(odd, 1, "t", b"b")]
        )
        # Then reads give back the same strings, not UUIDs, on distinct subjects
        assert recorder.select_events(odd)[0].state == b"b"
        assert [n.originator_id for n in recorder.select_notifications(None, 10)] == [
            uuid_text,
            odd,
        ]

    def test_racing_writers_of_one_version_exactly_one_wins(self) -> None:
        # Given one originator at version 1 and eight writers, each on its own connection
        originator = uuid.uuid4()
        recorders = [self.create_recorder() for _ in range(8)]
        recorders[0].insert_events([StoredEvent(originator, 1, "t", b"v1")])
        outcomes: list[str] = []
        start = threading.Barrier(len(recorders))

        def write(recorder: NatsApplicationRecorder, n: int) -> None:
            start.wait()
            try:
                recorder.insert_events([StoredEvent(originator, 2, "t", b"writer%d" % n)])
            except IntegrityError:
                outcomes.append("conflict")
            else:
                outcomes.append("won")

        # When all of them append version 2 at once
        threads = [threading.Thread(target=write, args=(r, n)) for n, r in enumerate(recorders)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # Then exactly one wins and the others get IntegrityError
        assert sorted(outcomes) == ["conflict"] * 7 + ["won"]
        assert [e.originator_version for e in recorders[0].select_events(originator)] == [1, 2]


class TestNatsNonInterleavingNotificationIDs(
    NatsServerMixin, contract.NonInterleavingNotificationIDsBaseCase
):
    # insert_num stays at eventsourcing's 1000: exactly the server's atomic batch limit.
    def create_recorder(self) -> ApplicationRecorder:
        return self.new_factory().application_recorder()


class TestNatsTrackingRecorder(NatsServerMixin, contract.TrackingRecorderTestCase):
    def create_recorder(self) -> TrackingRecorder:
        return self.new_factory().tracking_recorder()


class TestNatsProcessRecorder(NatsServerMixin, contract.ProcessRecorderTestCase):
    def create_recorder(self) -> ProcessRecorder:
        return self.new_factory().process_recorder()


class CustomTrackingRecorder(NatsTrackingRecorder):
    """A tracking recorder subclass the factory must construct when asked by class or topic."""


class TestNatsInfrastructureFactory(
    NatsServerMixin, contract.InfrastructureFactoryTestCase[NatsFactory]
):
    def setUp(self) -> None:
        self.stream = "ES" + uuid.uuid4().hex[:12].upper()
        self.env = Environment(env=self.nats_env())
        contract.InfrastructureFactoryTestCase.setUp(self)

    def expected_factory_class(self) -> type[NatsFactory]:
        return NatsFactory

    def expected_aggregate_recorder_class(self) -> type[AggregateRecorder]:
        return NatsAggregateRecorder

    def expected_application_recorder_class(self) -> type[ApplicationRecorder]:
        return NatsApplicationRecorder

    def expected_tracking_recorder_class(self) -> type[TrackingRecorder]:
        return NatsTrackingRecorder

    def tracking_recorder_subclass(self) -> type[TrackingRecorder]:
        return CustomTrackingRecorder

    def expected_process_recorder_class(self) -> type[ProcessRecorder]:
        return NatsProcessRecorder


class Dog(Aggregate):
    @event("Registered")
    def __init__(self, name: str) -> None:
        self.name = name
        self.tricks: list[str] = []

    @event("TrickAdded")
    def add_trick(self, trick: str) -> None:
        self.tricks.append(trick)


class DogSchool(Application[uuid.UUID]):
    is_snapshotting_enabled = True

    def register_dog(self, name: str) -> uuid.UUID:
        dog = Dog(name)
        self.save(dog)
        return dog.id

    def add_trick(self, dog_id: uuid.UUID, trick: str) -> None:
        dog: Dog = self.repository.get(dog_id)
        dog.add_trick(trick)
        self.save(dog)

    def get_dog(self, dog_id: uuid.UUID) -> dict[str, Any]:
        dog: Dog = self.repository.get(dog_id)
        return {"name": dog.name, "tricks": tuple(dog.tricks)}


def test_application_round_trip_through_nats(
    nats_server: NatsServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an eventsourcing application configured only by its environment
    monkeypatch.setenv("PERSISTENCE_MODULE", PERSISTENCE_MODULE)
    monkeypatch.setenv("MEMSTREAM_NATS_URL", nats_server.url)
    monkeypatch.setenv("MEMSTREAM_ES_STREAM", "DOGS")
    app = DogSchool()
    try:
        assert isinstance(app.factory, NatsFactory)
        # When a dog is registered and learns two tricks, and a snapshot is taken
        dog_id = app.register_dog("Fido")
        app.add_trick(dog_id, "roll over")
        app.add_trick(dog_id, "play dead")
        app.take_snapshot(dog_id)
        # Then the repository returns it, and the notification log lists its three events
        assert app.get_dog(dog_id) == {"name": "Fido", "tricks": ("roll over", "play dead")}
        notifications = app.notification_log.select(start=1, limit=10)
        assert [n.originator_version for n in notifications] == [1, 2, 3]
        assert [n.id for n in notifications] == [1, 2, 3]
        # And the events live under the eventsourcing prefix, never memstream's "ms."
        recorder = cast(NatsApplicationRecorder, app.recorder)
        assert recorder.event_subject(dog_id).startswith("es.DogSchool.events.")
    finally:
        app.close()

    # When a fresh application (a new process, say) reads the same stream
    again = DogSchool()
    try:
        # Then it rebuilds the dog from NATS, through the snapshot and from the events
        assert again.get_dog(dog_id) == {"name": "Fido", "tricks": ("roll over", "play dead")}
        assert again.snapshots is not None
        assert [s.originator_version for s in again.snapshots.get(dog_id)] == [3]
        again.add_trick(dog_id, "fetch")
        assert again.get_dog(dog_id)["tricks"][-1] == "fetch"
        assert again.recorder.max_notification_id() == 5  # 3 events, 1 snapshot, 1 event
    finally:
        again.close()


def test_factory_needs_a_nats_url() -> None:
    # Given an environment without MEMSTREAM_NATS_URL, When the factory is built, Then it says so
    with pytest.raises(OSError, match="MEMSTREAM_NATS_URL"):
        NatsFactory(env={"PERSISTENCE_MODULE": PERSISTENCE_MODULE})


def test_the_persistence_module_keeps_its_first_name(
    nats_server: NatsServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an application configured with the module path of earlier releases
    monkeypatch.setenv("PERSISTENCE_MODULE", "memstream.workers.es_persistence")
    monkeypatch.setenv("MEMSTREAM_NATS_URL", nats_server.url)
    monkeypatch.setenv("MEMSTREAM_ES_STREAM", "OLDNAME")
    app = DogSchool()
    try:
        # Then it runs on the same factory
        assert isinstance(app.factory, NatsFactory)
        dog_id = app.register_dog("Rex")
        assert app.get_dog(dog_id) == {"name": "Rex", "tricks": ()}
    finally:
        app.close()
