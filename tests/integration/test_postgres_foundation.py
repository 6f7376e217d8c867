"""PostgreSQL read-model foundation against a real server: connections from hostile URLs,
migrations applied once by processes that start together, projector locks across processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo
from support.postgres import create_database, drop_database

from memstream.domain.errors import InvalidInputError, ProjectorRunningError, UnavailableError
from memstream.projections.postgres.connection import check_database_url, connect
from memstream.projections.postgres.locks import PostgresProjectorLock
from memstream.projections.postgres.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    copy_id,
    migrate,
    schema_version,
)

pytestmark = pytest.mark.postgres

HELPER = str(Path(__file__).parents[1] / "support" / "postgres_process.py")
SECRET = "s3cr3t-pw-7781"


def _free_port() -> int:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        return int(listener.getsockname()[1])


def _helper(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, HELPER, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)


# -- connections -------------------------------------------------------------------------------


def test_an_unreachable_server_is_unavailable_in_time_and_its_password_is_masked() -> None:
    url = f"postgresql://alice:{SECRET}@127.0.0.1:{_free_port()}/memstream"
    started = time.monotonic()
    with pytest.raises(UnavailableError) as caught:
        connect(url, timeout=2)
    assert time.monotonic() - started < 4
    message = str(caught.value)
    assert "postgresql://alice:***@127.0.0.1" in message
    assert "/memstream" in message
    shown = "".join(traceback.format_exception(caught.value))
    assert SECRET not in shown


def test_a_refused_login_is_unavailable_and_masks_a_key_value_password(
    postgres_server: str,
) -> None:
    parameters = conninfo.conninfo_to_dict(postgres_server)
    url = conninfo.make_conninfo(postgres_server, dbname="no_such_database_here", password=SECRET)
    assert parameters.get("dbname") != "no_such_database_here"
    with pytest.raises(UnavailableError, match="no_such_database_here") as caught:
        connect(url, timeout=2)
    assert SECRET not in "".join(traceback.format_exception(caught.value))


@pytest.mark.parametrize(
    "url",
    [
        f"mysql://root:{SECRET}@localhost/db",
        f"http://u:{SECRET}@example.com/",
        "",
        "   ",
        "host=localhost port=notaport dbname='unterminated",
    ],
)
def test_what_is_not_a_postgresql_url_is_refused_before_connecting(url: str) -> None:
    with pytest.raises(InvalidInputError, match="database_url") as caught:
        check_database_url(url)
    assert SECRET not in str(caught.value)


def test_a_connection_reads_and_writes_the_memstream_schema_first(postgres_url: str) -> None:
    with connect(postgres_url) as connection:
        migrate(connection, postgres_url)
        row = connection.execute("SELECT count(*) FROM tracking").fetchone()
        assert row == (0,)


# -- migrations --------------------------------------------------------------------------------


def test_migrations_are_recorded_and_applied_once(postgres_url: str) -> None:
    with connect(postgres_url) as connection:
        assert schema_version(connection, postgres_url) == 0
        assert migrate(connection, postgres_url) == 0
        first = copy_id(connection)
        assert migrate(connection, postgres_url) == SCHEMA_VERSION
        recorded = connection.execute(
            "SELECT version, name FROM migrations ORDER BY version"
        ).fetchall()
        assert recorded == [(m.version, m.name) for m in MIGRATIONS]
        assert copy_id(connection) == first
        assert len(first) == 12
        assert int(first, 16) >= 0


def test_processes_that_start_together_apply_each_migration_once(postgres_url: str) -> None:
    processes = [_helper("migrate", postgres_url) for _ in range(6)]
    for process in processes:  # all connected and waiting: go
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    befores = []
    for process in processes:
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        befores.append(json.loads(out.strip().splitlines()[-1])["before"])
    assert sorted(befores) == [0] + [SCHEMA_VERSION] * 5
    with connect(postgres_url) as connection:
        assert connection.execute("SELECT count(*) FROM migrations").fetchone() == (
            len(MIGRATIONS),
        )
        assert connection.execute("SELECT count(*) FROM meta").fetchone() == (1,)


def test_a_schema_memstream_did_not_make_is_left_alone(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("CREATE SCHEMA memstream")
        admin.execute("CREATE TABLE memstream.orders (id int)")
        admin.execute("INSERT INTO memstream.orders VALUES (42)")
    with (
        connect(postgres_url) as connection,
        pytest.raises(UnavailableError, match="did not create"),
    ):
        migrate(connection, postgres_url)
    with psycopg.connect(postgres_url) as admin:
        assert admin.execute("SELECT id FROM memstream.orders").fetchall() == [(42,)]


def test_a_newer_schema_is_refused(postgres_url: str) -> None:
    with connect(postgres_url) as connection:
        migrate(connection, postgres_url)
        connection.execute(
            "INSERT INTO migrations (version, name) VALUES (%s, 'from the future')",
            (SCHEMA_VERSION + 1,),
        )
        connection.commit()
        with pytest.raises(UnavailableError, match="upgrade memstream"):
            migrate(connection, postgres_url)


# -- projector locks ---------------------------------------------------------------------------


def _started(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    return process.stdout.readline().strip()


def test_a_second_projector_is_refused_and_told_who_holds_the_lock(
    postgres_url: str, holders: list[subprocess.Popen[str]]
) -> None:
    holder = _helper("lock", postgres_url, "sessions,context")
    holders.append(holder)
    assert _started(holder) == "locked"
    with pytest.raises(ProjectorRunningError) as caught:
        PostgresProjectorLock.acquire(postgres_url, "copy", ["context"])
    assert f"pid {holder.pid} on {socket.gethostname()[:8]}" in str(caught.value)
    assert "projection context" in str(caught.value)


def test_the_holder_named_is_the_one_of_this_database(
    postgres_url: str, postgres_server: str, holders: list[subprocess.Popen[str]]
) -> None:
    # Given a projector holding "context" in another database of the same server first
    other = create_database(postgres_server)
    try:
        elsewhere = _helper("lock", other, "context")
        holders.append(elsewhere)
        assert _started(elsewhere) == "locked"
        here = _helper("lock", postgres_url, "context")
        holders.append(here)
        assert _started(here) == "locked"
        # When a third is refused here, it names this database's holder
        with pytest.raises(ProjectorRunningError) as caught:
            PostgresProjectorLock.acquire(postgres_url, "copy", ["context"])
        assert f"pid {here.pid} on " in str(caught.value)
        assert f"pid {elsewhere.pid} on " not in str(caught.value)
    finally:
        for holder in holders:
            holder.kill()
            holder.wait(10)
        drop_database(postgres_server, other)


def test_locks_are_all_or_none_and_disjoint_sets_run_side_by_side(
    postgres_url: str, holders: list[subprocess.Popen[str]]
) -> None:
    holder = _helper("lock", postgres_url, "context")
    holders.append(holder)
    assert _started(holder) == "locked"
    with pytest.raises(ProjectorRunningError):
        PostgresProjectorLock.acquire(postgres_url, "copy", ["sessions", "context", "vectors"])
    # Nothing of the refused set stayed taken: its other projections are free.
    lock = PostgresProjectorLock.acquire(postgres_url, "copy", ["sessions", "vectors"])
    try:
        assert lock.held
    finally:
        lock.release()
    assert not lock.held


def test_the_lock_of_a_killed_projector_is_taken_over_within_seconds(
    postgres_url: str, holders: list[subprocess.Popen[str]]
) -> None:
    holder = _helper("lock", postgres_url, "sessions")
    holders.append(holder)
    assert _started(holder) == "locked"
    second = _helper("lock", postgres_url, "sessions")
    holders.append(second)
    assert "refused" in json.loads(_started(second))
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=10)
    deadline = time.monotonic() + 10
    while True:
        try:
            lock = PostgresProjectorLock.acquire(postgres_url, "copy", ["sessions"])
            break
        except ProjectorRunningError:
            assert time.monotonic() < deadline, "the killed projector's lock was never freed"
            time.sleep(0.1)
    assert lock.held
    lock.release()


def test_a_lock_whose_connection_is_lost_is_no_longer_held(postgres_url: str) -> None:
    lock = PostgresProjectorLock.acquire(postgres_url, "copy", ["sessions", "context"])
    assert lock.held
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name LIKE 'memstream projector%%' AND datname = current_database()"
        )
    assert not lock.held
    lock.release()  # safe after the loss
    again = PostgresProjectorLock.acquire(postgres_url, "copy", ["sessions", "context"])
    again.release()
