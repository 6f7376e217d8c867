"""memstream: an event-sourced memory platform for AI agents (sessions and agent memory)."""

from memstream.client import Memstream, connect
from memstream.domain.errors import (
    ConcurrencyError,
    InvalidInputError,
    MemstreamError,
    MessageNotFoundError,
    NotFoundError,
    ProjectionLagError,
    UnavailableError,
)
from memstream.projections.recent_history import RecentHistory
from memstream.session import Session
from memstream.settings import Settings

__all__ = [
    "ConcurrencyError",
    "InvalidInputError",
    "Memstream",
    "MemstreamError",
    "MessageNotFoundError",
    "NotFoundError",
    "ProjectionLagError",
    "RecentHistory",
    "Session",
    "Settings",
    "UnavailableError",
    "connect",
]
