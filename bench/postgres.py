"""PostgreSQL for the benchmarks: the server of ``MEMSTREAM_BENCH_DATABASE_URL`` (default: the
local one), a fresh database per benchmark (``ms_bench_<hex>``, dropped after it, also when it
fails), and the row of a benchmark that found no server."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import psycopg
from psycopg import conninfo, sql

from bench.harness import BenchEnv, Row, bench_env
from memstream.domain.redaction import redact_url
from memstream.projections.postgres.connection import SCHEMA

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/test"
SKIPPED = "skipped: no PostgreSQL"

Connection = psycopg.Connection[tuple[Any, ...]]


def server_url() -> str:
    return os.environ.get("MEMSTREAM_BENCH_DATABASE_URL") or DEFAULT_SERVER


def unreachable(server: str) -> str | None:
    """Why ``server`` cannot be used (``None``: it can)."""
    try:
        with psycopg.connect(server, connect_timeout=3) as connection:
            connection.execute("SELECT 1")
    except psycopg.Error as error:
        return f"no PostgreSQL at {redact_url(server)}: {str(error).strip()}"
    return None


@contextlib.contextmanager
def scratch_database(server: str) -> Iterator[str]:
    """A new, empty database on ``server`` for the duration of the ``with``; its URL."""
    name = f"ms_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield conninfo.make_conninfo(server, dbname=name)
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextlib.asynccontextmanager
async def pg_bench_env(name: str, server: str) -> AsyncIterator[BenchEnv]:
    """:func:`~bench.harness.bench_env` with its read models in a scratch database."""
    with scratch_database(server) as url:
        async with bench_env(name) as env:
            yield dataclasses.replace(env, settings=env.settings.with_(database_url=url))


def plain_connection(url: str) -> Connection:
    """A baseline's connection: psycopg as it comes (no memstream adapters), autocommit, the
    read model's schema on its search path."""
    return psycopg.connect(url, autocommit=True, options=f"-c search_path={SCHEMA},public")


def settle(url: str) -> None:
    """``VACUUM ANALYZE`` the database: what autovacuum does within a minute of a bulk load
    (planner statistics, the GIN indexes' pending lists merged), so that reads are timed on a
    settled read model and not while autovacuum starts in the middle of the rounds."""
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("VACUUM ANALYZE")


async def needs_postgres(
    title: str, target: str, measure: Callable[[str], Awaitable[Row | list[Row]]]
) -> Row | list[Row]:
    """``measure(server)``, or a row saying it was skipped when no server is reachable."""
    server = server_url()
    reason = unreachable(server)
    if reason is not None:
        return Row(title, SKIPPED, "", "", target, True, reason)
    return await measure(server)
