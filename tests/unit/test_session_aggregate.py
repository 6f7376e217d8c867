"""The Session aggregate as given-events / when-command / then-events (no services).

Events are stored in eventsourcing's in-memory (POPO) recorder through its JSON mapper and the
aggregate is rebuilt from them for every decision, so each scenario also proves that the decided
events serialise and replay.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from eventsourcing.persistence import DatetimeAsISO, JSONTranscoder, Mapper, UUIDAsHex
from eventsourcing.popo import POPOAggregateRecorder
from support.messages import msg

from memstream.domain.errors import InvalidInputError, MessageNotFoundError
from memstream.domain.limits import BATCH_MAX_MESSAGES, MESSAGE_MAX_BYTES
from memstream.domain.session import OMITTED, SessionAggregate

Decision = Callable[[SessionAggregate], Sequence[SessionAggregate.Event]]


class Scenario:
    """One session's events in an in-memory event store."""

    def __init__(self, session_id: str = "chat") -> None:
        self.session_id = session_id
        transcoder = JSONTranscoder()
        transcoder.register(UUIDAsHex())
        transcoder.register(DatetimeAsISO())
        self.mapper: Mapper[Any] = Mapper(transcoder=transcoder)
        self.recorder = POPOAggregateRecorder()

    def load(self) -> SessionAggregate:
        session = SessionAggregate.empty("default", self.session_id)
        for stored in self.recorder.select_events(session.id):
            self.mapper.to_domain_event(stored).mutate(session)
        return session

    def given(self, *decisions: Decision) -> None:
        for decide in decisions:
            events = decide(self.load())
            self.recorder.insert_events([self.mapper.to_stored_event(e) for e in events])

    def when(self, decide: Decision) -> list[SessionAggregate.Event]:
        """Decide on the current state; the events are recorded, as the log would."""
        events = list(decide(self.load()))
        self.recorder.insert_events([self.mapper.to_stored_event(e) for e in events])
        return events


def append(message_id: str, parent: Any = OMITTED, text: str | None = None) -> Decision:
    return lambda s: s.append_message(msg(message_id, text), parent)


@pytest.fixture
def scenario() -> Scenario:
    return Scenario()


# -- append ------------------------------------------------------------------------------------


def test_first_append_is_a_root(scenario: Scenario) -> None:
    # Given an empty session
    # When a message is appended without a parent
    events = scenario.when(append("m1"))
    # Then one MessageAppended with no parent is decided, carrying the canonical JSON
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, SessionAggregate.MessageAppended)
    assert (event.session_id, event.message_id, event.parent_id) == ("chat", "m1", None)
    assert event.message_json == (
        '{"id":"m1","role":"user","parts":[{"type":"text","text":"m message m1"}]}'
    )
    assert scenario.load().latest_leaf == "m1"


def test_omitted_parent_attaches_to_latest_leaf(scenario: Scenario) -> None:
    # Given m1 → m2
    scenario.given(append("m1"), append("m2"))
    # When m3 is appended with the parent omitted
    (event,) = scenario.when(append("m3"))
    # Then its parent is the latest leaf m2
    assert isinstance(event, SessionAggregate.MessageAppended)
    assert event.parent_id == "m2"


def test_parent_none_starts_a_new_root(scenario: Scenario) -> None:
    # Given m1 → m2
    scenario.given(append("m1"), append("m2"))
    # When m3 is appended with parent_id=None
    (event,) = scenario.when(append("m3", None))
    # Then m3 is a root and becomes the latest leaf
    assert isinstance(event, SessionAggregate.MessageAppended)
    assert event.parent_id is None
    assert scenario.load().latest_leaf == "m3"


def test_explicit_parent_branches_and_the_branch_becomes_latest_leaf(scenario: Scenario) -> None:
    # Given m1 → m2
    scenario.given(append("m1"), append("m2"))
    # When m2b is appended under m1
    (event,) = scenario.when(append("m2b", "m1"))
    # Then it is a sibling of m2 and the newest childless message
    assert isinstance(event, SessionAggregate.MessageAppended)
    assert event.parent_id == "m1"
    state = scenario.load()
    assert state.latest_leaf == "m2b"
    assert state.messages.child_count("m1") == 2


def test_unknown_explicit_parent_is_refused(scenario: Scenario) -> None:
    # Given m1
    scenario.given(append("m1"))
    # When m2 is appended under a parent that does not exist
    # Then MessageNotFoundError, and nothing was decided
    with pytest.raises(MessageNotFoundError, match="nope"):
        scenario.when(append("m2", "nope"))
    assert scenario.load().messages.added() == {"m1": None}


def test_parent_from_another_session_is_unknown() -> None:
    # Given m1 in session "a"
    other = Scenario("a")
    other.given(append("m1"))
    # When session "b" appends under "m1"
    # Then it is unknown there (ids are per session)
    with pytest.raises(MessageNotFoundError):
        Scenario("b").when(append("x", "m1"))


def test_existing_id_is_a_no_op_and_first_content_wins(scenario: Scenario) -> None:
    # Given m1 with text "First"
    scenario.given(append("m1", text="First"))
    # When m1 is appended again with other text (and even an unknown parent)
    events = scenario.when(lambda s: s.append_message(msg("m1", "Second"), "nope"))
    # Then nothing is decided
    assert events == []
    assert scenario.load().version == 1


def test_non_string_parent_is_invalid(scenario: Scenario) -> None:
    # Given m1
    scenario.given(append("m1"))
    # When the parent id is not a string
    # Then InvalidInputError
    with pytest.raises(InvalidInputError, match="parent_id"):
        scenario.when(append("m2", 1))


def test_message_without_id_gets_one_and_chat_style_content_becomes_a_text_part(
    scenario: Scenario,
) -> None:
    # Given an empty session
    # When a chat-style message without id is appended
    (event,) = scenario.when(lambda s: s.append_message({"role": "user", "content": "Hi"}))
    # Then it gets a fresh id and one text part
    assert isinstance(event, SessionAggregate.MessageAppended)
    assert event.message_id
    assert event.message_json == (
        f'{{"id":"{event.message_id}","role":"user","parts":[{{"type":"text","text":"Hi"}}]}}'
    )


def test_extra_fields_are_kept_verbatim(scenario: Scenario) -> None:
    # When a message with extra fields is appended
    message = {**msg("m1"), "metadata": {"k": [1, 2]}, "created_at": "2024-01-01T00:00:00Z"}
    (event,) = scenario.when(lambda s: s.append_message(message))
    # Then the canonical JSON keeps them
    assert isinstance(event, SessionAggregate.MessageAppended)
    assert '"metadata":{"k":[1,2]}' in event.message_json
    assert '"created_at":"2024-01-01T00:00:00Z"' in event.message_json


@pytest.mark.parametrize(
    ("message", "match"),
    [
        ("not a dict", "must be a dict"),
        (["id", "m1"], "must be a dict"),
        (None, "must be a dict"),
        ({"id": "", "role": "user", "parts": []}, "minimum is 1"),
        ({"id": "x" * 257, "role": "user", "parts": []}, "limit is 256"),
        ({"id": 7, "role": "user", "parts": []}, "must be a string"),
        ({"id": "m1", "role": 1, "parts": []}, "role"),
        ({"id": "m1", "parts": []}, "role"),
        ({"id": "m1", "role": "user", "parts": "text"}, "parts must be a list"),
        ({"id": "m1", "role": "user", "parts": ({"type": "text"},)}, "parts must be a list"),
        ({"id": "m1", "role": "user"}, "parts must be a list"),
        ({"id": "m1", "role": "user", "parts": ["text"]}, "part 0"),
        ({"id": "m1", "role": "user", "parts": [{"type": "text", "text": math.nan}]}, "JSON"),
        ({"id": "m1", "role": "user", "parts": [{"type": "x", "v": math.inf}]}, "JSON"),
        ({"id": "m1", "role": "user", "parts": [{"type": "x", "v": object()}]}, "JSON"),
        ({"id": "m1", "role": "user", "parts": [{"type": "x", "v": {1, 2}}]}, "JSON"),
        ({"id": "m1", "role": "user", "parts": [{"type": "text", "text": "a\ud800"}]}, "Unicode"),
        ({"id": "m\udfff", "role": "user", "parts": []}, "Unicode"),
    ],
)
def test_bad_messages_are_refused(scenario: Scenario, message: object, match: str) -> None:
    # Given m0
    scenario.given(append("m0"))
    # When a malformed message is appended
    # Then InvalidInputError names the problem, and nothing was decided
    with pytest.raises(InvalidInputError, match=match):
        scenario.when(lambda s: s.append_message(message))
    assert list(scenario.load().messages.added()) == ["m0"]


def test_message_size_limit_is_on_the_canonical_json(scenario: Scenario) -> None:
    # Given the JSON overhead of a one-text-part message
    overhead = len('{"id":"big","role":"user","parts":[{"type":"text","text":""}]}')
    # When a message of exactly 1 MiB of JSON is appended, it is accepted
    (event,) = scenario.when(append("big", text="x" * (MESSAGE_MAX_BYTES - overhead)))
    assert isinstance(event, SessionAggregate.MessageAppended)
    assert len(event.message_json.encode()) == MESSAGE_MAX_BYTES
    # And one byte more (a two-byte character replacing one byte) is refused
    with pytest.raises(InvalidInputError, match=r"1048577 bytes of JSON; the limit is 1048576"):
        scenario.when(append("bi2", text="é" + "x" * (MESSAGE_MAX_BYTES - overhead - 1)))


# -- append_messages ------------------------------------------------------------------------------


def test_append_messages_is_one_event_chaining_each_message(scenario: Scenario) -> None:
    # Given m0
    scenario.given(append("m0"))
    # When three messages are appended as a chain
    (event,) = scenario.when(lambda s: s.append_messages([msg("a"), msg("b"), msg("c")]))
    # Then one MessagesAppended event chains them from the latest leaf
    assert isinstance(event, SessionAggregate.MessagesAppended)
    assert [(e["message_id"], e["parent_id"]) for e in event.entries] == [
        ("a", "m0"),
        ("b", "a"),
        ("c", "b"),
    ]
    assert scenario.load().latest_leaf == "c"


def test_append_messages_skips_existing_ids_and_continues_from_them(scenario: Scenario) -> None:
    # Given m0 → a
    scenario.given(append("m0"), append("a"))
    # When a chain [a, b, b, c] is appended under m0
    (event,) = scenario.when(
        lambda s: s.append_messages([msg("a"), msg("b"), msg("b", "dup"), msg("c")], "m0")
    )
    # Then "a" is skipped (existing), the second "b" too, and the chain continues from them
    assert isinstance(event, SessionAggregate.MessagesAppended)
    assert [(e["message_id"], e["parent_id"]) for e in event.entries] == [("b", "a"), ("c", "b")]


def test_append_messages_of_only_existing_ids_decides_nothing(scenario: Scenario) -> None:
    scenario.given(append("m0"))
    assert scenario.when(lambda s: s.append_messages([msg("m0")])) == []
    assert scenario.when(lambda s: s.append_messages([])) == []


def test_append_messages_limits(scenario: Scenario) -> None:
    # Given an empty session
    # When more than 500 messages, a non-list, or an unknown parent is given → refused
    too_many = [msg(f"m{i}") for i in range(BATCH_MAX_MESSAGES + 1)]
    with pytest.raises(InvalidInputError, match="limit is 500"):
        scenario.when(lambda s: s.append_messages(too_many))
    with pytest.raises(InvalidInputError, match="list"):
        scenario.when(lambda s: s.append_messages("m1"))  # type: ignore[arg-type]
    with pytest.raises(MessageNotFoundError):
        scenario.when(lambda s: s.append_messages([msg("a")], "nope"))
    # When one message of the batch is bad, the whole batch is refused
    with pytest.raises(InvalidInputError):
        scenario.when(lambda s: s.append_messages([msg("a"), {"id": "b", "role": "user"}]))
    # Then nothing was decided; exactly 500 is fine
    assert scenario.load().version == 0
    (event,) = scenario.when(lambda s: s.append_messages(too_many[:BATCH_MAX_MESSAGES]))
    assert isinstance(event, SessionAggregate.MessagesAppended)
    assert len(event.entries) == BATCH_MAX_MESSAGES


# -- update / delete / clear ---------------------------------------------------------------------


def test_update_of_existing_message(scenario: Scenario) -> None:
    # Given m1
    scenario.given(append("m1", text="old"))
    # When it is updated
    (event,) = scenario.when(lambda s: s.update_message(msg("m1", "new")))
    # Then MessageUpdated carries the new JSON; the tree is unchanged
    assert isinstance(event, SessionAggregate.MessageUpdated)
    assert event.message_id == "m1"
    assert '"text":"new"' in event.message_json
    assert scenario.load().messages.added() == {"m1": None}


def test_update_of_unknown_message_is_refused(scenario: Scenario) -> None:
    # Given m1
    scenario.given(append("m1"))
    # When an unknown id is updated → MessageNotFoundError, nothing decided
    with pytest.raises(MessageNotFoundError, match="ghost"):
        scenario.when(lambda s: s.update_message(msg("ghost")))
    # And a malformed update → InvalidInputError
    with pytest.raises(InvalidInputError):
        scenario.when(lambda s: s.update_message({"id": "m1", "role": "user", "parts": None}))
    assert scenario.load().version == 1


def test_delete_ignores_unknown_and_duplicate_ids(scenario: Scenario) -> None:
    # Given m1 → m2
    scenario.given(append("m1"), append("m2"))
    # When ids with unknowns, duplicates and non-strings are deleted
    (event,) = scenario.when(lambda s: s.delete_messages(["nope", "m2", "m2", 3, None]))
    # Then only the existing id is deleted, once
    assert isinstance(event, SessionAggregate.MessagesDeleted)
    assert event.message_ids == ["m2"]
    # And deleting only unknown ids decides nothing
    assert scenario.when(lambda s: s.delete_messages(["nope"])) == []
    assert scenario.when(lambda s: s.delete_messages([])) == []


def test_delete_with_a_string_or_a_non_list_is_refused(scenario: Scenario) -> None:
    scenario.given(append("m1"))
    with pytest.raises(InvalidInputError, match=r"^ids must be a list of message ids, not str$"):
        scenario.when(lambda s: s.delete_messages("m1"))
    with pytest.raises(InvalidInputError, match="not NoneType"):
        scenario.when(lambda s: s.delete_messages(None))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="not dict"):  # not its keys
        scenario.when(lambda s: s.delete_messages({"m1": 1}))
    assert scenario.load().version == 1


def test_deleting_the_tip_makes_its_parent_the_latest_leaf(scenario: Scenario) -> None:
    # Given m0 → m1 → m2
    scenario.given(append("m0"), append("m1"), append("m2"))
    # When the tip is deleted
    scenario.when(lambda s: s.delete_messages(["m2"]))
    # Then m1 is the latest leaf and the next omitted-parent append goes under it
    assert scenario.load().latest_leaf == "m1"
    (event,) = scenario.when(append("m3"))
    assert isinstance(event, SessionAggregate.MessageAppended)
    assert event.parent_id == "m1"


def test_deleting_an_interior_message_keeps_the_tip(scenario: Scenario) -> None:
    # Given m0 → m1 → m2
    scenario.given(append("m0"), append("m1"), append("m2"))
    # When the interior m1 is deleted
    scenario.when(lambda s: s.delete_messages(["m1"]))
    # Then m2 (whose parent is now missing) stays the latest leaf
    state = scenario.load()
    assert state.latest_leaf == "m2"
    assert state.messages.added() == {"m0": None, "m2": "m1"}


def test_reappending_a_deleted_id_under_its_descendant_is_refused(scenario: Scenario) -> None:
    # Given m0 → m1 → m2 with m1 deleted (m2 still points at "m1")
    scenario.given(append("m0"), append("m1"), append("m2"), lambda s: s.delete_messages(["m1"]))
    # When "m1" is appended again under the latest leaf m2 (a loop m1 → m2 → m1)
    # Then it is refused
    with pytest.raises(InvalidInputError, match="own ancestor"):
        scenario.when(append("m1"))
    with pytest.raises(InvalidInputError, match="own ancestor"):
        scenario.when(lambda s: s.append_messages([msg("x"), msg("m1")], "m2"))
    # But under m0 it is a fine re-append, and m2 hangs under it again
    (event,) = scenario.when(append("m1", "m0"))
    assert isinstance(event, SessionAggregate.MessageAppended)
    assert scenario.load().latest_leaf == "m2"


def test_clear_forgets_every_message(scenario: Scenario) -> None:
    # Given m1 → m2
    scenario.given(append("m1"), append("m2"))
    # When the session is cleared
    (event,) = scenario.when(lambda s: s.clear_messages())
    # Then MessagesCleared, and ids can be used again as new roots
    assert isinstance(event, SessionAggregate.MessagesCleared)
    state = scenario.load()
    assert (state.messages.added(), state.latest_leaf) == ({}, None)
    (again,) = scenario.when(append("m1"))
    assert isinstance(again, SessionAggregate.MessageAppended)
    assert again.parent_id is None


# -- compactions ------------------------------------------------------------------------------


def test_add_compaction_decides_an_overlay_with_a_fresh_id(scenario: Scenario) -> None:
    # Given m0 → m1
    scenario.given(append("m0"), append("m1"))
    # When two compactions are added (endpoints are not validated)
    (first,) = scenario.when(lambda s: s.add_compaction("summary", "m0", "m1"))
    (second,) = scenario.when(lambda s: s.add_compaction("", "ghost", "m1"))
    # Then each is a CompactionAdded with its own id
    assert isinstance(first, SessionAggregate.CompactionAdded)
    assert isinstance(second, SessionAggregate.CompactionAdded)
    assert (first.summary, first.from_message_id, first.to_message_id) == ("summary", "m0", "m1")
    assert first.compaction_id != second.compaction_id
    assert scenario.load().version == 4


@pytest.mark.parametrize(
    ("summary", "from_id", "to_id", "match"),
    [
        (None, "a", "b", "summary must be a string"),
        ("s", "", "b", "from_message_id"),
        ("s", "a", 5, "to_message_id"),
        ("s", "a", "b" * 257, "to_message_id"),
        ("x" * MESSAGE_MAX_BYTES, "a", "b", "limit is"),
        ("bad \ud800", "a", "b", "Unicode"),
    ],
)
def test_bad_compactions_are_refused(
    scenario: Scenario, summary: object, from_id: object, to_id: object, match: str
) -> None:
    with pytest.raises(InvalidInputError, match=match):
        scenario.when(lambda s: s.add_compaction(summary, from_id, to_id))
    assert scenario.load().version == 0
