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

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from memstream.domain.errors import InvalidInputError
from memstream.domain.limits import BATCH_MAX_MESSAGES
from memstream.domain.response_items import item_to_message, message_to_items, messages_to_items

if TYPE_CHECKING:
    from memstream.client import Memstream


class MemstreamSession:
    """The Agents SDK's ``Session`` protocol on the memstream session ``session_id`` of
    ``client`` (a connected async memstream client). ``session_settings`` is the SDK's
    ``SessionSettings`` (its ``limit`` is the default of :meth:`get_items`)."""

    def __init__(
        self, session_id: str, client: Memstream, *, session_settings: Any | None = None
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings
        self._session = client.session(session_id)

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The history's items, the latest ``limit`` of them (in order) when given."""
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise InvalidInputError(f"limit must be an integer or None, not {limit!r}")
        items = messages_to_items(await self._session.get_history())
        if limit is None or limit < 0:
            return items
        return items[-limit:] if limit else []

    async def add_items(self, items: Sequence[Any]) -> None:
        """Append ``items`` to the history (atomically, in chains of up to 500)."""
        names: dict[str, str] = {}
        messages = [item_to_message(item, names) for item in items]
        for start in range(0, len(messages), BATCH_MAX_MESSAGES):
            await self._session.append_messages(messages[start : start + BATCH_MAX_MESSAGES])

    async def pop_item(self) -> Any | None:
        """Remove the history's last message and return its (last) item; None when empty."""
        leaf = await self._session.get_latest_leaf()
        if leaf is None:
            return None
        await self._session.delete_messages([leaf["id"]])
        items = message_to_items(leaf)
        return items[-1] if items else None

    async def clear_session(self) -> None:
        """Remove every item (the session's messages; the log keeps the events)."""
        await self._session.clear_messages()
