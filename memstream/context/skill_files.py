"""The files of a skills folder, confined to it: nothing is listed, read or written outside it.

A skills folder is often a checkout or a shared folder that other people can change, so a file or
folder in it may be a symbolic link to anywhere (``notes.md -> /etc/passwd``). Every entry's real
path is resolved and must lie inside the folder's real path; a link that stays inside is followed.
Between that check and the use of a file a link could be swapped in (time of check to time of
use), so files are opened component by component from the folder with ``O_NOFOLLOW``, along the
real path just checked: a link that appeared in between makes the open fail instead of being
followed. Writes never follow a link at all, not even one that stays inside.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from memstream.domain.errors import InvalidInputError

logger = logging.getLogger(__name__)

SKILL_SUFFIXES = (".md", ".markdown", ".txt")
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted under a skill's name must not block the open.
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class SkillFile:
    """A skill file: its key, its rank among files of the same key, and its real path."""

    key: str
    rank: tuple[int, str]
    real: str


def _inside(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _rank(name: str) -> tuple[int, str] | None:
    """Where a file name stands among the skill suffixes (``None``: not a skill file)."""
    suffix = os.path.splitext(name)[1].lower()
    return (SKILL_SUFFIXES.index(suffix), name) if suffix in SKILL_SUFFIXES else None


class SkillFolder:
    """A folder of skill files; every operation stays inside the folder's real path."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _real_root(self) -> str | None:
        real = os.path.realpath(self.root)
        return real if os.path.isdir(real) else None

    def refused(self, key: str) -> InvalidInputError:
        return InvalidInputError(
            f'skill "{key}" leads outside the skills folder {self.root} (a symbolic link); refused'
        )

    # -- reading -------------------------------------------------------------------------------

    def files(self) -> dict[str, SkillFile]:
        """Every skill file inside the folder by key (sorted); the best-ranked file per key.

        Entries whose real path is outside the folder are left out (and logged); a link to a
        folder inside is followed once (a loop of links ends there).
        """
        root = self._real_root()
        if root is None:
            return {}
        found: dict[str, SkillFile] = {}
        for relative, real in self._walk(root):
            rank = _rank(relative[-1])
            if rank is None or not os.path.isfile(real):
                continue
            key = "/".join([*relative[:-1], os.path.splitext(relative[-1])[0]])
            if key not in found or rank < found[key].rank:
                found[key] = SkillFile(key, rank, real)
        return {key: found[key] for key in sorted(found)}

    def _walk(self, root: str) -> Iterator[tuple[list[str], str]]:
        """``(path parts relative to the folder, real path)`` of each entry inside it."""
        pending: list[tuple[str, list[str]]] = [(root, [])]
        seen = {root}
        while pending:
            folder, relative = pending.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError as error:
                logger.warning("skills: cannot list %s: %s", folder, error.strerror)
                continue
            for entry in entries:
                real = os.path.realpath(entry.path)
                parts = [*relative, entry.name]
                if not _inside(real, root):
                    logger.warning(
                        "skills: %s in %s leads outside the folder; left out",
                        "/".join(parts),
                        self.root,
                    )
                    continue
                if os.path.isdir(real):
                    if real not in seen:
                        seen.add(real)
                        pending.append((real, parts))
                    continue
                yield parts, real

    def find(self, key: str) -> SkillFile | None:
        """The file of a (checked) key, following its path part by part, or ``None``.

        Raises:
            InvalidInputError: the key's folder or file leads outside the skills folder.
        """
        root = self._real_root()
        if root is None:
            return None
        *folders, name = key.split("/")
        folder = root
        for part in folders:
            folder = os.path.realpath(os.path.join(folder, part))
            if not _inside(folder, root):
                raise self.refused(key)
            if not os.path.isdir(folder):
                return None
        try:
            entries = os.listdir(folder)
        except OSError:
            return None
        candidates = []
        for entry in entries:
            rank = _rank(entry)
            if rank is not None and os.path.splitext(entry)[0] == name:
                candidates.append((rank, os.path.realpath(os.path.join(folder, entry))))
        outside = False
        for rank, real in sorted(candidates):
            if not _inside(real, root):
                outside = True
            elif os.path.isfile(real):
                return SkillFile(key, rank, real)
        if outside:
            raise self.refused(key)
        return None

    def read(self, file: SkillFile) -> str:
        """The text of a file found inside the folder, opened without following any link.

        Raises:
            InvalidInputError: the file or a folder on its way became a link after it was found.
        """
        root = self._real_root()
        if root is None or not _inside(file.real, root):
            raise self.refused(file.key)
        parts = os.path.relpath(file.real, root).split(os.sep)
        try:
            folder = self._open_folders(root, parts[:-1])
        except OSError as error:
            raise self._refused_or_raise(file.key, error) from error
        try:
            fd = os.open(parts[-1], _FILE, dir_fd=folder)
        except OSError as error:
            raise self._refused_or_raise(file.key, error) from error
        finally:
            os.close(folder)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise InvalidInputError(f'skill "{file.key}" is not a regular file')
            data = handle.read()
        # A stray non-UTF-8 byte must not take the whole block down: it reads as U+FFFD.
        return data.decode("utf-8", errors="replace")

    def _refused_or_raise(self, key: str, error: OSError) -> Exception:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            return self.refused(key)
        return error

    @staticmethod
    def _open_folders(root: str, parts: list[str], *, create: bool = False) -> int:
        """A descriptor of ``root/parts...``, each part opened without following links (and
        made first when ``create``); the caller closes it."""
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in parts:
                if create:
                    # mkdir never follows a link: an existing one is EEXIST, then refused below
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, dir_fd=fd)
                child = os.open(part, _DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    # -- writing -------------------------------------------------------------------------------

    def write(self, key: str, text: str) -> None:
        """Replace (or create) ``<key>.md`` whole, through no link at all.

        Raises:
            InvalidInputError: a folder on the key's path, or the file itself, is a link.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        *folders, name = key.split("/")
        try:
            folder = self._open_folders(str(self.root), folders, create=True)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                raise InvalidInputError(
                    f'skill "{key}": a folder on its path in {self.root} is a symbolic link or '
                    "not a folder; refused"
                ) from error
            raise
        try:
            self._replace(folder, key, f"{name}.md", text.encode("utf-8"))
        finally:
            os.close(folder)

    def _replace(self, folder: int, key: str, name: str, data: bytes) -> None:
        try:
            existing = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            existing = None
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            raise InvalidInputError(
                f'skill "{key}": {name} in {self.root} is a symbolic link or not a regular '
                "file; refused"
            )
        partial = f".{name}.{uuid.uuid4().hex}.tmp"
        fd = os.open(partial, _NEW_FILE, 0o666, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            # rename replaces a link that appeared since the check, never writes through it
            os.replace(partial, name, src_dir_fd=folder, dst_dir_fd=folder)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial, dir_fd=folder)
