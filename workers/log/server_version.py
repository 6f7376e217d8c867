"""The nats-server version each feature memstream uses needs, checked when a client connects.

The server reports its version in the INFO line it greets every client with (nats-py:
``client.connected_server_version``). An older server does not refuse what it does not know: a
2.9 server ignores the atomic-batch headers and stores each message of a batch on its own, and
answers a batch direct get with one message, so a write that should be all-or-nothing is not and
reads stall until they time out. Checking the version at connect turns that into one line.

Minimums, from the nats-server repository (the first release tag that contains the change):

- JetStream: v2.2.0, its first general-availability release (March 2021).
- ``Nats-Expected-Last-Subject-Sequence`` (optimistic concurrency per subject): v2.3.1, commit
  bb84ef7 "Added ability to match based on last expected sequence per subject".
- ``allow_direct`` (direct get from a stream): v2.9.0, commit c8a730c.
- Batch direct get (``next_by_subj`` with ``batch``, the 204 end-of-batch status and
  ``Nats-Num-Pending``; :meth:`EventLog.read_batch`): v2.11.0, nats-server PR #4981 "Batch support
  for direct gets from streams" (ADR-31).
- ``allow_atomic`` atomic batch publish (``Nats-Batch-Id``/``-Sequence``/``-Commit``; multi-message
  commands and the eventsourcing adapter): v2.12.0, commit 1240928 "(2.12) Initial atomic batch
  publish"; the NATS 2.12 release notes list it first (ADR-50).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from nats.aio.client import Client

from memstream.domain.errors import IncompatibleServerError
from memstream.domain.redaction import redact_url

logger = logging.getLogger(__name__)

Version = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class Feature:
    """A server feature memstream relies on, and the first nats-server release that has it."""

    name: str
    minimum: Version


JETSTREAM = Feature("JetStream", (2, 2, 0))
EXPECTED_LAST_SUBJECT_SEQUENCE = Feature("Nats-Expected-Last-Subject-Sequence", (2, 3, 1))
DIRECT_GET = Feature("stream direct get (allow_direct)", (2, 9, 0))
BATCH_DIRECT_GET = Feature("batch direct get (next_by_subj + batch)", (2, 11, 0))
ATOMIC_BATCH = Feature("atomic batch publish (allow_atomic)", (2, 12, 0))

# Everything memstream's log needs: the Session API, the projector and the eventsourcing adapter
# all use one stream configured with allow_direct and allow_atomic.
REQUIRED: tuple[Feature, ...] = (
    JETSTREAM,
    EXPECTED_LAST_SUBJECT_SEQUENCE,
    DIRECT_GET,
    BATCH_DIRECT_GET,
    ATOMIC_BATCH,
)


def _text(version: Version) -> str:
    return ".".join(map(str, version))


def server_version(client: Client) -> tuple[Version, str] | None:
    """The connected server's ``(major, minor, patch)`` and its version as reported; ``None`` if
    it reported none or one that is not a semantic version."""
    reported = client.connected_server_version
    try:
        version = (int(reported.major), int(reported.minor), int(reported.patch))
        label = _text(version) + (f"-{reported.dev}" if reported.dev else "")
    except (ValueError, TypeError):
        return None
    if version == (0, 0, 0):  # nats-py's "0.0.0-unknown": no INFO version
        return None
    return version, label


def missing_features(version: Version, features: tuple[Feature, ...] = REQUIRED) -> list[Feature]:
    """The features a server of ``version`` lacks (a release candidate counts as its release)."""
    return [feature for feature in features if version < feature.minimum]


def check_server(client: Client, features: tuple[Feature, ...] = REQUIRED) -> None:
    """Refuse a server older than a feature in ``features`` needs.

    Raises:
        IncompatibleServerError: one line naming the server's version, each missing feature with
            the version it needs, and the version to upgrade to.
    """
    found = server_version(client)
    if found is None:
        logger.debug("nats: the server reported no usable version; not checked")
        return
    version, label = found
    missing = missing_features(version, features)
    if not missing:
        return
    url = client.connected_url.geturl() if client.connected_url is not None else "?"
    needs = ", ".join(f"{f.name} needs {_text(f.minimum)}" for f in missing)
    upgrade = _text(max(f.minimum for f in missing))
    raise IncompatibleServerError(
        f"nats-server {label} at {redact_url(url)} is too old for memstream: {needs}; "
        f"upgrade nats-server to {upgrade} or later"
    )
