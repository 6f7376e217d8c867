"""Decide-then-apply helpers shared by the aggregates: an empty aggregate at version 0, and an
event decided for the next version (applied only once the log has accepted it)."""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

from eventsourcing.domain import Aggregate

A = TypeVar("A", bound=Aggregate)
E = TypeVar("E", bound=Aggregate.Event)


def empty_aggregate(cls: type[A], aggregate_id: uuid.UUID) -> A:
    """An aggregate with no events yet (version 0): aggregates begin with their first write."""
    aggregate = cls.__new__(cls)
    aggregate.__base_init__(aggregate_id, 0, Aggregate.Event.create_timestamp())
    return aggregate


def next_event(aggregate: Aggregate, event_class: type[E], **fields: Any) -> E:
    """``event_class`` for the aggregate's next version, not yet applied."""
    factory: Any = event_class  # the event dataclass's fields are generated at runtime
    event: E = factory(
        originator_id=aggregate.id,
        originator_version=aggregate.version + 1,
        timestamp=event_class.create_timestamp(),
        **fields,
    )
    return event
