"""Every limit and bad input of the Session API, through the log.

A refused command raises the documented error (``InvalidInputError`` or
``MessageNotFoundError``) and writes nothing: the log and the read models are unchanged
("no partial write"). Search never surfaces a database error, whatever the query text.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import pytest
from support.messages import msg

from memstream.client import Memstream
from memstream.domain.errors import InvalidInputError, MessageNotFoundError
from memstream.domain.limits import MESSAGE_MAX_BYTES, SEARCH_QUERY_MAX_BYTES
from memstream.domain.session import OMITTED
from memstream.session import Session

# Every behaviour here holds on both read-model backends (issue 14).
pytestmark = pytest.mark.both_backends


def sized(message_id: str, size: int, char: str = "x") -> dict[str, Any]:
    """A one-text-part message whose canonical JSON is exactly ``size`` bytes: ASCII ``char``
    repeated (its JSON escape may take several bytes), padded with ``x``."""
    empty = json.dumps(msg(message_id, ""), separators=(",", ":"))
    per_char = len(json.dumps(char)) - 2
    count, remainder = divmod(size - len(empty), per_char)
    return msg(message_id, char * count + "x" * remainder)


async def snapshot(ms: Memstream, session: Session) -> tuple[Any, ...]:
    """Everything a refused command must leave alone: the log end and the session's reads."""
    stream = await ms.core.log.js.stream_info(ms.settings.stream)
    return (
        stream.state.last_seq,
        await session.get_history(),
        await session.get_compactions(),
        await session.get_history_row_stats(),
        await session.search("text"),
    )


@pytest.fixture
async def session(ms: Memstream) -> Session:
    """A session holding m0 → m1."""
    s = ms.session("limits")
    await s.append_message(msg("m0", "text of m0"))
    await s.append_message(msg("m1", "text of m1"))
    return s


DEEP = functools.reduce(lambda inner, _: [inner], range(100_000), [])  # a list 100,000 deep

BAD_MESSAGES: list[tuple[str, object, object, type[Exception], str]] = [
    ("oversized JSON", sized("m9", MESSAGE_MAX_BYTES + 1), OMITTED, InvalidInputError,
     "limit is 1048576"),
    ("oversized by escaping", sized("m9", MESSAGE_MAX_BYTES + 1, '"'), OMITTED,
     InvalidInputError, "limit is 1048576"),
    ("empty id", msg(""), OMITTED, InvalidInputError, "minimum is 1"),
    ("257-char id", msg("i" * 257), OMITTED, InvalidInputError, "257 characters; the limit is 256"),
    ("non-string id", {"id": 1, "role": "user", "parts": []}, OMITTED, InvalidInputError,
     "must be a string"),
    ("not a dict", "hello", OMITTED, InvalidInputError, "must be a dict"),
    ("a list", [msg("x")], OMITTED, InvalidInputError, "must be a dict"),
    ("None", None, OMITTED, InvalidInputError, "must be a dict"),
    ("parts not a list", {"id": "x", "role": "user", "parts": "hi"}, OMITTED, InvalidInputError,
     "message 'x' parts must be a list, not str"),
    ("parts missing", {"id": "x", "role": "user"}, OMITTED, InvalidInputError,
     "message 'x' parts must be a list, not missing"),
    ("part not a dict", {"id": "x", "role": "user", "parts": ["hi"]}, OMITTED, InvalidInputError,
     "message 'x' part 0 must be a dict, not str"),
    ("role not a string", {"id": "x", "role": None, "parts": []}, OMITTED, InvalidInputError,
     "message 'x' role must be a string, not NoneType"),
    ("role missing", {"id": "x", "parts": []}, OMITTED, InvalidInputError,
     "message 'x' role must be a string, not missing"),
    ("chat content not a string", {"id": "x", "role": "user", "content": 5}, OMITTED,
     InvalidInputError, "message 'x' content must be a string, not int"),
    ("nested too deeply", {**msg("x"), "deep": DEEP}, OMITTED, InvalidInputError,
     "message 'x' is nested too deeply to be stored as JSON"),
    ("NaN", {**msg("x"), "score": math.nan}, OMITTED, InvalidInputError, "not JSON"),
    ("infinity", {**msg("x"), "score": -math.inf}, OMITTED, InvalidInputError, "not JSON"),
    ("object", {**msg("x"), "extra": object()}, OMITTED, InvalidInputError, "not JSON"),
    ("set", {**msg("x"), "extra": {1}}, OMITTED, InvalidInputError, "not JSON"),
    ("bytes", {**msg("x"), "extra": b"raw"}, OMITTED, InvalidInputError, "not JSON"),
    ("tuple key", {**msg("x"), "extra": {(1, 2): 3}}, OMITTED, InvalidInputError, "not JSON"),
    ("lone surrogate text", msg("x", "bad \ud83d"), OMITTED, InvalidInputError,
     "message 'x' is not valid Unicode: it holds a lone surrogate"),
    ("lone surrogate id", msg("x\udc00"), OMITTED, InvalidInputError, "Unicode"),
    ("unknown parent", msg("x"), "ghost", MessageNotFoundError, "ghost"),
    ("parent from nowhere", msg("x"), "", MessageNotFoundError, "does not exist"),
    ("non-string parent", msg("x"), 5, InvalidInputError, "parent_id"),
]  # fmt: skip


async def test_bad_messages_are_refused_and_nothing_is_written(
    ms: Memstream, session: Session
) -> None:
    # Given m0 → m1
    before = await snapshot(ms, session)
    for label, message, parent, error, match in BAD_MESSAGES:
        # When a bad message is appended (alone, or inside a batch with a good one)
        with pytest.raises(error, match=match):
            await session.append_message(message, parent)  # type: ignore[arg-type]
        with pytest.raises(error, match=match) as raised:
            await session.append_messages([msg("good"), message], parent)  # type: ignore[list-item]
        if parent is OMITTED:  # a message's own fault: the error says which one it was
            assert str(raised.value).startswith("messages[1] of 2: "), label
        # Then the documented error is raised and nothing changed
        assert await snapshot(ms, session) == before, label
    assert await session.get_message("good") is None
    assert await session.get_message("x") is None


async def test_bad_updates_are_refused_and_nothing_is_written(
    ms: Memstream, session: Session
) -> None:
    before = await snapshot(ms, session)
    for label, message, parent, error, match in BAD_MESSAGES:
        if parent is not OMITTED:
            continue
        # When a bad message is given as an update, it is refused for its shape (checked
        # before whether the id exists) ...
        with pytest.raises(error, match=match):
            await session.update_message(message)  # type: ignore[arg-type]
        # ... also when it targets the existing m1 (unless the id itself is what is bad)
        if isinstance(message, dict) and not label.endswith(" id"):
            with pytest.raises(error, match=match.replace("'x'", "'m1'")):
                await session.update_message({**message, "id": "m1"})
        # Then nothing changed
        assert await snapshot(ms, session) == before, label


async def test_update_of_an_unknown_id_leaves_no_orphan_search_row(
    ms: Memstream, session: Session
) -> None:
    before = await snapshot(ms, session)
    # When an unknown id is updated with searchable text
    with pytest.raises(MessageNotFoundError, match="ghost"):
        await session.update_message(msg("ghost", "orphanword"))
    # Then nothing was written, and no search (in the session or across sessions) finds it
    assert await snapshot(ms, session) == before
    assert await session.search("orphanword") == []
    assert ms.core.reads.session_queries.search(ms.namespace, None, "orphanword", 20) == []
    assert await session.get_message("ghost") is None


async def test_message_limits_accept_their_boundaries(ms: Memstream, session: Session) -> None:
    # When messages at the id boundaries and a large (~1 MB) message are appended
    await session.append_message(msg("i" * 256))
    await session.append_message(msg("j"))
    await session.append_message(sized("large", 1_000_000))
    # Then they are stored intact
    assert await session.get_message("i" * 256) == msg("i" * 256)
    assert [m["id"] for m in (await session.get_history())[2:]] == ["i" * 256, "j", "large"]
    assert await session.get_message("large") == sized("large", 1_000_000)


async def test_a_message_of_exactly_1_mib_is_accepted(ms: Memstream, session: Session) -> None:
    # Given the documented limit "≤ 1 MiB JSON"
    # When a message of exactly 1 MiB of JSON is appended (and one full of quotes, which
    # doubles in size when escaped inside the event)
    await session.append_message(sized("edge", MESSAGE_MAX_BYTES))
    await session.append_message(sized("quotes", MESSAGE_MAX_BYTES, '"'))
    # Then both are stored intact
    assert await session.get_message("edge") == sized("edge", MESSAGE_MAX_BYTES)
    assert await session.get_message("quotes") == sized("quotes", MESSAGE_MAX_BYTES, '"')


async def test_bad_session_ids_are_refused(ms: Memstream) -> None:
    stream_before = (await ms.core.log.js.stream_info(ms.settings.stream)).state.last_seq
    for session_id, match in [
        ("s" * 257, "257 characters; the limit is 256"),
        ("a\x00b", "NUL"),
        ("\x00", "NUL"),
        ("bad\ud800", "Unicode"),
        (5, "must be a string"),
        (None, "must be a string"),
    ]:
        # When a session with a bad id is built, or a builder is switched to one
        with pytest.raises(InvalidInputError, match=match):
            ms.session(session_id)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match=match):
            ms.session("ok").for_session(session_id)  # type: ignore[arg-type]
    # Then nothing was written to the log
    assert (await ms.core.log.js.stream_info(ms.settings.stream)).state.last_seq == stream_before


async def test_bad_deletes_and_compactions_are_refused(ms: Memstream, session: Session) -> None:
    before = await snapshot(ms, session)
    # When deletes get a string or a non-list
    for ids in ("m1", None, 5, {"m1": True}):
        with pytest.raises(InvalidInputError, match=r"^ids must be a list of message ids, not "):
            await session.delete_messages(ids)  # type: ignore[arg-type]
    # When compactions get bad arguments
    for args, match in [
        ((None, "m0", "m1"), "summary"),
        (("s", "", "m1"), "from_message_id"),
        (("s", "m0", None), "to_message_id"),
        (("s", "m0", "t" * 257), "to_message_id"),
        (("x" * (MESSAGE_MAX_BYTES + 1), "m0", "m1"), "limit is 1048576"),
        (("bad \udfff", "m0", "m1"), "Unicode"),
    ]:
        with pytest.raises(InvalidInputError, match=match):
            await session.add_compaction(*args)  # type: ignore[arg-type]
    # Then nothing changed
    assert await snapshot(ms, session) == before


async def test_reappending_a_deleted_id_under_its_descendant_is_refused(
    ms: Memstream, session: Session
) -> None:
    # Given m0 → m1 → m2 with m1 deleted (m2 still names "m1" as its parent)
    await session.append_message(msg("m2"))
    await session.delete_messages(["m1"])
    before = await snapshot(ms, session)
    # When "m1" is appended again under the latest leaf m2 (a loop m1 → m2 → m1)
    with pytest.raises(InvalidInputError, match="own ancestor"):
        await session.append_message(msg("m1"))
    # Then nothing was written and m2's path still starts at itself
    assert await snapshot(ms, session) == before
    assert [m["id"] for m in await session.get_history("m2")] == ["m2"]


async def test_bad_read_arguments_are_invalid_input(session: Session) -> None:
    # When reads get non-string ids or bad budgets → InvalidInputError
    with pytest.raises(InvalidInputError, match=r"^id must be a string, not int"):
        await session.get_message(5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="message_id"):
        await session.get_branches(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="leaf_id"):
        await session.get_history(7)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="leaf_id"):
        await session.get_path_length(object())  # type: ignore[arg-type]
    for budget in (-1, 1.5, "10", True, None):
        with pytest.raises(InvalidInputError, match="max_content_bytes"):
            await session.get_recent_history(budget)  # type: ignore[arg-type]
    for minimum in (math.nan, math.inf, "2", None, False):
        with pytest.raises(InvalidInputError, match="min_recent_messages"):
            await session.get_recent_history(100, minimum)  # type: ignore[arg-type]
    # And odd but well-typed ids read as nothing
    for odd in (
        "ghost",
        "a\x00b",
        "x" * 10_000,
        "😀",
        "'; DROP TABLE messages; --",
        "\ud800",
        "a\udc00b",
    ):
        assert await session.get_history(odd) == []
        assert await session.get_message(odd) is None
        assert await session.get_branches(odd) == []
        assert await session.get_path_length(odd) == 0
    # And the session still reads normally
    assert [m["id"] for m in await session.get_history()] == ["m0", "m1"]


FTS_SYNTAX = [
    '"', '""', '"""', "*", "a*", "NEAR(", "NEAR(a b)", "NEAR(a b, 3)", "OR", "a OR", "OR a",
    "-", "-a", "--a", "a -", "AND", "a AND b", "NOT", "a NOT b", "^", "^text", ":", "text:foo",
    "content:text", "{a b}", "{text}:foo", "(", ")", "(text", "text)", "+text", "'", "`",
    "\\", "\x00", "te\x00xt", '"unbalanced', 'text "unbalanced', "😀", "text 😀", "🐈‍⬛",
    "\u200b", "\ufeff", "%", "_", "[a]", "a;b", "a|b", "a&b", "a=b", "!", "?", "text*text",
    "x" * 1000, "text " * 800, "OR " * 1000, "a OR " * 800, '"' * 3000, "-" * 4000,
    "(" * 4000, "NEAR(" * 800, "ß", "İstanbul", "日本語", "ｔｅｘｔ", "١٢٣",
    "text \ud800", "\udfff", "te\udc00xt", "x" * 5000, "text " * 2048, "日本語" * 500,
]  # fmt: skip


async def test_any_search_text_gives_results_never_an_error(
    ms: Memstream, session: Session
) -> None:
    # Given messages with plain, punctuated, NUL-bearing and unicode text
    await session.append_message(msg("m2", 'text with a\x00nul and NEAR(x) OR "quotes" ^ : {}'))
    await session.append_message(msg("m3", "İstanbul ß 日本語 text"))
    for query in FTS_SYNTAX:
        # When each awkward query is searched
        try:
            results = await session.search(query)
        except Exception as error:  # pragma: no cover - any error fails the test
            pytest.fail(f"{type(error).__name__} for {query!r}: {error}")
        # Then it is a (possibly empty) list of well-formed hits (spec Part A.5)
        assert isinstance(results, list), query
        for hit in results:
            assert set(hit) == {"id", "role", "content", "created_at"}, query
    # And a plain query still works afterwards
    assert sorted(h["id"] for h in await session.search("text")) == ["m0", "m1", "m2", "m3"]


async def test_search_query_size_limit(session: Session) -> None:
    # Given a session where "text" matches every message
    assert len(await session.search("text")) == 2
    # When a query over 4 KiB is searched, even one whose first terms match → no results
    assert await session.search("text " * 2048) == []
    assert await session.search("text " + "é" * 2046) == []  # 4097 bytes in 2,051 characters
    # And a query of exactly 4096 bytes is searched normally
    exact = "text " + "x" * (SEARCH_QUERY_MAX_BYTES - 5)
    assert len(exact.encode()) == SEARCH_QUERY_MAX_BYTES
    assert await session.search(exact) == []  # "x…x" matches nothing: AND
    assert len(await session.search("text OR " + "x" * (SEARCH_QUERY_MAX_BYTES - 8))) == 2
    # And a lone surrogate separates words like any other non-letter (no stored text has one)
    assert len(await session.search("text \ud800")) == 2
    assert len(await session.search("te\udc00xt")) == 0  # "te" AND "xt"
    # And the limit argument is still checked by name
    with pytest.raises(InvalidInputError, match="limit is 501; it must be between 1 and 500"):
        await session.search("text", limit=501)
    with pytest.raises(InvalidInputError, match="query must be a string"):
        await session.search(None)  # type: ignore[arg-type]
