"""PostgreSQL for tests: the server of ``MEMSTREAM_TEST_DATABASE_URL`` (default: the local one),
a fresh database per test that asks for one.

Without a reachable server the tests that need one skip, saying why, unless
``MEMSTREAM_REQUIRE_POSTGRES=1`` (CI sets it): then they fail.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import conninfo, sql

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


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh database for this test (dropped after it)."""
    url = create_database(postgres_server)
    try:
        yield url
    finally:
        drop_database(postgres_server, url)
