"""The one error hierarchy of memstream; every public error derives from ``MemstreamError``."""

from __future__ import annotations


class MemstreamError(Exception):
    """Base class of every error memstream raises on purpose."""


class InvalidInputError(MemstreamError, ValueError):
    """An argument breaks a documented limit or shape; nothing was written."""


class NotFoundError(MemstreamError, LookupError):
    """A referenced entity does not exist."""


class MessageNotFoundError(NotFoundError):
    """A message id given as parent or update target does not exist in the session."""


class ConcurrencyError(MemstreamError):
    """An aggregate kept changing under a command after the bounded number of retries."""


class UnavailableError(MemstreamError):
    """NATS or the read-model database cannot be reached."""


class ReadModelDamagedError(UnavailableError):
    """The read-model database is corrupt or not a memstream read model; it is rebuilt from the
    log (by the process that runs the projector, or ``memstream projections rebuild``).

    ``reason`` is what the database said (the message itself unless given apart).
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = message if reason is None else reason


class ReadModelAheadError(ReadModelDamagedError):
    """The read-model copy records events the log does not hold: the log lost its tail (an OS
    crash with lazy fsync, a restored backup, a cluster that lost writes) or holds other events
    at those sequences. Serving the copy would serve what the log no longer says; it is
    rebuilt from the log (by the embedded default on its own, else with
    ``memstream projections rebuild``)."""


class LogGapError(UnavailableError):
    """The log served an aggregate's events with versions missing in between: the copy of the
    stream that answered lost events it had acknowledged (a server's damaged store files, for
    one). Nothing is decided on it; ``memstream doctor`` names the servers and their state."""


class ReadModelUnavailableError(UnavailableError):
    """The read-model database cannot be reached (a PostgreSQL server down or unreachable).
    Writes go on (decided on the aggregate's events in the log); reads fail with it until the
    database returns, and the projectors resume where they stopped."""


class CompactionNotConfiguredError(MemstreamError, RuntimeError):
    """``compact()`` was called on a session with no compaction function (``on_compaction``)."""


class ProjectorRunningError(MemstreamError):
    """A projector already runs for this read-model copy (one copy never has two)."""


class ProjectionLagError(MemstreamError):
    """A read model did not reach the caller's last write within the timeout."""

    def __init__(self, projection: str, wanted: int, reached: int, timeout: float) -> None:
        self.projection = projection
        self.wanted = wanted
        self.reached = reached
        self.timeout = timeout
        super().__init__(
            f"projection {projection!r} reached stream sequence {reached}, "
            f"not {wanted}, within {timeout:g} s"
        )


class ExtractionLagError(ProjectionLagError):
    """An ingest or remembered text was not extracted (and indexed) within the timeout."""

    def __init__(self, source: str, profile: str, wanted: int, timeout: float) -> None:
        MemstreamError.__init__(
            self,
            f"the extraction of {source} in profile {profile!r} did not finish within "
            f"{timeout:g} s; is an extractor worker running?",
        )
        self.projection = "extractor"
        self.wanted = wanted
        self.reached = 0
        self.timeout = timeout


class IncompatibleServerError(UnavailableError):
    """The NATS server is older than a feature memstream needs (see ``workers/server_version``)."""


class RedactedError(MemstreamError):
    """Stands in, in a chain of causes, for a driver exception whose text held a credential
    (:func:`memstream.domain.redaction.redacted_exception`); never raised on its own."""
