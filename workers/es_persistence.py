"""The eventsourcing persistence module by its first name: ``PERSISTENCE_MODULE=
memstream.workers.es_persistence`` keeps working. It is :mod:`memstream.workers.log.es_persistence`
(the log client has had a folder of its own since); new settings should name that."""

from memstream.workers.log.es_persistence import (
    NatsAggregateRecorder,
    NatsApplicationRecorder,
    NatsFactory,
    NatsProcessRecorder,
    NatsRecorder,
    NatsSubscription,
    NatsTrackingRecorder,
)

__all__ = [
    "NatsAggregateRecorder",
    "NatsApplicationRecorder",
    "NatsFactory",
    "NatsProcessRecorder",
    "NatsRecorder",
    "NatsSubscription",
    "NatsTrackingRecorder",
]
