"""Damaged read-model files: which SQLite errors mean damage, file identity, moving a file aside.

A read model is disposable (it can always be rebuilt from the log), so a damaged one is not
repaired but renamed to ``<name>.corrupt-<UTC time>`` (kept for inspection) and rebuilt.
Readers notice the replacement by the file's identity (device and inode) at their path.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from memstream.domain.errors import ReadModelDamagedError
from memstream.projections.ports import REBUILD_HINT

# SQLite primary result codes that say the file itself is bad (extended codes such as
# SQLITE_CORRUPT_VTAB, FTS5's, share the low byte). Locked, busy, I/O and constraint errors are
# not damage: they pass, or they are the event's fault.
SQLITE_CORRUPT = 11
SQLITE_NOTADB = 26
_DAMAGE_CODES = (SQLITE_CORRUPT, SQLITE_NOTADB)
_DAMAGE_WORDS = ("malformed", "not a database")

FileIdentity = tuple[int, int]


def is_damage(error: BaseException) -> bool:
    """Whether ``error`` says the database file is corrupt or not a database."""
    if not isinstance(error, sqlite3.DatabaseError):
        return False
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _DAMAGE_CODES
    return any(word in str(error) for word in _DAMAGE_WORDS)


def damaged(error: sqlite3.DatabaseError) -> ReadModelDamagedError:
    """Our error for SQLite's damage ``error`` (its text is the ``reason``)."""
    return ReadModelDamagedError(
        f"the read model is damaged ({error}); {REBUILD_HINT}", reason=str(error)
    )


@contextlib.contextmanager
def damage_translated() -> Iterator[None]:
    """Raise :class:`ReadModelDamagedError` for SQLite damage met inside (other errors pass)."""
    try:
        yield
    except sqlite3.DatabaseError as error:
        if not is_damage(error):
            raise
        raise damaged(error) from error


def file_identity(path: Path) -> FileIdentity | None:
    """The file at ``path`` as (device, inode), or ``None`` if there is none."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino


@contextlib.contextmanager
def recovery_lock(path: Path, *, exclusive: bool) -> Iterator[None]:
    """Hold the lock that keeps opening ``path`` and moving it aside apart, across processes.

    Openers hold it shared while they connect and first read (which opens the ``-wal`` and
    ``-shm`` files by name); a mover holds it exclusively while it renames the three files, so
    that no connection pairs a fresh database with the old one's write-ahead log.
    """
    fd = os.open(f"{path}.recovery-lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # releases the lock


def move_aside(path: Path, expected: FileIdentity | None = None) -> Path | None:
    """Rename ``path`` and its ``-wal``/``-shm`` files to ``<path>.corrupt-<UTC time>`` (mode 0600).

    Returns the new name of the database file, or ``None`` when there is nothing to move: no
    file at ``path``, or (with ``expected``) another file than the damaged one, because another
    process has already replaced it.

    Raises:
        OSError: a file cannot be renamed.
    """
    with recovery_lock(path, exclusive=True):
        current = file_identity(path)
        if current is None or (expected is not None and current != expected):
            return None
        target = _free_name(path, datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"))
        os.rename(path, target)
        os.chmod(target, 0o600)
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.rename(f"{path}{suffix}", f"{target}{suffix}")
                os.chmod(f"{target}{suffix}", 0o600)
        return target


def _free_name(path: Path, stamp: str) -> Path:
    """``<path>.corrupt-<stamp>``, with ``-2``, ``-3``... when taken (rename would replace it)."""
    base = f"{path}.corrupt-{stamp}"
    candidate, n = Path(base), 1
    while candidate.exists() or Path(f"{candidate}-wal").exists():
        n += 1
        candidate = Path(f"{base}-{n}")
    return candidate
