"""This read-model copy: the id kept inside its database, and the locks its projectors hold.

Each projection of a copy (one SQLite file) is projected by exactly one projector at a time;
projectors of disjoint sets of projections run side by side. A lock is an ``flock`` on a file
beside the database, one per projection, held for the projector's life: the kernel releases it
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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from memstream.domain.errors import ProjectorRunningError
from memstream.projections.registry import PROJECTIONS


def copy_id(connection: sqlite3.Connection) -> str:
    """The id of the read-model copy behind ``connection`` (created with its schema)."""
    row = connection.execute("SELECT value FROM meta WHERE key = 'copy_id'").fetchone()
    return str(row[0])


def lock_path(database: Path, projection: str) -> Path:
    """Where the projector lock of ``projection`` in the copy in ``database`` lives."""
    return database.with_name(f"{database.name}.projector-{projection}.lock")


@dataclass
class ProjectorLock:
    """The projector locks of some projections of one read-model copy (one per projection:
    projectors of disjoint sets of projections run side by side); :meth:`release` or process
    exit frees them."""

    paths: list[Path]
    _files: list[IO[str]] | None

    @classmethod
    def acquire(
        cls, database: Path, copy: str, projections: Sequence[str] = PROJECTIONS
    ) -> ProjectorLock:
        """Take the locks of ``projections`` of the copy in ``database`` (whose id is ``copy``)
        for this process: all or none.

        Raises:
            ProjectorRunningError: another projector holds one (the message names it).
        """
        paths, files = [], []
        try:
            for projection in sorted(projections):
                path = lock_path(database, projection)
                files.append(_take(path, database, copy, projection))
                paths.append(path)
        except BaseException:
            for file in files:
                _give_up(file)
            raise
        return cls(paths, files)

    @property
    def held(self) -> bool:
        return self._files is not None

    def release(self) -> None:
        """Give the locks up (idempotent)."""
        if self._files is None:
            return
        for file in self._files:
            _give_up(file)
        self._files = None


def _take(path: Path, database: Path, copy: str, projection: str) -> IO[str]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    file = os.fdopen(fd, "r+")
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _describe(file)
        file.close()
        raise ProjectorRunningError(
            f"a projector already runs for read-model copy {copy} ({database}), projection "
            f"{projection}: {holder}; stop it first (a projection of a copy has one projector)"
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
                "projection": projection,
                "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        )
    )
    file.flush()
    return file


def _give_up(file: IO[str]) -> None:
    with contextlib.suppress(OSError):
        file.seek(0)
        file.truncate()
        fcntl.flock(file, fcntl.LOCK_UN)
    file.close()


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
