"""Test helpers that act on a read-model copy through its ports, on either backend."""

from __future__ import annotations

from memstream.projections.ports import ReadModelCopy


def drop_projection(copy: ReadModelCopy, projection: str) -> None:
    """Empty ``projection`` in ``copy`` and reset its position, as a user dropping a read model
    to rebuild it would (beside a live projector: no projector lock is taken)."""
    store = copy.store((projection,), repair=False)
    try:
        store.drop(projection)
    finally:
        store.close()


# What verify() checks by default for the copy of a client that runs the workers in its
# process (its analytics worker has a consumer): the projector's projections and analytics.
EMBEDDED_VERIFIED = ("sessions", "context", "registry", "memory", "analytics")
