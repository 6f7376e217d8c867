"""Context aggregates and the context projection, without NATS.

Commands are decided on the aggregates (given events → when command → then events), projected by
``project_context_event`` at increasing sequences into ``sqlite3.connect(":memory:")`` and read
back through ``SqliteContextQueries``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from memstream.domain.context import (
    ContextDocument,
    SearchIndex,
    check_label,
    document_id,
    joined_content,
    prompt_store_key,
    storage_key,
)
from memstream.domain.errors import InvalidInputError
from memstream.domain.session import SessionAggregate
from memstream.projections.context_projector import project_context_event
from memstream.projections.sqlite.context_queries import SqliteContextQueries
from memstream.projections.sqlite.context_writer import apply_context_writes
from memstream.projections.sqlite.schema import migrate

NS = "default"


class Projected:
    """Applies decided events to their aggregate and to an in-memory context read model."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection
        self.queries = SqliteContextQueries(connection)
        self.seq = 0

    def commit(self, aggregate: Any, events: Sequence[Any]) -> None:
        for event in events:
            event.mutate(aggregate)
            self.seq += 1
            apply_context_writes(self.connection, project_context_event(NS, self.seq, event))


@pytest.fixture
def projected() -> Iterator[Projected]:
    connection = sqlite3.connect(":memory:", isolation_level=None)
    migrate(connection)
    yield Projected(connection)
    connection.close()


def test_a_label_and_session_that_share_a_reference_key_are_different_documents(
    projected: Projected,
) -> None:
    # Given label "memory" of session "x" and label "memory_x" of the default session
    ours = ContextDocument.empty(NS, document_id("memory", "x"))
    theirs = ContextDocument.empty(NS, document_id("memory_x", ""))
    # Then both show the reference key "memory_x" but are separate aggregates and rows
    assert ours.id != theirs.id
    projected.commit(ours, ours.replace("mine"))
    projected.commit(theirs, theirs.replace("theirs"))
    assert projected.queries.block_content(NS, "memory", "x") == "mine"
    assert projected.queries.block_content(NS, "memory_x", "") == "theirs"
    assert [b["key"] for b in projected.queries.blocks(NS)] == ["memory_x", "memory_x"]
    with pytest.raises(InvalidInputError, match="NUL"):
        check_label("a\x00b")


def test_storage_keys_are_namespaced_by_session_id_as_the_reference_does() -> None:
    assert storage_key("memory", "") == "memory"
    assert storage_key("memory", None) == "memory"
    assert storage_key("memory", "chat-123") == "memory_chat-123"
    assert prompt_store_key("") == "_system_prompt"
    assert prompt_store_key("xyz") == "_system_prompt_xyz"


def test_append_joins_with_one_newline_unless_one_is_there() -> None:
    assert joined_content("", "fact1") == "fact1"
    assert joined_content("fact1", "\nfact2") == "fact1\nfact2"
    assert joined_content("fact1", "fact2") == "fact1\nfact2"


def test_labels_are_1_to_64_characters() -> None:
    assert check_label("x" * 64) == "x" * 64
    with pytest.raises(InvalidInputError, match="label is 65 characters; the limit is 64"):
        check_label("x" * 65)
    with pytest.raises(InvalidInputError, match="minimum is 1"):
        check_label("")
    with pytest.raises(InvalidInputError, match="must be a string"):
        check_label(7)


def test_a_document_is_replaced_and_appended_on_its_own_state(projected: Projected) -> None:
    # Given a new block document
    doc = ContextDocument.empty(NS, document_id("memory", "chat-1"))
    assert doc.content is None
    # When it is replaced, then appended to
    projected.commit(doc, doc.replace("fact1"))
    projected.commit(doc, doc.append("fact2"))
    # Then the aggregate and the read model hold the joined text under the key
    assert doc.content == "fact1\nfact2"
    assert projected.queries.block_content(NS, "memory", "chat-1") == "fact1\nfact2"
    (row,) = projected.queries.blocks(NS, "chat-1")
    assert (row["key"], row["label"], row["session_id"], row["seq"]) == (
        "memory_chat-1",
        "memory",
        "chat-1",
        2,
    )
    assert projected.queries.blocks(NS, "") == []
    # And rewriting the same content decides nothing
    assert doc.replace("fact1\nfact2") == []


def test_max_tokens_bounds_the_whole_content_with_the_reference_error(
    projected: Projected,
) -> None:
    doc = ContextDocument.empty(NS, document_id("memory", None))
    # "word " * 50 estimates 65 tokens
    with pytest.raises(InvalidInputError, match=r'^Block "memory" exceeds maxTokens: 65 > 10$'):
        doc.replace("word " * 50, max_tokens=10)
    projected.commit(doc, doc.replace("a b c", max_tokens=4))
    # An append is checked on the joined text (4 + 2 words → 8 tokens > 4)
    with pytest.raises(InvalidInputError, match="exceeds maxTokens: 8 > 4"):
        doc.append("d e f", max_tokens=4)
    # max_tokens 0 is enforced too
    with pytest.raises(InvalidInputError, match="exceeds maxTokens: 2 > 0"):
        ContextDocument.empty(NS, document_id("m", "")).replace("a", max_tokens=0)
    assert doc.content == "a b c"


def test_content_must_be_a_string_within_1_mib() -> None:
    doc = ContextDocument.empty(NS, document_id("memory", None))
    with pytest.raises(InvalidInputError, match="content must be a string, not int"):
        doc.replace(42)
    with pytest.raises(InvalidInputError, match="content is 1048577 bytes; the limit is 1048576"):
        doc.replace("x" * (1024 * 1024 + 1))
    with pytest.raises(InvalidInputError, match="lone surrogate"):
        doc.replace("\ud800")
    # An append that would take a full block over the limit says so, with both sizes
    (written,) = doc.replace("x" * (1024 * 1024))
    written.mutate(doc)
    with pytest.raises(
        InvalidInputError,
        match="content would be 1048578 bytes after appending 1 bytes to block 'memory'; "
        "the limit is 1048576",
    ):
        doc.append("y")


def test_search_entries_upsert_and_are_searched_with_the_one_syntax(projected: Projected) -> None:
    # Given a search index with two entries
    index = SearchIndex.empty(NS, "knowledge")
    projected.commit(index, index.index("cats", "Cats purr when they are happy"))
    projected.commit(index, index.index("dogs", "Dogs bark at strangers"))
    assert projected.queries.entry_count(NS, "knowledge") == 2
    # When one is replaced under the same key
    projected.commit(index, index.index("cats", "Felines sleep most of the day"))
    # Then the old text is no longer found, the new one is, and the count stays
    assert projected.queries.search_entries(NS, "knowledge", "purr", 10) == []
    assert projected.queries.search_entries(NS, "knowledge", "sleeping", 10) == [
        ("cats", "Felines sleep most of the day")
    ]
    assert projected.queries.entry_count(NS, "knowledge") == 2
    # And web-search syntax works, while FTS syntax in user text never raises
    either = projected.queries.search_entries(NS, "knowledge", "bark OR day", 10)
    assert sorted(k for k, _ in either) == ["cats", "dogs"]
    assert projected.queries.search_entries(NS, "knowledge", "dogs -strangers", 10) == []
    for query in ['"', "*", "NEAR(", "OR", "-", '"unbalanced', "a\x00b", "x" * 10_000, ""]:
        assert isinstance(projected.queries.search_entries(NS, "knowledge", query, 10), list)
    # And another block's entries are not searched
    assert projected.queries.search_entries(NS, "other", "dogs", 10) == []
    # And the same content under the same key decides nothing
    assert index.index("dogs", "Dogs bark at strangers") == []


def test_prompt_freezes_once_and_refreshes_replace_it(projected: Projected) -> None:
    session = SessionAggregate.empty(NS, "chat-1")
    # When a prompt is frozen, a second freeze decides nothing (the first one wins)
    projected.commit(session, session.freeze_system_prompt("first"))
    assert session.freeze_system_prompt("second") == []
    assert projected.queries.cached_prompt(NS, "chat-1") == "first"
    # When it is refreshed, Then the new prompt replaces it (an equal one is a no-op)
    projected.commit(session, session.refresh_system_prompt("second"))
    assert session.refresh_system_prompt("second") == []
    assert projected.queries.cached_prompt(NS, "chat-1") == "second"
    # An empty prompt is a prompt, not "none"
    other = SessionAggregate.empty(NS, "chat-2")
    projected.commit(other, other.freeze_system_prompt(""))
    assert projected.queries.cached_prompt(NS, "chat-2") == ""
    assert projected.queries.cached_prompt(NS, "chat-3") is None


def test_loaded_skills_are_tracked_and_cleared_with_the_messages(projected: Projected) -> None:
    session = SessionAggregate.empty(NS, "chat-1")
    projected.commit(session, session.load_skill("skills", "pirate"))
    projected.commit(session, session.load_skill("skills", "tax"))
    assert session.load_skill("skills", "pirate") == []  # already loaded
    assert projected.queries.loaded_skills(NS, "chat-1") == ["skills:pirate", "skills:tax"]
    projected.commit(session, session.unload_skill("skills", "pirate"))
    assert session.unload_skill("skills", "pirate") == []  # not loaded any more
    assert projected.queries.loaded_skills(NS, "chat-1") == ["skills:tax"]
    # When the session's messages are cleared, Then its loaded skills go with them
    projected.commit(session, session.clear_messages())
    assert session.loaded_skills == {}
    assert projected.queries.loaded_skills(NS, "chat-1") == []
    with pytest.raises(InvalidInputError, match="label is 65 characters"):
        session.load_skill("x" * 65, "k")
