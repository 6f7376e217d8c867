"""The projector locks of a PostgreSQL read-model copy: session-level advisory locks.

One projector per projection of a copy, across every host that reaches the database. A
:class:`PostgresProjectorLock` holds its locks on a connection of its own; they go when it
releases them, when its process dies (the server sees the connection close) or when its host
vanishes (TCP keepalives end the connection within seconds), so another projector takes over.
A refused projector is told who holds the lock: the holder names itself in
``application_name``, which ``pg_stat_activity`` shows.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Sequence

import psycopg

from memstream.domain.errors import ProjectorRunningError
from memstream.projections.postgres.connection import connect, describe, unavailable
from memstream.projections.postgres.schema import LOCK_CLASS, lock_key
from memstream.projections.registry import PROJECTIONS

_HOLDER_PREFIX = "memstream projector"


class PostgresProjectorLock:
    """The projector locks of some projections of the copy in one database; :meth:`release`,
    the end of the process or the loss of its connection frees them."""

    def __init__(
        self, url: str, connection: psycopg.Connection[tuple[object, ...]], keys: list[int]
    ) -> None:
        self.url = url
        self.keys = keys
        self._connection: psycopg.Connection[tuple[object, ...]] | None = connection

    @classmethod
    def acquire(
        cls, url: str, copy: str, projections: Sequence[str] = PROJECTIONS
    ) -> PostgresProjectorLock:
        """Take the locks of ``projections`` for this process: all or none.

        Raises:
            ProjectorRunningError: another projector holds one (the message names it).
            UnavailableError: the database cannot be reached.
        """
        since = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())
        # At most 63 bytes are kept: the host name is cut first.
        head, tail = f"{_HOLDER_PREFIX} pid {os.getpid()} on ", f" since {since}"
        host = socket.gethostname()[: max(8, 63 - len(head) - len(tail))]
        holder = f"{head}{host}{tail}"
        connection = connect(url, autocommit=True, application_name=holder)
        keys: list[int] = []
        try:
            for projection in sorted(projections):
                key = lock_key(projection)
                row = connection.execute(
                    "SELECT pg_try_advisory_lock(%s, %s)", (LOCK_CLASS, key)
                ).fetchone()
                if row is None or not row[0]:
                    who = _holder(connection, key)
                    raise ProjectorRunningError(
                        f"a projector already runs for read-model copy {copy} "
                        f"({describe(url)}), projection {projection}: {who}; stop it first "
                        "(a projection of a copy has one projector)"
                    )
                keys.append(key)
        except psycopg.Error as error:
            connection.close()
            raise unavailable(url, "cannot take the projector locks of", error) from None
        except BaseException:
            connection.close()  # the server frees what this connection took
            raise
        return cls(url, connection, keys)

    @property
    def held(self) -> bool:
        """Whether the locks are still held: released, or the connection that holds them
        lost (the server freed them), is not held."""
        connection = self._connection
        if connection is None or connection.closed or connection.broken:
            return False
        try:
            row = connection.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND pid = pg_backend_pid() AND classid = %s AND objid = ANY(%s) "
                "AND objsubid = 2",
                (LOCK_CLASS, self.keys),
            ).fetchone()
        except psycopg.Error:
            return False
        return row is not None and int(str(row[0])) == len(self.keys)

    def release(self) -> None:
        """Give the locks up (idempotent)."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        with contextlib.suppress(psycopg.Error):
            if not connection.closed and not connection.broken:
                connection.execute("SELECT pg_advisory_unlock_all()")
        connection.close()


def _holder(connection: psycopg.Connection[tuple[object, ...]], key: int) -> str:
    """Who holds the lock ``key``, as the holder named itself."""
    row = connection.execute(
        "SELECT a.application_name, a.client_addr::text, a.pid FROM pg_locks AS l "
        "JOIN pg_stat_activity AS a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
        "AND l.granted AND l.classid = %s AND l.objid = %s AND l.objsubid = 2 "
        # Advisory locks are the database's: another database's projector holds its own.
        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        (LOCK_CLASS, key),
    ).fetchone()
    if row is None:
        return "held by another session"
    name, address, pid = row
    if isinstance(name, str) and name.startswith(_HOLDER_PREFIX):
        return f"{name[len(_HOLDER_PREFIX) :].strip()} (server backend {pid})"
    return f"held by server backend {pid} from {address or 'a local socket'}"
