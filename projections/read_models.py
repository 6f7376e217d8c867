"""The one factory of read models: the backend the settings name."""

from __future__ import annotations

from memstream.domain.errors import InvalidInputError
from memstream.projections.ports import ReadModelCopy, ReadModelSettings
from memstream.projections.sqlite.store import SqliteCopy


def open_read_models(settings: ReadModelSettings) -> ReadModelCopy:
    """The read-model copy ``settings`` name: SQLite at ``database_path`` unless a
    ``database_url`` is given. Opens nothing yet (see :class:`ReadModelCopy`).

    Raises:
        InvalidInputError: the settings name a backend this version does not support.
    """
    if settings.database_url is not None:
        import os

        # A development gate while the PostgreSQL backend is unfinished (issue 14), read here so
        # that every entry point (client, workers, CLI) honours it alike; it goes with the gate.
        if os.environ.get("MEMSTREAM_EXPERIMENTAL_POSTGRES") != "1":
            raise InvalidInputError(
                "MEMSTREAM_DATABASE_URL (PostgreSQL read models) is not supported yet; "
                "unset it to use SQLite in the data dir"
            )
        from memstream.projections.postgres.connection import check_database_url
        from memstream.projections.postgres.copy import PostgresCopy

        check_database_url(settings.database_url)
        return PostgresCopy(settings.database_url)
    return SqliteCopy(settings.database_path)
