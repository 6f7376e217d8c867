"""What the context side of a session uses of the session and of the connected memstream.

The context package sits below :mod:`memstream.session` and :mod:`memstream.client`: they hand
it themselves, and it sees them only through these protocols (so no module of it imports
either, and no import runs in a circle).
"""

from __future__ import annotations

from typing import Protocol

from memstream.commands import CommandRunner
from memstream.domain.messages import Message
from memstream.read_side import ReadSide
from memstream.read_your_writes import ReadYourWrites
from memstream.types import SessionMessage
from memstream.workers.log.codec import CommandMeta


class MemstreamPort(Protocol):
    """The parts of a connected memstream the context side uses
    (:class:`memstream.core.Core`): commands on the log, and the read models once they have
    caught up."""

    @property
    def namespace(self) -> str: ...

    @property
    def reads(self) -> ReadSide: ...

    @property
    def ryw(self) -> ReadYourWrites: ...

    @property
    def commands(self) -> CommandRunner: ...


class SessionPort(Protocol):
    """A session of the API (:class:`memstream.session.Session`)."""

    @property
    def session_id(self) -> str: ...

    @property
    def memstream(self) -> MemstreamPort: ...

    def command_meta(self) -> CommandMeta: ...

    async def get_history(self, leaf_id: str | None = None) -> list[SessionMessage]: ...

    async def update_message(self, message: Message) -> int: ...
