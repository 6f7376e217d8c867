"""What the context side of a session uses of the session and of the connected memstream.

The context package sits below :mod:`memstream.session` and :mod:`memstream.client`: they hand
it themselves, and it sees them only through these protocols (so no module of it imports
either, and no import runs in a circle).
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from eventsourcing.domain import Aggregate

from memstream.domain.context import ContextDocument, SearchIndex
from memstream.domain.messages import Message
from memstream.domain.session import SessionAggregate
from memstream.projections.ports import ContextQueries, SessionQueries
from memstream.types import SessionMessage
from memstream.workers.log.aggregate_store import AggregateStore, CommandResult, Decide
from memstream.workers.log.codec import CommandMeta

A = TypeVar("A", bound=Aggregate)
R = TypeVar("R")


class MemstreamPort(Protocol):
    """A connected memstream (:class:`memstream.client.Memstream`): commands on the log, and
    the read models once they have caught up."""

    @property
    def namespace(self) -> str: ...

    @property
    def context_queries(self) -> ContextQueries: ...

    @property
    def session_queries(self) -> SessionQueries: ...

    @property
    def blocks(self) -> AggregateStore[ContextDocument]: ...

    @property
    def search_indexes(self) -> AggregateStore[SearchIndex]: ...

    async def wait_for(self, projection: str, seq: int | None = None) -> None: ...

    async def session_command(
        self,
        session_id: str,
        decide: Decide[SessionAggregate, R],
        meta: CommandMeta | None = None,
    ) -> CommandResult[R]: ...

    async def command(
        self,
        store: AggregateStore[A],
        kind: str,
        key: str,
        decide: Decide[A, R],
        meta: CommandMeta | None = None,
    ) -> CommandResult[R]: ...


class SessionPort(Protocol):
    """A session of the API (:class:`memstream.session.Session`)."""

    @property
    def session_id(self) -> str: ...

    @property
    def memstream(self) -> MemstreamPort: ...

    def command_meta(self) -> CommandMeta: ...

    async def get_history(self, leaf_id: str | None = None) -> list[SessionMessage]: ...

    async def update_message(self, message: Message) -> int: ...
