"""Events of every type, as the domain decides them (for tests of the event contract), and the
log records a read-model store applies, encoded as the log holds them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from support.messages import msg

from memstream.domain.context import ContextDocument, SearchIndex, document_id
from memstream.domain.memory_input import check_ingest
from memstream.domain.memory_profile import MemoryProfile
from memstream.domain.purge_log import PURGE_LOG_ID, PurgeLog
from memstream.domain.session import SessionAggregate
from memstream.domain.session_registry import SessionRecord
from memstream.workers.log.codec import CommandMeta, encode_event
from memstream.workers.log.event_log import LogEntry
from memstream.workers.log.subjects import subject_for


def every_event() -> list[Any]:
    """One event of every type the domain decides, in the order a session would have them."""
    session = SessionAggregate.empty("default", "s")
    events: list[Any] = []

    def take(decided: list[Any]) -> None:
        for event in decided:
            event.mutate(session)
            events.append(event)

    take(session.append_message(msg("m1", 'héllo "quoted" ✓')))
    take(session.append_messages([msg("m2"), msg("m3")]))
    take(session.update_message(msg("m2", "changed")))
    take(session.add_compaction("a summary", "m1", "m2"))
    take(session.freeze_system_prompt("the prompt"))
    take(session.clear_system_prompt())
    take(session.freeze_system_prompt("the prompt"))
    take(session.load_skill("docs", "a"))
    take(session.unload_skill("docs", "a"))
    take(session.delete_messages(["m3"]))
    take(session.clear_messages())
    document = ContextDocument.empty("default", document_id("notes", "s"))
    for decide in (lambda: document.replace("some notes"), document.delete):
        for event in decide():
            event.mutate(document)
            events.append(event)
    events += document.replace("some notes")
    index = SearchIndex.empty("default", "kb")
    events += index.index("k1", "an entry")
    record = SessionRecord.empty("default", "s")
    for decide in (
        lambda: record.create("Trip", model="gpt-x", source="cli", parent_session_id="s0"),
        lambda: record.rename("Trip to Lisbon"),
        lambda: record.add_usage(120, 30, 0.0042),
        lambda: record.end("compaction"),
        record.delete,
    ):
        for event in decide():
            event.mutate(record)
            events.append(event)
    profile = MemoryProfile.empty("default", "alice")
    sid, messages = check_ingest(
        [{"role": "user", "content": "I live in Lisbon", "timestamp": "2026-05-01T10:00:00Z"}],
        "s1",
        datetime(2026, 5, 1, tzinfo=UTC),
    )

    def memory(memory_id: str, summary: str) -> dict[str, Any]:
        return {
            "id": memory_id,
            "type": "fact",
            "topic_key": "user:lives_in",
            "summary": summary,
            "content": summary,
            "keywords": ["lisbon"],
            "queries": ["Where does the user live?"],
            "source_message_ids": [messages[0].id],
            "event_time": None,
            "session_id": "s1",
        }

    extractor = {"name": "offline", "version": "1"}
    for decide in (
        profile.create,
        lambda: profile.ingest(sid, messages),
        lambda: profile.record_extraction(
            next(iter(profile.pending)), extractor, [memory("m1", "User lives in Lisbon")]
        ),
        lambda: profile.remember("m2", "I live in Porto now", "s1"),
        lambda: profile.record_extraction("m2", extractor, [memory("m2", "User lives in Porto")]),
        lambda: profile.delete_memory("m2"),
        lambda: profile.forget_session("s1"),
        profile.delete,
    ):
        for event in decide():
            event.mutate(profile)
            events.append(event)
    events += PurgeLog.empty("default").record(
        sequences=[999_999],
        subjects=1,
        events=3,
        sessions=0,
        profiles=1,
        older_than="30d",
        deleted_before="2026-05-01T10:00:00Z",
    )
    return events


def subject_of(event: Any, namespace: str = "default") -> str:
    """The subject the event's aggregate owns."""
    if isinstance(event, ContextDocument.Event):
        return subject_for("ms", namespace, "block", document_id(event.label, event.session_id))
    if isinstance(event, SessionRecord.Event):
        return subject_for("ms", namespace, "registry", event.session_id)
    if isinstance(event, SearchIndex.Event):
        return subject_for("ms", namespace, "search", event.key)
    if isinstance(event, MemoryProfile.Event):
        return subject_for("ms", namespace, "profile", event.profile)
    if isinstance(event, PurgeLog.Event):
        return subject_for("ms", namespace, "purge", PURGE_LOG_ID)
    return subject_for("ms", namespace, "session", event.session_id)


class RecordedLog:
    """Domain events as log records (:class:`LogEntry`), numbered in stream order from 1."""

    def __init__(self, namespace: str = "default") -> None:
        self.namespace = namespace
        self.entries: list[LogEntry] = []
        self._sessions: dict[str, SessionAggregate] = {}
        self._documents: dict[str, ContextDocument] = {}
        self._indexes: dict[str, SearchIndex] = {}
        self._records: dict[str, SessionRecord] = {}

    def record(self, events: Iterable[Any]) -> list[LogEntry]:
        """Append ``events`` (already decided); returns their records."""
        added = []
        for event in events:
            payload, headers = encode_event(event, CommandMeta(), f"id-{len(self.entries) + 1}")
            entry = LogEntry(
                len(self.entries) + 1, subject_of(event, self.namespace), payload, headers
            )
            self.entries.append(entry)
            added.append(entry)
        return added

    def session(
        self, session_id: str, decide: Callable[[SessionAggregate], list[Any]]
    ) -> list[LogEntry]:
        """Decide a command on session ``session_id`` and record its events."""
        session = self._sessions.setdefault(
            session_id, SessionAggregate.empty(self.namespace, session_id)
        )
        events = decide(session)
        for event in events:
            event.mutate(session)
        return self.record(events)

    def registry(
        self, session_id: str, decide: Callable[[SessionRecord], list[Any]]
    ) -> list[LogEntry]:
        """Decide a command on the registry record of session ``session_id``; record it."""
        record = self._records.setdefault(
            session_id, SessionRecord.empty(self.namespace, session_id)
        )
        events = decide(record)
        for event in events:
            event.mutate(record)
        return self.record(events)

    def block(self, label: str, session_id: str | None, content: str) -> list[LogEntry]:
        """Replace the content of a built-in context block."""
        key = document_id(label, session_id)
        document = self._documents.setdefault(key, ContextDocument.empty(self.namespace, key))
        events = document.replace(content)
        for event in events:
            event.mutate(document)
        return self.record(events)

    def delete_block(self, label: str, session_id: str | None) -> list[LogEntry]:
        """Delete a built-in context block written before."""
        document = self._documents[document_id(label, session_id)]
        events = document.delete()
        for event in events:
            event.mutate(document)
        return self.record(events)

    def entry(self, key: str, entry_key: str, content: str) -> list[LogEntry]:
        """Index an entry of search block ``key``."""
        index = self._indexes.setdefault(key, SearchIndex.empty(self.namespace, key))
        events = index.index(entry_key, content)
        for event in events:
            event.mutate(index)
        return self.record(events)
