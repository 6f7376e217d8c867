"""A pytest plugin that runs the frameworks' own session/history tests on memstream.

Loaded with ``-p support.framework_plugin`` (``PYTHONPATH`` holding this repo's ``tests``
folder) by a pytest run over the test folder of a framework's published source distribution
(see :mod:`support.framework_suites` and ``tests/integration/test_framework_suites.py``).
Nothing is written into their tree.

It changes only the constructors their tests call: in the test files named in
:data:`REPLACED`, the class a test builds its session or history with is replaced, in that
module's namespace, by a factory returning memstream's adapter —
:class:`~memstream.integrations.openai_agents.MemstreamSession` or
:class:`~memstream.integrations.langchain.MemstreamChatMessageHistory` — on one embedded
memstream platform started for the whole run. The test bodies, their fixtures and the
frameworks' own code are untouched.

Two constructions share data exactly when the framework's would: those naming the same
database file, engine or Redis client (and session id) map to the same memstream session;
an in-memory one (``":memory:"``, ``SimpleListSession``, ``InMemoryChatMessageHistory``) is a
session of its own.

The adapters do not have the backend-specific lifecycle members of the classes they stand in
for, which are no part of the ``Session`` protocol: the tests call them in their cleanup. The
factory gives the adapter it returns just these, as the replaced class has them, and they do
nothing of memstream's: ``close()`` (sync for ``SQLiteSession``, async for
``AsyncSQLiteSession`` and ``RedisSession``) and ``engine`` (``SQLAlchemySession``: the engine
the test passed, or the one ``from_url`` would have made, which the test disposes of).

Tests that look inside the replaced backend (its SQLite tables, connections, locks, engine
or Redis keys) or at the replaced class itself are skipped, each with its reason, in
:data:`SKIPPED`.

Environment:
    ``MEMSTREAM_SUITE_DATA_DIR``: the platform's data dir (default: a temporary one).
    ``MEMSTREAM_SUITE_CLIENT``: ``sync`` (default): the adapters get one
    :func:`memstream.connect_sync` client, whose event loop runs in a thread of its own, as
    tests that each run their own event loop (and threads that each run one) call for.
    ``async``: they get the async client of :func:`memstream.connect`, connected on an event
    loop in a thread of its own, and are called from the tests' loops and threads.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# -- what is replaced ------------------------------------------------------------------------

# The test file (as in the test ids) -> {name in its module's namespace: the factory that
# replaces it}.
REPLACED: dict[str, dict[str, str]] = {
    "tests/memory/test_session.py": {"SQLiteSession": "sqlite"},
    "tests/memory/test_session_limit.py": {"SQLiteSession": "sqlite"},
    "tests/extensions/memory/test_async_sqlite_session.py": {"AsyncSQLiteSession": "async_sqlite"},
    "tests/test_hitl_session_scenario.py": {"SimpleListSession": "list"},
    "tests/extensions/memory/test_redis_session.py": {"RedisSession": "redis"},
    "tests/extensions/memory/test_sqlalchemy_session.py": {"SQLAlchemySession": "sqlalchemy"},
    "tests/unit_tests/chat_history/test_chat_history.py": {
        "InMemoryChatMessageHistory": "langchain"
    },
    "tests/unit_tests/runnables/test_history.py": {"InMemoryChatMessageHistory": "langchain"},
}

# -- what is skipped, and why --------------------------------------------------------------

_SQLITE_ROWS = "writes or reads rows of the SDK's own SQLite tables (raw SQL on its connection)"
_SQLITE_FILE = "probes the SDK's SQLite file directly (drops its tables, takes its write lock)"
_SQLITE_CONNECTIONS = "inspects SQLiteSession's per-thread sqlite3 connections (_connections)"
_SQLITE_LOCK = "inspects SQLiteSession's process-wide file locks (_lock, _file_lock_counts)"
_CLOSED = (
    "checks the closed state of the SDK class after close(), a backend lifecycle member "
    "that is no part of the Session protocol (the adapter's close() is a no-op stand-in)"
)
_INJECTED = (
    "injects a failing or pausing sqlite3/aiosqlite connection into the SDK class "
    "(_get_connection, commit, rollback, close) to test its transaction handling"
)
_SUBCLASS = "subclasses the SDK class to fail its connection setup (_init_db_for_connection)"
_AIOSQLITE = "monkeypatches aiosqlite to test AsyncSQLiteSession's connection startup"
_FAKE_CLIENT = (
    "asserts on what OpenAIConversationsSession sent to its fake OpenAI client "
    "(stored_items): a test of that class, which constructs no replaced session"
)
_SQLALCHEMY = "tests SQLAlchemySession's own SQL (statement log, dialect flags, _init_lock)"
_REDIS = "tests RedisSession's handling of its own Redis key types"
_CLASS_DOC = "checks the class's docstring (its deprecation notice), not a history"
_VALUE_EQUALITY = (
    "compares histories by value (store == {id: InMemoryChatMessageHistory(messages=...)}: "
    "the in-memory class is a pydantic model); an adapter is a handle on a stored session, "
    "equal only to itself. The turns these tests check before that are checked by the others"
)

SKIPPED: dict[str, str] = {
    # OpenAI Agents SDK: tests/memory/test_session.py
    "tests/memory/test_session.py::test_sqlite_session_close_closes_worker_thread_connections": (
        _SQLITE_CONNECTIONS
    ),
    "tests/memory/test_session.py::test_sqlite_session_reaps_connections_from_exited_worker_threads": (  # noqa: E501
        _SQLITE_CONNECTIONS
    ),
    "tests/memory/test_session.py::test_sqlite_session_closes_retired_connections_before_the_next_allocation": (  # noqa: E501
        _SQLITE_CONNECTIONS
    ),
    "tests/memory/test_session.py::test_sqlite_session_keeps_connections_of_live_worker_threads": (
        _SQLITE_CONNECTIONS
    ),
    "tests/memory/test_session.py::test_sqlite_session_closed_rejects_empty_add_items": _CLOSED,
    "tests/memory/test_session.py::test_sqlite_session_pop_item_skips_corrupt_most_recent": (
        _SQLITE_ROWS
    ),
    "tests/memory/test_session.py::test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": (  # noqa: E501
        _SQLITE_ROWS
    ),
    "tests/memory/test_session.py::test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": (
        _SQLITE_ROWS
    ),
    "tests/memory/test_session.py::test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": (  # noqa: E501
        _SQLITE_ROWS
    ),
    "tests/memory/test_session.py::test_sqlite_session_file_lock_is_shared_across_instances": (
        _SQLITE_LOCK
    ),
    "tests/memory/test_session.py::test_sqlite_session_failed_add_items_releases_write_lock": (
        _SQLITE_FILE
    ),
    "tests/memory/test_session.py::test_sqlite_session_failed_clear_session_rolls_back": (
        _SQLITE_FILE
    ),
    "tests/memory/test_session.py::test_sqlite_session_failed_pop_item_releases_write_lock": (
        _SQLITE_FILE
    ),
    "tests/memory/test_session.py::test_sqlite_session_rollback_failure_evicts_connection": (
        _INJECTED
    ),
    "tests/memory/test_session.py::test_sqlite_session_close_retries_quarantined_connection": (
        _INJECTED
    ),
    "tests/memory/test_session.py::test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": (  # noqa: E501
        _INJECTED
    ),
    # tests/extensions/memory/test_async_sqlite_session.py
    "tests/extensions/memory/test_async_sqlite_session.py::test_async_sqlite_session_pop_item_skips_corrupt_most_recent": (  # noqa: E501
        _SQLITE_ROWS
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_async_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": (  # noqa: E501
        _SQLITE_ROWS
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_async_sqlite_session_get_items_limit_skips_corrupt_newest_rows": (  # noqa: E501
        _SQLITE_ROWS
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_async_sqlite_session_get_items_same_timestamp_consistent_order": (  # noqa: E501
        _SQLITE_ROWS
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_async_sqlite_session_pop_item_same_timestamp_returns_latest": (  # noqa: E501
        _SQLITE_ROWS
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_async_sqlite_session_closed_operations_raise_runtime_error": (  # noqa: E501
        _CLOSED
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_async_sqlite_session_closed_rejects_empty_add_items": (  # noqa: E501
        _CLOSED
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_async_sqlite_session_close_before_use_is_terminal": (  # noqa: E501
        _CLOSED
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_async_sqlite_session_close_is_idempotent": (  # noqa: E501
        _CLOSED
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_cancelled_close_finishes_cleanup_and_propagates_cancellation": (  # noqa: E501
        _INJECTED
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_post_commit_cancellation_propagates_after_known_mutation_outcome": (  # noqa: E501
        _INJECTED
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_failed_add_items_rolls_back_and_reuses_connection": (  # noqa: E501
        _SQLITE_FILE
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_failed_clear_session_rolls_back": (
        _SQLITE_FILE
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_failed_pop_item_releases_write_lock": (  # noqa: E501
        _SQLITE_FILE
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_failed_initialization_closes_candidate_connection": (  # noqa: E501
        _SUBCLASS
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_initialization_retries_transient_wal_lock": (  # noqa: E501
        _AIOSQLITE
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_initialization_releases_wal_cursor_before_schema_write": (  # noqa: E501
        _SUBCLASS
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_initialization_does_not_retry_unrecoverable_wal_errors": (  # noqa: E501
        _AIOSQLITE
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_cancelled_wal_retry_closes_startup_connection": (  # noqa: E501
        _AIOSQLITE
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_cancelled_add_items_rolls_back_write_transaction": (  # noqa: E501
        _INJECTED
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_operation_failure_then_cancellation_during_rollback": (  # noqa: E501
        _INJECTED
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_rollback_failure_closes_and_evicts_connection": (  # noqa: E501
        _INJECTED
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_close_retries_connection_quarantined_after_rollback_failure": (  # noqa: E501
        _INJECTED
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_close_retries_quarantined_failed_initialization_candidate": (  # noqa: E501
        _SUBCLASS
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_cancelled_initialization_finishes_candidate_close": (  # noqa: E501
        _SUBCLASS
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_initialization_failure_then_cancellation_during_candidate_close": (  # noqa: E501
        _SUBCLASS
    ),
    "tests/extensions/memory/test_async_sqlite_session.py::test_cancelled_connect_closes_eventually_acquired_connection": (  # noqa: E501
        _AIOSQLITE
    ),
    # tests/test_hitl_session_scenario.py
    "tests/test_hitl_session_scenario.py::test_openai_conversations_session_hitl_scenario": (
        _FAKE_CLIENT
    ),
    # the concurrency tests of tests/extensions/memory/test_redis_session.py
    "tests/extensions/memory/test_redis_session.py::test_clear_rechecks_key_types_after_concurrent_replacement": (  # noqa: E501
        _REDIS
    ),
    # the concurrency tests of tests/extensions/memory/test_sqlalchemy_session.py
    "tests/extensions/memory/test_sqlalchemy_session.py::test_sqlite_fallback_reserves_writer_before_tail_claim": (  # noqa: E501
        _SQLALCHEMY
    ),
    "tests/extensions/memory/test_sqlalchemy_session.py::test_pop_item_retries_returning_claim_lost_to_concurrent_delete": (  # noqa: E501
        _SQLALCHEMY
    ),
    "tests/extensions/memory/test_sqlalchemy_session.py::test_add_items_cancelled_waiter_does_not_strand_table_init_lock": (  # noqa: E501
        _SQLALCHEMY
    ),
    # langchain-core: tests/unit_tests/chat_history/test_chat_history.py
    "tests/unit_tests/chat_history/test_chat_history.py::test_chat_history_deprecated[InMemoryChatMessageHistory]": (  # noqa: E501
        _CLASS_DOC
    ),
    # tests/unit_tests/runnables/test_history.py
    "tests/unit_tests/runnables/test_history.py::test_input_messages": _VALUE_EQUALITY,
    "tests/unit_tests/runnables/test_history.py::test_input_messages_async": _VALUE_EQUALITY,
    "tests/unit_tests/runnables/test_history.py::test_using_custom_config_specs": _VALUE_EQUALITY,
    "tests/unit_tests/runnables/test_history.py::test_using_custom_config_specs_async": (
        _VALUE_EQUALITY
    ),
}

# The junit property of each test: how many adapters it constructed (0: it ran without one).
ADAPTERS_PROPERTY = "memstream_adapters"
SKIP_PREFIX = "memstream: "


# -- the platform ----------------------------------------------------------------------------


class Platform:
    """One embedded memstream platform for the whole pytest run, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started = False
        self._own_dir: Path | None = None
        self.mode = os.environ.get("MEMSTREAM_SUITE_CLIENT", "sync")
        if self.mode not in ("sync", "async"):
            raise pytest.UsageError(f"MEMSTREAM_SUITE_CLIENT={self.mode!r}: sync or async")
        self.sync_client: Any = None
        self.async_client: Any = None
        self._loop: Any = None  # memstream.sync.LoopThread (async mode)
        self._context: Any = None

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            from memstream.settings import Settings

            configured = os.environ.get("MEMSTREAM_SUITE_DATA_DIR")
            if configured:
                data_dir = Path(configured)
            else:
                data_dir = self._own_dir = Path(tempfile.mkdtemp(prefix="memstream-suite-"))
            settings = Settings(data_dir=data_dir)
            if self.mode == "sync":
                from memstream.sync import connect_sync

                self.sync_client = connect_sync(settings=settings)
            else:
                from memstream.client import connect
                from memstream.sync import LoopThread

                self._loop = LoopThread(name="memstream-suite")
                self._context = connect(settings=settings)
                try:
                    self.async_client = self._loop.run(self._context.__aenter__())
                except BaseException:
                    self._loop.stop()
                    raise
            self._started = True

    @property
    def client(self) -> Any:
        self.start()
        return self.sync_client if self.mode == "sync" else self.async_client

    def close(self) -> None:
        with self._lock:
            if self.sync_client is not None:
                self.sync_client.close()
            if self._loop is not None:
                try:
                    self._loop.run(self._context.__aexit__(None, None, None))
                finally:
                    self._loop.stop()
            if self._own_dir is not None:
                shutil.rmtree(self._own_dir, ignore_errors=True)
            self._started = False


PLATFORM = Platform()

# -- counting constructions ------------------------------------------------------------------

_count_lock = threading.Lock()
_constructions = 0


def _constructed_one() -> None:
    global _constructions
    with _count_lock:
        _constructions += 1


def _digest(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:12]


def _unique() -> str:
    return uuid.uuid4().hex


def _session_id(kind: str, sdk_session_id: str, *scope: object) -> str:
    """A memstream session id naming the replaced class's session and its scope (database
    file, engine, client, or a unique token for an in-memory one)."""
    return f"{kind}:{sdk_session_id}@{_digest(kind, *scope)}"


# -- the Agents SDK's sessions ---------------------------------------------------------------


def _agents_session(
    kind: str, sdk_session_id: str, scope: tuple[object, ...], session_settings: Any
) -> Any:
    from memstream.integrations.openai_agents import MemstreamSession

    memstream_id = _session_id(kind, sdk_session_id, *scope)
    session = MemstreamSession(memstream_id, PLATFORM.client, session_settings=session_settings)
    _constructed_one()
    return session


def _database_scope(db_path: Any, messages_table: str) -> tuple[object, ...]:
    if str(db_path) == ":memory:":  # every in-memory SQLiteSession has a database of its own
        return ("memory", _unique())
    return (str(Path(db_path).resolve()), messages_table)


async def _noop_async_close() -> None:
    """The replaced class's ``close()``: nothing of memstream's to close."""


def _noop_close() -> None:
    """The replaced class's ``close()``: nothing of memstream's to close."""


def _sqlite_factory() -> Any:
    from agents import SQLiteSession

    return _database_factory(SQLiteSession, "sqlite", _noop_close)


def _async_sqlite_factory() -> Any:
    from agents.extensions.memory import AsyncSQLiteSession

    return _database_factory(AsyncSQLiteSession, "async-sqlite", _noop_async_close)


def _database_factory(replaced: type, kind: str, close: Any) -> Any:
    """A factory with the signature of ``replaced`` (an SDK session on a database file and
    table) that gives a memstream session scoped by both."""
    signature = inspect.signature(replaced)

    def factory(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        session = _agents_session(
            kind,
            a["session_id"],
            _database_scope(a["db_path"], a["messages_table"]),
            a["session_settings"],
        )
        session.close = close
        return session

    factory.__name__ = f"{replaced.__name__}_"
    return factory


def _list_factory() -> Any:
    """``tests.utils.simple_session.SimpleListSession(session_id, history)``: a list of its
    own, filled with ``history``."""

    def SimpleListSession_(session_id: str = "test", history: Any = None) -> Any:
        session = _agents_session("list", session_id, (_unique(),), None)
        if history:
            _run_in_thread(lambda: session.add_items(list(history)))
        return session

    return SimpleListSession_


class _Redis:
    """``RedisSession(session_id, *, redis_client, key_prefix, ...)`` and its ``from_url``:
    one memstream session per client (or URL), key prefix and session id."""

    def __init__(self) -> None:
        from agents.extensions.memory.redis_session import RedisSession

        self._signature = inspect.signature(RedisSession)
        self._from_url = inspect.signature(RedisSession.from_url)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        scope = ("client", id(a["redis_client"]), a["key_prefix"])
        return self._make(a["session_id"], scope, a["session_settings"])

    def from_url(self, *args: Any, **kwargs: Any) -> Any:
        bound = self._from_url.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        prefix = a["kwargs"].get("key_prefix", "agents:session")
        return self._make(a["session_id"], ("url", a["url"], prefix), a["session_settings"])

    @staticmethod
    def _make(session_id: str, scope: tuple[object, ...], session_settings: Any) -> Any:
        session = _agents_session("redis", session_id, scope, session_settings)
        session.close = _noop_async_close
        return session


class _SQLAlchemy:
    """``SQLAlchemySession(session_id, *, engine, ...)`` and its ``from_url``: one memstream
    session per database (an in-memory database: per engine) and session id; the adapter's
    ``engine`` is the test's, or the one ``from_url`` would have made (it connects to nothing
    until used: the test only disposes of it)."""

    def __init__(self) -> None:
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

        self._signature = inspect.signature(SQLAlchemySession)
        self._from_url = inspect.signature(SQLAlchemySession.from_url)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        engine = a["engine"]
        return self._make(a["session_id"], engine, _engine_scope(engine, a["messages_table"]), a)

    def from_url(self, *args: Any, **kwargs: Any) -> Any:
        from sqlalchemy.ext.asyncio import create_async_engine

        bound = self._from_url.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        engine = create_async_engine(a["url"], **(a["engine_kwargs"] or {}))
        table = a["kwargs"].get("messages_table", "agent_messages")
        return self._make(a["session_id"], engine, _engine_scope(engine, table), a)

    @staticmethod
    def _make(session_id: str, engine: Any, scope: tuple[object, ...], a: dict[str, Any]) -> Any:
        session = _agents_session("sqlalchemy", session_id, scope, a["session_settings"])
        session.engine = engine
        return session


def _engine_scope(engine: Any, messages_table: str) -> tuple[object, ...]:
    database = engine.url.database
    if not database or database == ":memory:":  # an in-memory database: the engine's own
        return ("engine", id(engine), messages_table)
    return (engine.url.render_as_string(hide_password=True), messages_table)


def _run_in_thread(start: Callable[[], Any]) -> None:
    """Run ``start()``'s coroutine to its end on a new event loop in a thread of its own (a
    construction in a test that may be running its own loop)."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(start())
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=run, name="memstream-suite-fill")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


# -- LangChain's history ---------------------------------------------------------------------


def _langchain_factory() -> Any:
    def InMemoryChatMessageHistory_(*, messages: Any = None) -> Any:
        """``InMemoryChatMessageHistory(messages=[...])``: a history of its own."""
        from memstream.integrations.langchain import MemstreamChatMessageHistory

        memstream_id = _session_id("langchain", "history", _unique())
        history = MemstreamChatMessageHistory(memstream_id, PLATFORM.client)
        _constructed_one()
        if messages:
            history.add_messages(list(messages))
        return history

    return InMemoryChatMessageHistory_


FACTORIES: dict[str, Callable[[], Any]] = {
    "sqlite": _sqlite_factory,
    "async_sqlite": _async_sqlite_factory,
    "list": _list_factory,
    "redis": _Redis,
    "sqlalchemy": _SQLAlchemy,
    "langchain": _langchain_factory,
}
_made: dict[str, Any] = {}


def _factory(kind: str) -> Any:
    if kind not in _made:
        _made[kind] = FACTORIES[kind]()
    return _made[kind]


# -- hooks -----------------------------------------------------------------------------------


def _replace_in(module: Any, file: str) -> None:
    names = REPLACED.get(file)
    if not names or getattr(module, "__memstream_replaced__", False):
        return
    for name, kind in names.items():
        if not hasattr(module, name):
            raise pytest.UsageError(f"{module.__name__} has no {name} to replace")
        setattr(module, name, _factory(kind))
    module.__memstream_replaced__ = True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Replace the constructors in the collected test modules (before any test runs) and
    skip the tests of :data:`SKIPPED`."""
    modules: dict[str, Any] = {}
    for item in items:
        module = getattr(item, "module", None)
        if module is not None:
            modules[item.nodeid.split("::", 1)[0]] = module
            _replace_in(module, item.nodeid.split("::", 1)[0])
        test = item.nodeid if item.nodeid in SKIPPED else item.nodeid.split("[", 1)[0]
        reason = SKIPPED.get(test)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=SKIP_PREFIX + reason))
    stale = sorted(
        test
        for test in SKIPPED
        if (module := modules.get(test.split("::", 1)[0])) is not None
        and not hasattr(module, test.split("::", 1)[1].split("[", 1)[0])
    )
    if stale:  # the suite changed: each skip must still name a test it has
        raise pytest.UsageError("tests to skip that the suite does not have: " + ", ".join(stale))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    global _constructions
    with _count_lock:
        _constructions = 0
    try:
        return (yield)
    finally:
        with _count_lock:
            item.user_properties.append((ADAPTERS_PROPERTY, str(_constructions)))


def pytest_report_header() -> str:
    return f"memstream: the frameworks' sessions on memstream ({PLATFORM.mode} client)"


def pytest_unconfigure(config: pytest.Config) -> None:
    PLATFORM.close()
