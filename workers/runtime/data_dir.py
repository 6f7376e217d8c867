"""The data dir's files are private to their user: the dir 0700, its files 0600.

Conversations, the read models and the embedded server's token live there, so nothing in it may
be readable by other local users. Filesystem errors become one-line memstream errors that name
the path and the operating system's reason.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path

from memstream.domain.errors import InvalidInputError, UnavailableError

logger = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600


def os_reason(error: OSError) -> str:
    """The operating system's reason for ``error`` and the path it concerns, on one line."""
    reason = error.strerror or type(error).__name__
    return f"{reason}: {error.filename}" if error.filename else reason


def prepare_data_dir(data_dir: Path) -> Path:
    """Create ``data_dir`` 0700 (parents as the umask says), or tighten an existing one.

    An existing dir or file in it that other users could read is tightened (0700 / 0600) when
    this user owns it, with a warning; one owned by someone else is left alone.

    Raises:
        InvalidInputError: the dir cannot be created or used (a file is in the way, no
            permission, read-only file system), naming the path and the reason.
    """
    try:
        if data_dir.exists() and not data_dir.is_dir():
            raise InvalidInputError(f"cannot use data dir {data_dir}: it is not a directory")
        data_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        _tighten(data_dir, DIR_MODE)
        for entry in data_dir.iterdir():
            # Another process starting on the same dir may rename its temporary files away
            # meanwhile: an entry gone since the listing is no longer ours to tighten.
            with contextlib.suppress(FileNotFoundError):
                if entry.name == "nats" and entry.is_dir() and not entry.is_symlink():
                    _tighten(entry, DIR_MODE)
                elif entry.is_file() and not entry.is_symlink():
                    _tighten(entry, FILE_MODE)
        if not os.access(data_dir, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied", str(data_dir))
    except OSError as error:
        raise InvalidInputError(f"cannot use data dir {data_dir}: {os_reason(error)}") from None
    return data_dir


def private_dir(path: Path) -> Path:
    """Create ``path`` 0700 (or tighten it) inside a prepared data dir.

    Raises:
        UnavailableError: it cannot be created.
    """
    try:
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        _tighten(path, DIR_MODE)
    except OSError as error:
        raise UnavailableError(f"cannot create {path}: {os_reason(error)}") from None
    return path


def open_private(path: Path, flags: int) -> int:
    """``os.open`` that creates the file 0600 and tightens an existing looser one."""
    fd = os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        info = os.fstat(fd)
        if info.st_mode & 0o077 and info.st_uid == os.geteuid():
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically, 0600 (readers never see half a file)."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = open_private(partial, os.O_WRONLY | os.O_TRUNC)
    try:
        with os.fdopen(fd, "w") as file:
            file.write(text)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise


def private_database(path: Path) -> Path:
    """Create the SQLite file 0600 before SQLite opens it: SQLite gives its -wal and -shm
    files the database file's mode, so all three stay private.

    Raises:
        UnavailableError: the file cannot be created, naming the path and the reason.
    """
    try:
        os.close(open_private(path, os.O_RDWR))
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                _tighten(path.with_name(path.name + suffix), FILE_MODE)
    except OSError as error:
        raise UnavailableError(
            f"cannot create read-model database {path}: {os_reason(error)}"
        ) from None
    return path


def _tighten(path: Path, mode: int) -> None:
    info = path.stat()
    if stat.S_IMODE(info.st_mode) & 0o077 and info.st_uid == os.geteuid():
        os.chmod(path, mode)
        logger.warning(
            "tightened %s from %04o to %04o (memstream data is private to its user)",
            path,
            stat.S_IMODE(info.st_mode),
            mode,
        )
