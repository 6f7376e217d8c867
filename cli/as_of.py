"""``--as-of`` on read commands: answers from the read models as they were (issue 16)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

import typer

from memstream import Memstream, Settings, admin
from memstream.admin import ContextQueries, SessionQueries, parse_as_of
from memstream.cli.context import connected
from memstream.cli.output import progress_bar

AsOfOption = Annotated[
    str | None,
    typer.Option(
        "--as-of",
        help="Read the state as of this stream sequence or ISO 8601 time (UTC unless it "
        "names a zone), from a copy built once and cached under the data dir.",
        show_default=False,
    ),
]


@dataclass(frozen=True, slots=True)
class Reads:
    """Where a read command reads: the live client (``ms`` set, ``seq`` None) or the read
    models as of ``seq``."""

    namespace: str
    sessions: SessionQueries
    context: ContextQueries
    ms: Memstream | None
    seq: int | None


@contextlib.asynccontextmanager
async def reading(settings: Settings, as_of: str | None, *projections: str) -> AsyncIterator[Reads]:
    """The live read models (synced for ``projections``) or, with ``as_of``, the cached as-of
    copy (built first if missing, with a progress bar).

    Raises:
        InvalidInputError: ``as_of`` is neither a sequence nor a time, or is past the log.
    """
    if as_of is None:
        async with connected(settings) as ms:
            for projection in projections:
                await ms.sync(projection)
            yield Reads(
                ms.namespace, ms.core.reads.session_queries, ms.core.reads.context_queries, ms, None
            )
        return
    when = parse_as_of(as_of)  # before connecting: a typo fails fast
    async with connected(settings, workers=False) as ms:
        with progress_bar(f"building the read models as of {as_of}") as progress:
            past = await admin.as_of(ms, when, progress=progress)
        try:
            yield Reads(ms.namespace, past.sessions, past.context, None, past.seq)
        finally:
            past.close()
