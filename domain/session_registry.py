"""The session registry: what a SessionManager knows of a session besides its messages.

One :class:`SessionRecord` per (namespace, session id) holds the session's name, model, source,
parent session, usage counters and end reason. It is an aggregate of its own, on a subject of its
own, beside the session's messages: usage added after every model call never contends with the
appends of the conversation (each subject is guarded by its own last sequence).
"""

from __future__ import annotations

import math
import uuid
from typing import Any, Final

from eventsourcing.domain import Aggregate

from memstream.domain.aggregates import empty_aggregate, next_event
from memstream.domain.errors import InvalidInputError, NotFoundError
from memstream.domain.limits import check_chars, check_int

_NAMESPACE = uuid.UUID("6f1d7a52-3c1e-4b8e-9a55-1d2f0c4e7b90")
SESSION_NAME_MAX_CHARS: Final = 256
SESSION_LABEL_MAX_CHARS: Final = 256  # a model or source name
END_REASON_MAX_CHARS: Final = 64
# Usage counters stay exact in a JSON number (and in JavaScript, the reference's runtime).
USAGE_MAX: Final = 2**53 - 1


def record_aggregate_id(namespace: str, session_id: str) -> uuid.UUID:
    """The deterministic aggregate id of a session's registry record."""
    return uuid.uuid5(_NAMESPACE, f"{namespace}\x00{session_id}")


def check_name(value: object) -> str:
    """A session's name: 1–256 characters."""
    return check_chars("name", value, minimum=1, maximum=SESSION_NAME_MAX_CHARS)


def check_label(name: str, value: object) -> str | None:
    """An optional model or source name: ``None`` or 1–256 characters."""
    if value is None:
        return None
    return check_chars(name, value, minimum=1, maximum=SESSION_LABEL_MAX_CHARS)


def check_cost(value: object) -> float:
    """A cost: a finite number, at least 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(f"cost must be a number, not {type(value).__name__}")
    cost = float(value)
    if not math.isfinite(cost) or cost < 0:
        raise InvalidInputError(f"cost is {value!r}; it must be a finite number of at least 0")
    return cost


class SessionRecord(Aggregate):
    """A session as the registry knows it (``exists`` once created, until deleted)."""

    class Event(Aggregate.Event):
        session_id: str

    class SessionCreated(Event):
        name: str
        model: str | None
        source: str | None
        parent_session_id: str | None
        forked_from_message_id: str | None

        def apply(self, aggregate: Any) -> None:
            aggregate.exists = True
            aggregate.name = self.name
            aggregate.model = self.model
            aggregate.source = self.source
            aggregate.parent_session_id = self.parent_session_id

    class SessionRenamed(Event):
        name: str

        def apply(self, aggregate: Any) -> None:
            aggregate.name = self.name

    class UsageAdded(Event):
        input_tokens: int
        output_tokens: int
        cost: float

        def apply(self, aggregate: Any) -> None:
            aggregate.input_tokens += self.input_tokens
            aggregate.output_tokens += self.output_tokens
            aggregate.cost += self.cost

    class SessionEnded(Event):
        end_reason: str

        def apply(self, aggregate: Any) -> None:
            aggregate.end_reason = self.end_reason

    class SessionDeleted(Event):
        def apply(self, aggregate: Any) -> None:
            aggregate.exists = False

    session_id: str
    exists: bool
    name: str
    model: str | None
    source: str | None
    parent_session_id: str | None
    input_tokens: int
    output_tokens: int
    cost: float
    end_reason: str | None

    @classmethod
    def empty(cls, namespace: str, session_id: str) -> SessionRecord:
        """A record with no events yet (the session is not registered)."""
        record = empty_aggregate(cls, record_aggregate_id(namespace, session_id))
        record.session_id = session_id
        record.exists = False
        record.name = ""
        record.model = record.source = record.parent_session_id = None
        record.input_tokens = record.output_tokens = 0
        record.cost = 0.0
        record.end_reason = None
        return record

    @classmethod
    def restore(cls, namespace: str, session_id: str, version: int, **state: Any) -> SessionRecord:
        """The record as a snapshot holds it after its event ``version`` (a registered
        session's fields: name, model, source, parent_session_id, input_tokens, output_tokens,
        cost, end_reason)."""
        record = cls.empty(namespace, session_id)
        record.version = version
        record.exists = True
        for name, value in state.items():
            setattr(record, name, value)
        return record

    def _require(self) -> None:
        if not self.exists:
            raise NotFoundError(f"session {self.session_id!r} is not registered")

    def create(
        self,
        name: object,
        *,
        model: object = None,
        source: object = None,
        parent_session_id: str | None = None,
        forked_from_message_id: str | None = None,
    ) -> list[Aggregate.Event]:
        """Decide the registration of the session (refused when it is registered already);
        a fork names the session and message it was forked from."""
        if self.exists:
            raise InvalidInputError(f"session {self.session_id!r} is registered already")
        return [
            next_event(
                self,
                self.SessionCreated,
                session_id=self.session_id,
                name=check_name(name),
                model=check_label("model", model),
                source=check_label("source", source),
                parent_session_id=parent_session_id,
                forked_from_message_id=forked_from_message_id,
            )
        ]

    def rename(self, name: object) -> list[Aggregate.Event]:
        """Decide a new name (renaming to the same name still records the touch)."""
        self._require()
        return [
            next_event(self, self.SessionRenamed, session_id=self.session_id, name=check_name(name))
        ]

    def add_usage(
        self, input_tokens: object, output_tokens: object, cost: object
    ) -> list[Aggregate.Event]:
        """Decide an increment of the usage counters."""
        self._require()
        added_in = check_int("input_tokens", input_tokens, minimum=0, maximum=USAGE_MAX)
        added_out = check_int("output_tokens", output_tokens, minimum=0, maximum=USAGE_MAX)
        added_cost = check_cost(cost)
        for name, total in (
            ("input_tokens", self.input_tokens + added_in),
            ("output_tokens", self.output_tokens + added_out),
        ):
            if total > USAGE_MAX:
                raise InvalidInputError(f"{name} would total {total}; the limit is {USAGE_MAX}")
        return [
            next_event(
                self,
                self.UsageAdded,
                session_id=self.session_id,
                input_tokens=added_in,
                output_tokens=added_out,
                cost=added_cost,
            )
        ]

    def end(self, reason: object) -> list[Aggregate.Event]:
        """Decide the end of the session (``"compaction"`` when it was split)."""
        self._require()
        text = check_chars("end_reason", reason, minimum=1, maximum=END_REASON_MAX_CHARS)
        return [next_event(self, self.SessionEnded, session_id=self.session_id, end_reason=text)]

    def delete(self) -> list[Aggregate.Event]:
        """Decide the removal from the registry (nothing to do when it is not registered)."""
        if not self.exists:
            return []
        return [next_event(self, self.SessionDeleted, session_id=self.session_id)]
