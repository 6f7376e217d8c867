"""The synchronous client (issue 15, item 4): ``connect_sync`` gives the async API without
``await`` from plain code, from threads and from inside a running event loop, through one
implementation (a proxy), never a hand-written twin."""

from __future__ import annotations

import asyncio
import gc
import inspect
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import memstream
from memstream.agent_memory import AgentMemory, Profile
from memstream.client import Memstream
from memstream.domain.errors import InvalidInputError, UnavailableError
from memstream.session import Session
from memstream.session_manager import SessionManager
from memstream.settings import Settings
from memstream.sync import SyncMemstream, SyncProxy, connect_sync

pytestmark = pytest.mark.both_backends


def _loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "memstream-sync" and t.is_alive()]


def test_a_plain_script_uses_sessions_manager_and_memory_without_await(settings: Settings) -> None:
    assert asyncio.get_event_loop_policy()  # (no loop runs in this thread)
    with connect_sync(settings=settings, workers=True) as ms:
        assert isinstance(ms, SyncMemstream)
        session = ms.session("chat")
        seq = session.append_message({"id": "m1", "role": "user", "content": "Tram 28 to Belém"})
        assert isinstance(seq, int)
        session.append_messages(
            [{"id": "m2", "role": "assistant", "content": None, "tool_calls": []}]
        )
        assert [m["id"] for m in session.get_history()] == ["m1", "m2"]
        assert [h["id"] for h in session.search("tram")] == ["m1"]
        with pytest.raises(InvalidInputError, match="message 'x' role must be a string"):
            session.append_message({"id": "x", "parts": []})
        manager = ms.session_manager()
        assert isinstance(manager, SyncProxy)
        created = manager.create("Lisbon trip")
        assert [s["name"] for s in manager.list()] == ["Lisbon trip"]
        assert manager.get(created["id"])["name"] == "Lisbon trip"
        profile = ms.agent_memory().get_profile("alice")
        stored = profile.remember("Alice prefers answers in French")
        assert profile.get(stored["id"])["summary"] == stored["summary"]
        # settings and other plain attributes come through as they are
        assert ms.settings.stream == settings.stream
    with pytest.raises(UnavailableError, match="closed"):
        ms.session("chat").get_history()
    assert _loop_threads() == []


async def test_it_works_from_inside_a_running_event_loop(settings: Settings) -> None:
    # a notebook cell or an async framework calling code written for the sync API
    ms = connect_sync(settings=settings, workers=True)
    try:
        ms.session("nb").append_message({"id": "a", "role": "user", "content": "hello"})
        assert [m["id"] for m in ms.session("nb").get_history()] == ["a"]
        await asyncio.sleep(0)  # this loop was never blocked for good
    finally:
        ms.close()
        ms.close()  # closing twice is harmless


def test_many_threads_share_one_client(settings: Settings) -> None:
    with connect_sync(settings=settings, workers=True) as ms:

        def write(n: int) -> int:
            session = ms.session(f"t{n % 4}")
            return int(session.append_message({"id": f"m{n}", "role": "user", "content": f"n {n}"}))

        with ThreadPoolExecutor(8) as pool:
            sequences = list(pool.map(write, range(40)))
        assert len(set(sequences)) == 40
        ids = {m["id"] for n in range(4) for m in ms.session(f"t{n}").get_history()}
        assert ids == {f"m{n}" for n in range(40)}


def test_subscribe_is_a_plain_iterator(settings: Settings) -> None:
    with connect_sync(settings=settings, workers=True) as ms:
        session = ms.session("live")
        first = session.append_message({"id": "m1", "role": "user", "content": "one"})
        session.append_message({"id": "m2", "role": "user", "content": "two"})
        events = session.subscribe(after_seq=first - 1)
        seen = [next(events).message_id, next(events).message_id]
        events.close()
        assert seen == ["m1", "m2"]


def test_an_unclosed_client_is_closed_when_collected(settings: Settings) -> None:
    ms = connect_sync(settings=settings, workers=True)
    ms.session("x").append_message({"id": "m", "role": "user", "content": "x"})
    assert len(_loop_threads()) == 1
    del ms
    gc.collect()
    assert _loop_threads() == []


def test_a_failed_connect_leaves_no_thread(tmp_path: object) -> None:
    with pytest.raises(UnavailableError):
        connect_sync(nats_url="nats://127.0.0.1:1", data_dir=str(tmp_path))
    assert _loop_threads() == []


@pytest.mark.parametrize("cls", [Memstream, Session, SessionManager, AgentMemory, Profile])
def test_every_async_method_is_in_the_sync_api_by_construction(cls: type) -> None:
    """The proxy forwards by name, so the sync API is the async one: every public coroutine
    method of each API class is called through it without ``await`` (no list to keep)."""
    public = [
        name
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_")
        and (inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member))
    ]
    assert public, cls
    assert "connect_sync" in memstream.__all__
    assert not [
        name for name in vars(SyncProxy) if not name.startswith("_") and name in public
    ]  # nothing hand-written over a method of the async API
