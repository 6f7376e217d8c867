"""This read-model copy: the id kept inside its database, and the lock its one projector holds.

A copy (one SQLite file) is projected by exactly one projector at a time. The lock is an
``flock`` on a file beside the database, held for the projector's life: the kernel releases it
when the process dies, SIGKILL included, so a crashed projector never blocks its successor.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from memstream.domain.errors import ProjectorRunningError


def copy_id(connection: sqlite3.Connection) -> str:
    """The id of the read-model copy behind ``connection`` (created with its schema)."""
    row = connection.execute("SELECT value FROM meta WHERE key = 'copy_id'").fetchone()
    return str(row[0])


def lock_path(database: Path) -> Path:
    """Where the projector lock of the copy in ``database`` lives."""
    return database.with_name(database.name + ".projector.lock")


@dataclass
class ProjectorLock:
    """The single-projector lock of one read-model copy; :meth:`release` or process exit frees
    it."""

    path: Path
    _file: IO[str] | None

    @classmethod
    def acquire(cls, database: Path, copy: str) -> ProjectorLock:
        """Take the lock of the copy in ``database`` (whose id is ``copy``) for this process.

        Raises:
            ProjectorRunningError: another projector holds it (the message names it).
        """
        path = lock_path(database)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        file = os.fdopen(fd, "r+")
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(file)
            file.close()
            raise ProjectorRunningError(
                f"a projector already runs for read-model copy {copy} ({database}): {holder}; "
                "stop it first (one copy has one projector)"
            ) from None
        except BaseException:
            file.close()
            raise
        file.seek(0)
        file.truncate()
        file.write(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "copy_id": copy,
                    "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            )
        )
        file.flush()
        return cls(path, file)

    @property
    def held(self) -> bool:
        return self._file is not None

    def release(self) -> None:
        """Give the lock up (idempotent)."""
        if self._file is None:
            return
        with contextlib.suppress(OSError):
            self._file.seek(0)
            self._file.truncate()
            fcntl.flock(self._file, fcntl.LOCK_UN)
        self._file.close()
        self._file = None


def _describe(file: IO[str]) -> str:
    """Who holds the lock, as its holder recorded it."""
    try:
        file.seek(0)
        holder = json.loads(file.read() or "{}")
    except (OSError, ValueError):
        holder = {}
    if not isinstance(holder, dict) or "pid" not in holder:
        return "held by another process"
    return (
        f"process {holder.get('pid')} on {holder.get('host', '?')} since {holder.get('since', '?')}"
    )
