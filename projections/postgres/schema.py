"""The PostgreSQL read-model schema: versioned migrations, applied at start by whichever
process gets there first, and the identity of the copy the database holds.

Everything lives in the ``memstream`` schema of its database; a database holds one read-model
copy. Migrations are recorded in ``memstream.migrations`` (version, name, time applied) and
applied in one transaction under a transaction-scoped advisory lock, so processes that start at
once (a projector, an indexer and clients on several hosts) apply each migration exactly once:
the others wait for the lock, then find it recorded.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import psycopg

from memstream.domain.errors import UnavailableError
from memstream.projections.postgres.connection import SCHEMA, describe, unavailable

# The first key of every memstream advisory lock ("MS"); the second names what is locked.
LOCK_CLASS = 0x4D53
MIGRATION_LOCK = 0


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "copy identity, projection positions, dead letters",
        f"""
        CREATE TABLE {SCHEMA}.meta (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        INSERT INTO {SCHEMA}.meta (key, value)
            VALUES ('copy_id', substr(md5(gen_random_uuid()::text), 1, 12));
        CREATE TABLE {SCHEMA}.tracking (
            projection TEXT PRIMARY KEY,
            seq BIGINT NOT NULL,
            version INTEGER NOT NULL DEFAULT 1
        );
        CREATE TABLE {SCHEMA}.dead_letters (
            projection TEXT NOT NULL,
            seq BIGINT NOT NULL,
            subject TEXT NOT NULL,
            topic TEXT NOT NULL,
            error TEXT NOT NULL,
            attempts INTEGER NOT NULL,
            recorded_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            PRIMARY KEY (projection, seq)
        );
        """,
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


def lock_key(name: str) -> int:
    """The second advisory-lock key of ``name`` (a projection): a stable 31-bit digest, the
    same in every process and version (never 0, the migrations' key)."""
    return zlib.crc32(name.encode()) % (2**31 - 1) + 1


def migrate(connection: psycopg.Connection[tuple[object, ...]], url: str) -> int:
    """Bring the database up to :data:`SCHEMA_VERSION`; returns the version it was at before.

    Safe when several processes call it at once (one applies, the others find it applied).

    Raises:
        UnavailableError: the database holds a ``memstream`` schema this code did not make
            or a newer version of it, or it failed (the message names the database).
    """
    try:
        with connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, MIGRATION_LOCK))
            before = _current_version(connection, url)
            if before > SCHEMA_VERSION:
                raise UnavailableError(
                    f"the read-model database {describe(url)} is at schema version {before}, "
                    f"newer than this memstream's {SCHEMA_VERSION}: upgrade memstream"
                )
            if before == 0:
                connection.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
                connection.execute(
                    f"CREATE TABLE {SCHEMA}.migrations (version INTEGER PRIMARY KEY, "
                    "name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
                )
            for migration in MIGRATIONS:
                if migration.version <= before:
                    continue
                connection.execute(migration.sql)
                connection.execute(
                    f"INSERT INTO {SCHEMA}.migrations (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
            return before
    except psycopg.Error as error:
        raise unavailable(url, "cannot migrate", error) from None


def schema_version(connection: psycopg.Connection[tuple[object, ...]], url: str) -> int:
    """The version the database's schema is at (0: no memstream schema)."""
    try:
        with connection.transaction():
            return _current_version(connection, url)
    except psycopg.Error as error:
        raise unavailable(url, "cannot read the schema version of", error) from None


def copy_id(connection: psycopg.Connection[tuple[object, ...]]) -> str:
    """The identity of the read-model copy this database holds (made by the first migration)."""
    row = connection.execute(f"SELECT value FROM {SCHEMA}.meta WHERE key = 'copy_id'").fetchone()
    if row is None:
        raise UnavailableError("the read-model database has no copy id")
    return str(row[0])


def _current_version(connection: psycopg.Connection[tuple[object, ...]], url: str) -> int:
    tables = {
        str(row[0])
        for row in connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (SCHEMA,),
        )
    }
    if not tables:
        return 0
    if "migrations" not in tables:
        raise UnavailableError(
            f"the read-model database {describe(url)} has a schema {SCHEMA!r} that memstream did "
            f"not create (tables {', '.join(sorted(tables)[:5])}): use another database"
        )
    row = connection.execute(f"SELECT max(version) FROM {SCHEMA}.migrations").fetchone()
    version = row[0] if row is not None else None
    return version if isinstance(version, int) else 0
