"""The session aggregate: a tree of messages and compaction overlays, decided on the log.

:class:`SessionAggregate` is the domain's decision state of a session; the API users call is
:class:`memstream.Session`. Until both were named apart the aggregate was ``Session`` too, and
events written before the event contract carry that name in their eventsourcing topic
(``memstream.domain.session:Session.MessageAppended``): the codec reads them as the renamed
class's (:data:`memstream.workers.log.codec.RENAMED_AGGREGATES`).

Commands validate against the aggregate's decision state and *return* the events they decide;
the caller publishes them and only then applies them with
:meth:`SessionAggregate.apply_events`. That keeps a cached aggregate valid when a publish is
rejected (optimistic concurrency), so a conflict costs a fast-forward from the log instead of a
full reload.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from eventsourcing.domain import Aggregate

from memstream.domain.aggregates import empty_aggregate, next_event
from memstream.domain.errors import InvalidInputError, MessageNotFoundError
from memstream.domain.limits import (
    BATCH_MAX_MESSAGES,
    CONTEXT_LABEL_MAX_CHARS,
    MESSAGE_ID_MAX_CHARS,
    check_chars,
    check_message_id,
    require_str,
    utf8_size,
)
from memstream.domain.message_index import NO_MESSAGES, MessageIndex, StoredMessages
from memstream.domain.messages import encode_message, normalize_message

_NAMESPACE = uuid.UUID("6f2a4a64-9f7e-4c38-a1c7-2c1f0e0f7a01")


class _Omitted:
    """Marker for an omitted ``parent_id`` (attach to the latest leaf)."""

    _instance: ClassVar[_Omitted | None] = None

    def __new__(cls) -> _Omitted:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "OMITTED"


OMITTED: Any = _Omitted()
_E = TypeVar("_E", bound="SessionAggregate.Event")


def session_aggregate_id(namespace: str, session_id: str) -> uuid.UUID:
    """The deterministic aggregate id of a session in a namespace."""
    return uuid.uuid5(_NAMESPACE, f"{namespace}\x00session\x00{session_id}")


class SessionAggregate(Aggregate):
    """Decision state of one session: which message ids exist, their parents, the latest leaf."""

    class Event(Aggregate.Event):
        """Base of session events; every event names its session."""

        session_id: str

    class MessageAppended(Event):
        """A message was appended under ``parent_id`` (``None``: a new root)."""

        message_id: str
        parent_id: str | None
        message_json: str

        def apply(self, aggregate: Any) -> None:
            aggregate.add_message(self.message_id, self.parent_id)

    class MessagesAppended(Event):
        """Several messages were appended atomically, in order (``entries`` as MessageAppended)."""

        entries: list[dict[str, Any]]

        def apply(self, aggregate: Any) -> None:
            for entry in self.entries:
                aggregate.add_message(entry["message_id"], entry["parent_id"])

    class MessageUpdated(Event):
        """A stored message's content was replaced."""

        message_id: str
        message_json: str

    class MessagesDeleted(Event):
        """Messages were deleted (children keep their parent ids; no cascade)."""

        message_ids: list[str]

        def apply(self, aggregate: Any) -> None:
            for message_id in self.message_ids:
                aggregate.remove_message(message_id)

    class MessagesCleared(Event):
        """All messages and compaction overlays of the session were removed."""

        def apply(self, aggregate: Any) -> None:
            aggregate.messages.clear()
            aggregate.loaded_skills.clear()

    class CompactionAdded(Event):
        """A compaction overlay replaces ``from_message_id..to_message_id`` when reading."""

        compaction_id: str
        summary: str
        from_message_id: str
        to_message_id: str

    class SystemPromptFrozen(Event):
        """The session's system prompt was frozen (or, with ``refreshed``, re-rendered)."""

        prompt: str
        refreshed: bool

        def apply(self, aggregate: Any) -> None:
            aggregate.frozen_prompt = self.prompt

    class SystemPromptCleared(Event):
        """The session's frozen system prompt was removed (the session was deleted)."""

        def apply(self, aggregate: Any) -> None:
            aggregate.frozen_prompt = None

    class SkillLoaded(Event):
        """A skill (``key`` of skill block ``label``) was loaded into the conversation."""

        label: str
        key: str

        def apply(self, aggregate: Any) -> None:
            aggregate.loaded_skills[f"{self.label}:{self.key}"] = None

    class SkillUnloaded(Event):
        """A loaded skill was unloaded (its tool output in history was reclaimed)."""

        label: str
        key: str

        def apply(self, aggregate: Any) -> None:
            aggregate.loaded_skills.pop(f"{self.label}:{self.key}", None)

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def empty(cls, namespace: str, session_id: str) -> SessionAggregate:
        """A session with no events yet (version 0); sessions begin with their first write."""
        return cls.restore(namespace, session_id, version=0, messages=NO_MESSAGES)

    @classmethod
    def restore(
        cls,
        namespace: str,
        session_id: str,
        *,
        version: int,
        messages: StoredMessages,
        frozen_prompt: str | None = None,
        loaded_skills: Sequence[str] = (),
    ) -> SessionAggregate:
        """The session as a snapshot holds it after its event ``version``: its messages looked up
        lazily in ``messages``, its frozen prompt and its loaded skills (``"label:key"``, in load
        order). Events after the snapshot are applied on top as usual."""
        session = empty_aggregate(cls, session_aggregate_id(namespace, session_id))
        session.version = version
        session.session_id = session_id
        session.messages = MessageIndex(messages)
        session.frozen_prompt = frozen_prompt
        session.loaded_skills = dict.fromkeys(loaded_skills)
        return session

    session_id: str
    messages: MessageIndex
    frozen_prompt: str | None
    loaded_skills: dict[str, None]  # "label:key", in load order

    # -- decision state -----------------------------------------------------------------------

    @property
    def latest_leaf(self) -> str | None:
        """The newest message without children (``None``: no messages)."""
        return self.messages.latest_leaf

    def add_message(self, message_id: str, parent_id: str | None) -> None:
        self.messages.add(message_id, parent_id)

    def remove_message(self, message_id: str) -> None:
        self.messages.remove(message_id)

    # -- commands (validate, then return the decided events) ---------------------------------

    def append_message(self, message: object, parent_id: object = OMITTED) -> list[Event]:
        """Decide the append of one message (no events if its id already exists)."""
        stored = normalize_message(message)
        message_json = encode_message(stored)
        message_id: str = stored["id"]
        if self.messages.exists(message_id):
            return []
        parent = self._resolve_parent(parent_id)
        self._refuse_cycle(message_id, parent)
        return [
            self._decide(
                self.MessageAppended,
                message_id=message_id,
                parent_id=parent,
                message_json=message_json,
            )
        ]

    def append_messages(
        self, messages: Sequence[object], parent_id: object = OMITTED
    ) -> list[Event]:
        """Decide an atomic chain append: each new message's parent is the previous one.

        Ids that already exist are skipped (idempotent), and the chain continues from them.
        """
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise InvalidInputError("messages must be a list of message dicts")
        if len(messages) > BATCH_MAX_MESSAGES:
            raise InvalidInputError(
                f"messages has {len(messages)} items; the limit is {BATCH_MAX_MESSAGES}"
            )
        parent = self._resolve_parent(parent_id)
        encoded: list[tuple[str, str]] = []
        tool_names: dict[str, str] = {}  # a chat-format batch's calls, named in its results
        for index, message in enumerate(messages):
            try:
                stored = normalize_message(message, tool_names)
                encoded.append((stored["id"], encode_message(stored)))
            except InvalidInputError as error:
                raise InvalidInputError(f"messages[{index}] of {len(messages)}: {error}") from None
        # One lookup for the whole chain instead of one per message (hundreds of new ids).
        self.messages.prefetch([message_id for message_id, _ in encoded])
        pending: dict[str, str | None] = {}  # this batch's parents, for the cycle check
        entries: list[dict[str, Any]] = []
        for message_id, message_json in encoded:
            if message_id in pending or self.messages.exists(message_id):
                parent = message_id
                continue
            self._refuse_cycle(message_id, parent, pending)
            pending[message_id] = parent
            entries.append(
                {"message_id": message_id, "parent_id": parent, "message_json": message_json}
            )
            parent = message_id
        if not entries:
            return []
        return [self._decide(self.MessagesAppended, entries=entries)]

    def update_message(self, message: object) -> list[Event]:
        """Decide the replacement of a stored message's content.

        Raises:
            MessageNotFoundError: no message with that id exists in this session.
        """
        stored = normalize_message(message)
        message_json = encode_message(stored)
        message_id: str = stored["id"]
        if not self.messages.exists(message_id):
            raise MessageNotFoundError(
                f"message {message_id!r} does not exist in session {self.session_id!r}"
            )
        return [self._decide(self.MessageUpdated, message_id=message_id, message_json=message_json)]

    def delete_messages(self, message_ids: Iterable[object]) -> list[Event]:
        """Decide the deletion of the given ids that exist (unknown ids, and items that are not
        strings, so cannot be ids, are ignored)."""
        if isinstance(message_ids, str | bytes | Mapping) or not isinstance(message_ids, Iterable):
            raise InvalidInputError(
                f"ids must be a list of message ids, not {type(message_ids).__name__}"
            )
        existing: list[str] = []
        for value in message_ids:
            if isinstance(value, str) and value not in existing and self.messages.exists(value):
                existing.append(value)
        if not existing:
            return []
        return [self._decide(self.MessagesDeleted, message_ids=existing)]

    def delete_latest(self, message_id: object) -> list[Event]:
        """Decide the deletion of ``message_id`` if it is still the latest leaf (a pop: no
        events when another write moved the latest leaf meanwhile, so that two pops decided
        on the same version never remove the same message, nor a message the caller did not
        see)."""
        if not isinstance(message_id, str) or message_id != self.latest_leaf:
            return []
        return [self._decide(self.MessagesDeleted, message_ids=[message_id])]

    def clear_messages(self) -> list[Event]:
        """Decide the removal of every message and overlay of this session."""
        return [self._decide(self.MessagesCleared)]

    def add_compaction(
        self, summary: object, from_message_id: object, to_message_id: object
    ) -> list[Event]:
        """Decide a compaction overlay (ids are not validated: unknown endpoints stay inert)."""
        if not isinstance(summary, str):
            raise InvalidInputError(f"summary must be a string, not {type(summary).__name__}")
        encode_message({"id": "compaction", "role": "assistant", "parts": [{"text": summary}]})
        return [
            self._decide(
                self.CompactionAdded,
                compaction_id=str(uuid.uuid4()),
                summary=summary,
                from_message_id=check_message_id(from_message_id, "from_message_id"),
                to_message_id=check_message_id(to_message_id, "to_message_id"),
            )
        ]

    def freeze_system_prompt(self, prompt: object) -> list[Event]:
        """Decide a freeze: the first frozen prompt wins (a later freeze decides nothing)."""
        text = require_str("prompt", prompt)
        utf8_size("prompt", text)
        if self.frozen_prompt is not None:
            return []
        return [self._decide(self.SystemPromptFrozen, prompt=text, refreshed=False)]

    def refresh_system_prompt(self, prompt: object) -> list[Event]:
        """Decide a refresh: the new rendering replaces the frozen prompt (same text: no-op)."""
        text = require_str("prompt", prompt)
        utf8_size("prompt", text)
        if self.frozen_prompt == text:
            return []
        return [self._decide(self.SystemPromptFrozen, prompt=text, refreshed=True)]

    def clear_system_prompt(self) -> list[Event]:
        """Decide the removal of the frozen prompt (none frozen: no-op)."""
        if self.frozen_prompt is None:
            return []
        return [self._decide(self.SystemPromptCleared)]

    def load_skill(self, label: object, key: object) -> list[Event]:
        """Decide that a skill was loaded (already loaded: no-op)."""
        label_, key_ = _skill_ref(label, key)
        if f"{label_}:{key_}" in self.loaded_skills:
            return []
        return [self._decide(self.SkillLoaded, label=label_, key=key_)]

    def unload_skill(self, label: object, key: object) -> list[Event]:
        """Decide that a loaded skill was unloaded (not loaded: no-op)."""
        label_, key_ = _skill_ref(label, key)
        if f"{label_}:{key_}" not in self.loaded_skills:
            return []
        return [self._decide(self.SkillUnloaded, label=label_, key=key_)]

    # -- applying ------------------------------------------------------------------------------

    def apply_events(self, events: Iterable[Aggregate.Event]) -> None:
        """Apply events that are committed to the log, in order."""
        for event in events:
            event.mutate(self)

    def _resolve_parent(self, parent_id: object) -> str | None:
        if parent_id is OMITTED:
            return self.messages.latest_leaf
        if parent_id is None:
            return None
        if not isinstance(parent_id, str):
            raise InvalidInputError(
                f"parent_id must be a string or None, not {type(parent_id).__name__}"
            )
        if not self.messages.exists(parent_id):
            raise MessageNotFoundError(
                f"parent message {parent_id[:300]!r} does not exist in session {self.session_id!r}"
            )
        return parent_id

    def _refuse_cycle(
        self, message_id: str, parent_id: str | None, pending: dict[str, str | None] | None = None
    ) -> None:
        """Refuse an append that would make a message its own ancestor.

        Deleting a message keeps its children's parent ids, so re-appending a deleted id under
        one of its former descendants would close a loop. Only ids that orphans point at can do
        that, so the ancestor walk runs only for them. ``pending`` holds the parents of messages
        decided earlier in the same batch (not yet in :attr:`messages`).
        """
        if parent_id is None or self.messages.child_count(message_id) == 0:
            return
        pending = pending or {}
        current: str | None = parent_id
        seen: set[str] = set()  # the stored tree has no loop; this bounds the walk regardless
        while current is not None and current not in seen:
            if current == message_id:
                raise InvalidInputError(
                    f"appending {message_id!r} under {parent_id!r} would make it its own ancestor"
                )
            seen.add(current)
            if current in pending:
                current = pending[current]
            else:
                found = self.messages.find(current)
                if found is None:
                    return
                current = found[0]

    def _decide(self, event_class: type[_E], **kwargs: Any) -> _E:
        return next_event(self, event_class, session_id=self.session_id, **kwargs)


def _skill_ref(label: object, key: object) -> tuple[str, str]:
    return (
        check_chars("label", label, minimum=1, maximum=CONTEXT_LABEL_MAX_CHARS),
        check_chars("key", key, minimum=1, maximum=MESSAGE_ID_MAX_CHARS),
    )


__all__ = ["OMITTED", "SessionAggregate", "session_aggregate_id"]
