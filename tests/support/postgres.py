"""PostgreSQL for tests: the server of ``MEMSTREAM_TEST_DATABASE_URL`` (default: the local one),
a fresh database per test that asks for one (made ahead of it and dropped behind it, in a
background thread: each takes the server a few hundred milliseconds).

Without a reachable server the tests that need one skip, saying why, unless
``MEMSTREAM_REQUIRE_POSTGRES=1`` (CI sets it): then they fail.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import psycopg
import pytest
from psycopg import conninfo, sql
from support.postgres_server import PrivatePostgres

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def server_url() -> str:
    return os.environ.get("MEMSTREAM_TEST_DATABASE_URL") or DEFAULT_URL


def database_url(server: str, database: str) -> str:
    """``server``'s URL for another database on it (a libpq key/value string)."""
    return conninfo.make_conninfo(server, dbname=database)


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The URL of a reachable PostgreSQL server (its default database)."""
    url = server_url()
    try:
        with psycopg.connect(url, connect_timeout=3) as connection:
            connection.execute("SELECT 1")
    except psycopg.Error as error:
        reason = f"no PostgreSQL at MEMSTREAM_TEST_DATABASE_URL or {DEFAULT_URL}: {error}"
        if os.environ.get("MEMSTREAM_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"MEMSTREAM_REQUIRE_POSTGRES=1 but {reason}")
        pytest.skip(reason)
    return url


def create_database(server: str) -> str:
    """A new, empty database on ``server``; its URL."""
    name = f"ms_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return database_url(server, name)


def drop_database(server: str, url: str) -> None:
    name = conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(str(name)))
        )


class FreshDatabases:
    """New, empty databases on ``server``: the next one is made while a test runs, and a used
    one is dropped while the next test runs (one thread: at most one of each at a time)."""

    def __init__(self, server: str) -> None:
        self.server = server
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fresh-databases")
        self._next: Future[str] = self._thread.submit(create_database, server)
        self._drops: list[Future[None]] = []

    def take(self) -> str:
        """A database nobody has used; the URL."""
        url = self._next.result()
        self._next = self._thread.submit(create_database, self.server)
        return url

    def drop(self, url: str) -> None:
        self._drops.append(self._thread.submit(drop_database, self.server, url))
        self._raise_failed_drops()

    def close(self) -> None:
        """Drop the database made ahead and wait for every drop (a failed drop raises)."""
        self.drop(self._next.result())
        self._thread.shutdown(wait=True)
        self._raise_failed_drops()

    def _raise_failed_drops(self) -> None:
        done = [drop for drop in self._drops if drop.done()]
        self._drops = [drop for drop in self._drops if not drop.done()]
        for drop in done:
            drop.result()


@pytest.fixture(scope="session")
def fresh_databases(postgres_server: str) -> Iterator[FreshDatabases]:
    """The test worker's maker of fresh databases."""
    databases = FreshDatabases(postgres_server)
    try:
        yield databases
    finally:
        databases.close()


@pytest.fixture
def postgres_url(fresh_databases: FreshDatabases) -> Iterator[str]:
    """A fresh database for this test (dropped after it)."""
    url = fresh_databases.take()
    try:
        yield url
    finally:
        fresh_databases.drop(url)


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """A PostgreSQL server of the test's own, which it may stop, kill or restart."""
    server = PrivatePostgres()
    server.start()
    try:
        yield server
    finally:
        server.close()
