"""Connections to a PostgreSQL read-model database, from a URL treated as hostile.

A URL (``postgresql://user:password@host:5432/db``) or a libpq key/value string is accepted;
anything else is refused before a connection is tried. Every error names the database by its
redacted URL (the password masked, wherever the driver's text quotes it) and reaches the caller
within ``timeout`` seconds as :class:`~memstream.domain.errors.UnavailableError`.
"""

from __future__ import annotations

import math

import psycopg
from psycopg import conninfo

from memstream.domain.errors import InvalidInputError, ReadModelUnavailableError
from memstream.domain.redaction import redact, redact_url, redacted_exception, url_secrets
from memstream.projections.postgres.text import adapt

# How long opening a connection may take before it counts as unreachable (libpq's own timeout
# counts whole seconds: the smallest it takes is 2).
CONNECT_TIMEOUT = 5.0
# The schema every memstream table lives in (a database holds one read-model copy).
SCHEMA = "memstream"
# Keepalives: the server notices a dead client host (and frees its locks) within about
# idle + interval * count seconds, instead of the kernel's two hours.
KEEPALIVES = {
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
}
_SCHEMES = ("postgresql://", "postgres://")


def check_database_url(url: str) -> dict[str, str]:
    """The libpq parameters of ``url`` (a ``postgresql://`` URL or a key/value string).

    Raises:
        InvalidInputError: it is neither, or libpq cannot read it (the message shows it
            redacted).
    """
    if not isinstance(url, str) or not url.strip():
        raise InvalidInputError("database_url must be a postgresql:// URL")
    if "://" in url and not url.startswith(_SCHEMES):
        raise InvalidInputError(
            f"database_url {redact_url(url)!r} is not a postgresql:// URL "
            "(PostgreSQL read models only)"
        )
    try:
        parameters = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:
        raise InvalidInputError(
            f"database_url {redact_url(url)!r} cannot be read: {redact(str(error), _secrets(url))}"
        ) from None
    return {key: str(value) for key, value in parameters.items() if value is not None}


def describe(url: str) -> str:
    """``url`` as errors and logs show it: the password masked."""
    return redact_url(url)


def connect(
    url: str,
    *,
    timeout: float = CONNECT_TIMEOUT,
    autocommit: bool = False,
    application_name: str = "memstream",
) -> psycopg.Connection[tuple[object, ...]]:
    """A new connection to the database at ``url`` with the memstream schema first on its
    search path (created by :func:`~memstream.projections.postgres.schema.migrate`).

    psycopg prepares a statement from its fifth execution, and PostgreSQL may then keep one generic
    plan for it: made while a table was nearly empty, a plan of a join or a walk keeps scanning the
    table as it grows (a path walk's reads slowed with every append until autovacuum's ANALYZE:
    bench/RESULTS.md, 'PostgreSQL agent loop'). Statements whose plan depends on the tables' sizes
    (walks, joins with an array of rows) are therefore run unprepared (``prepare=False``): planned
    at each execution for its parameters and the tables as they are then. Statements that look rows
    up by a unique key keep their prepared plans (planning one costs more than running it).

    Raises:
        InvalidInputError: ``url`` is not a PostgreSQL URL.
        UnavailableError: the server cannot be reached or refuses the connection within
            ``timeout`` seconds (the message names the database, its password masked).
    """
    parameters = check_database_url(url)
    parameters.update(KEEPALIVES)
    parameters["connect_timeout"] = str(max(2, math.ceil(timeout)))
    parameters["application_name"] = application_name[:63]
    # pgvector (where a recall's search walks an HNSW graph with a profile's filter): scan on
    # until enough rows pass the filter (a setting of its own: ignored where it is absent).
    parameters["options"] = f"-c search_path={SCHEMA},public -c hnsw.iterative_scan=relaxed_order"
    try:
        connection = psycopg.connect(conninfo.make_conninfo(**parameters), autocommit=autocommit)
    except psycopg.Error as error:
        raise unavailable(url, "cannot connect to", error) from redacted_exception(
            error, _secrets(url)
        )
    adapt(connection)  # text with NUL or lone surrogates, stored reversibly
    return connection


def unavailable(url: str, doing: str, error: BaseException) -> ReadModelUnavailableError:
    """Our error for a driver's ``error`` met while ``doing`` (e.g. "cannot connect to")."""
    reason = redact(str(error).strip() or type(error).__name__, _secrets(url))
    return ReadModelUnavailableError(f"{doing} the read-model database {describe(url)}: {reason}")


def _secrets(url: str) -> list[str]:
    secrets = url_secrets(url)
    try:
        password = conninfo.conninfo_to_dict(url).get("password")
    except psycopg.ProgrammingError:
        password = None
    if password:
        secrets.append(str(password))
    return secrets
