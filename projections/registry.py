"""The projections: each one's name, version and what it holds, in the order a projector
applies them; which run where (the projector, the indexer, the analytics worker) and which may
be projected by partition; and the checking of projection names given by a user."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memstream.domain.errors import InvalidInputError


@dataclass(frozen=True, slots=True)
class ProjectionSpec:
    """A projection of the registry: its name (its tracking row, its tables, its place in a
    consumer's name), its version and what it holds.

    A read-model copy keeps each projection's version with its tracking row. A projector that
    finds another version there (the code that writes it changed what it writes) empties the
    projection and projects it again from the log, alone: the others keep their rows.
    """

    name: str
    version: int
    holds: str


# Every projection, in the order a projector that runs several applies them.
REGISTRY: tuple[ProjectionSpec, ...] = (
    ProjectionSpec("sessions", 1, "messages tree, message search, compaction overlays"),
    ProjectionSpec("context", 1, "context blocks, cached prompts, loaded skills, search entries"),
    ProjectionSpec("registry", 1, "registered sessions: names, models, usage, last activity"),
    ProjectionSpec("memory", 1, "memory profiles, raw messages, memories, history, search"),
    # Run by the indexer (it embeds texts with a model: slow, so apart from the others).
    # v2: a memory made from messages is embedded without their text (they have vectors).
    ProjectionSpec("vectors", 2, "embeddings of memories and raw messages"),
    # Run by the analytics worker (a consumer of its own: volumes may lag, reads never wait).
    ProjectionSpec("analytics", 1, "daily volumes per namespace, model and source"),
)
# Their names, in that order (what a rebuild rebuilds unless told otherwise).
PROJECTIONS: tuple[str, ...] = tuple(spec.name for spec in REGISTRY)
# What the indexer worker runs (a model embeds texts: seconds per batch) ...
INDEXER_PROJECTIONS: tuple[str, ...] = ("vectors",)
# ... what the analytics worker runs (daily volumes: nothing a request reads waits for them) ...
ANALYTICS_PROJECTIONS: tuple[str, ...] = ("analytics",)
# ... and what the projector worker runs unless told otherwise: all the others.
PROJECTOR_PROJECTIONS: tuple[str, ...] = tuple(
    name for name in PROJECTIONS if name not in INDEXER_PROJECTIONS + ANALYTICS_PROJECTIONS
)
# Every projection built without an embedding model (a rebuild's or verify's default then).
MODEL_FREE_PROJECTIONS: tuple[str, ...] = tuple(
    name for name in PROJECTIONS if name not in INDEXER_PROJECTIONS
)
# Projections that read only Agent Memory events (their consumers filter on profile subjects).
MEMORY_PROJECTIONS: frozenset[str] = frozenset({"memory", "vectors"})
VERSIONS: dict[str, int] = {spec.name: spec.version for spec in REGISTRY}
# Projections a projector may run per partition: each of their writes concerns the aggregate of
# its event alone (a session's registry row is touched by its session's events, in the same
# partition). Analytics counts a profile's events by its sessions' models, and the indexer
# embeds as it goes: they consume the whole stream, in its order.
PARTITIONABLE: tuple[str, ...] = ("sessions", "context", "registry", "memory")


def select_projections(
    names: Sequence[str] | None, default: Sequence[str] = PROJECTIONS
) -> list[str]:
    """``names`` checked against :data:`PROJECTIONS` (``default`` when empty).

    Raises:
        InvalidInputError: an unknown projection name.
    """
    if not names:
        return list(default)
    unknown = [n for n in names if n not in PROJECTIONS]
    if unknown:
        raise InvalidInputError(
            f"unknown projection {unknown[0]!r}; known: {', '.join(sorted(PROJECTIONS))}"
        )
    # In registry order, once each: the order a projector applies them in.
    return [name for name in PROJECTIONS if name in names]


def parse_projections(
    option: str, text: str | None, default: Sequence[str] = PROJECTIONS
) -> list[str]:
    """A comma-separated list of projection names (``sessions,context``), checked; ``default``
    for ``None`` or an empty text.

    Raises:
        InvalidInputError: an unknown projection name (named with ``option``).
    """
    names = [name.strip() for name in (text or "").split(",") if name.strip()]
    try:
        return select_projections(names, default)
    except InvalidInputError as error:
        raise InvalidInputError(f"{option}: {error}") from None
