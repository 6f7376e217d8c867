"""The one factory of read models: the backend the settings name."""

from __future__ import annotations

import re
from pathlib import Path

from memstream.domain.errors import InvalidInputError
from memstream.projections.ports import ReadModelCopy, ReadModelSettings
from memstream.projections.sqlite.store import SqliteCopy


def open_read_models(settings: ReadModelSettings) -> ReadModelCopy:
    """The read-model copy ``settings`` name: SQLite at ``database_path`` unless a
    ``database_url`` is given. Opens nothing yet (see :class:`ReadModelCopy`).

    Raises:
        InvalidInputError: ``database_url`` is not a PostgreSQL URL or libpq string.
    """
    if settings.database_url is not None:
        from memstream.projections.postgres.connection import check_database_url
        from memstream.projections.postgres.copy import PostgresCopy

        check_database_url(settings.database_url)
        return PostgresCopy(settings.database_url)
    return SqliteCopy(settings.database_path)


# A data dir's SQLite read models (``Settings.database_path``).
DATABASE_FILE = "memstream.db"
_LIBPQ_KEYWORD = re.compile(r"\s*[A-Za-z_]+\s*=")


def read_models_at(target: str) -> ReadModelCopy:
    """The read-model copy ``target`` names (``projections rebuild --into``): a
    ``postgresql://`` URL or a libpq ``key=value`` string, or else a SQLite read-model file,
    or a directory (its ``memstream.db``, as in a data dir). Opens nothing yet.

    Raises:
        InvalidInputError: an unreadable or non-PostgreSQL URL, or a path whose directory does
            not exist.
    """
    if not isinstance(target, str) or not target.strip():
        raise InvalidInputError("the target read models must be a postgresql:// URL or a path")
    if "://" in target or _LIBPQ_KEYWORD.match(target):
        from memstream.projections.postgres.connection import check_database_url
        from memstream.projections.postgres.copy import PostgresCopy

        check_database_url(target)
        return PostgresCopy(target)
    path = Path(target).expanduser().resolve()  # symlinks resolved: the real file is named
    if path.is_dir():
        path = path / DATABASE_FILE
    if not path.parent.is_dir():
        raise InvalidInputError(
            f"the target read models {target!r}: directory {str(path.parent)!r} does not exist"
        )
    return SqliteCopy(path)
