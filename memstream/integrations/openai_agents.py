"""A memstream session as an OpenAI Agents SDK session (``memstream[agents]``).

:class:`MemstreamSession` implements the SDK's ``Session`` protocol on a memstream session:
each item the SDK stores (messages, ``function_call``, ``function_call_output``, reasoning and
the others) is one message of the session's tree, kept exactly (see
:mod:`memstream.domain.response_items`), so the history is also searchable, auditable on the
log, compactable and readable by every other memstream client::

    from agents import Agent, Runner
    from memstream.integrations.openai_agents import MemstreamSession

    async with memstream.connect() as ms:
        session = MemstreamSession("user-42", ms)
        await Runner.run(agent, "Hi", session=session)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memstream.domain.errors import InvalidInputError
from memstream.domain.limits import BATCH_MAX_MESSAGES
from memstream.domain.response_items import item_to_message, message_to_items, messages_to_items
from memstream.domain.session import SessionAggregate
from memstream.sync import async_client

if TYPE_CHECKING:
    from memstream.client import Memstream
    from memstream.sync import SyncMemstream
    from memstream.workers.log.aggregate_store import CommandResult


class MemstreamSession:
    """The Agents SDK's ``Session`` protocol on the memstream session ``session_id`` of
    ``client`` (a connected memstream client, async or of :func:`memstream.connect_sync`),
    usable from any thread and event loop. ``session_settings`` is the SDK's
    ``SessionSettings`` or a dict of its fields (its ``limit`` is the default of
    :meth:`get_items`), as the SDK's own sessions take it.

    Raises:
        TypeError: ``session_settings`` has a key ``SessionSettings`` does not know.
    """

    def __init__(
        self,
        session_id: str,
        client: Memstream | SyncMemstream,
        *,
        session_settings: Any | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = _session_settings(session_settings)
        self._client = async_client(client)
        self._session = self._client.session(session_id)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The history's items, the latest ``limit`` of them (in order) when given."""
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise InvalidInputError(f"limit must be an integer or None, not {limit!r}")
        items = messages_to_items(await self._session.get_history())
        if limit is None:
            return items
        return items[-limit:] if limit > 0 else []

    async def add_items(self, items: Sequence[Any]) -> None:
        """Append ``items`` to the history (atomically, in chains of up to 500)."""
        names: dict[str, str] = {}
        messages = [item_to_message(item, names) for item in items]
        for start in range(0, len(messages), BATCH_MAX_MESSAGES):
            await self._session.append_messages(messages[start : start + BATCH_MAX_MESSAGES])

    async def pop_item(self) -> Any | None:
        """Remove the history's last message and return its (last) item; None when empty.

        Atomic: the removal is one command decided against the session's version on the log,
        deleting the message only if it is still the latest, so concurrent pops (here or in
        other processes) each get a different item, or None.
        """
        session = self._session
        while True:
            leaf = await session.get_latest_leaf()
            if leaf is None:
                return None
            result: CommandResult[None] = await self._client.core.commands.session_command(
                self.session_id,
                functools.partial(SessionAggregate.delete_latest, message_id=leaf["id"]),
                session.command_meta(),
            )
            if result.events:
                items = message_to_items(leaf)
                return items[-1] if items else None
            # Another write moved the latest leaf: read again, as of what the decision saw.
            await self._client.wait_for("sessions", result.seq)

    async def clear_session(self) -> None:
        """Remove every item (the session's messages; the log keeps the events)."""
        await self._session.clear_messages()


def _session_settings(value: Any) -> Any:
    """``value`` as the SDK's sessions keep it: a ``SessionSettings`` (from a dict whose keys
    are its fields), ``SessionSettings()`` for None.

    Raises:
        TypeError: a dict key that is not a field of ``SessionSettings``.
    """
    from agents import memory

    if value is None:
        return memory.SessionSettings()
    coerce = getattr(memory, "coerce_session_settings", None)
    if coerce is not None:  # the SDK's own (0.24 and later): its checks and messages
        return coerce(value)
    if isinstance(value, dict):
        known = {field.name for field in dataclasses.fields(memory.SessionSettings)}
        unknown = sorted(str(key) for key in value if key not in known)
        if unknown:
            raise TypeError(f"Unknown session settings: {', '.join(unknown)}")
        return memory.SessionSettings(**value)
    return value
