"""``memstream doctor``: what is wrong with a deployment, and the command that mends each.

A pure judgement over two readings of :class:`~memstream.workers.admin.status.PlatformStatus` (taken
a moment apart, so that a projection behind the log can be told moving from stalled) and the
servers' versions: the log servers' fsync policy, the read-model copy against the log, dead
letters, lag and the stream's replicas.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from memstream.workers.admin.status import PlatformStatus
from memstream.workers.log.log_position import REBUILD_COMMAND

# How long doctor waits between its two readings of the projections' positions.
SAMPLE_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Finding:
    """One check: what it found, whether that is wrong, and the command that mends it."""

    check: str
    ok: bool
    detail: str
    mend: str | None = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def diagnose(
    first: PlatformStatus,
    second: PlatformStatus,
    *,
    embedded: bool,
    idle: bool,
    versions: dict[str, str],
) -> list[Finding]:
    """The findings of two readings of one deployment's status (``second`` is the later;
    ``embedded``: the data dir's own server; ``idle``: no process runs the data dir's
    projectors now, so lag waits for the next one; ``versions``: each server's version)."""
    findings = _durability(second, embedded)
    findings.append(_log_position(second, embedded))
    findings.append(_dead_letters(second))
    findings += _lag(first, second, embedded, idle)
    findings += _replicas(second)
    findings += [
        Finding("version", True, f"{name} {version}") for name, version in versions.items()
    ]
    return findings


def _durability(status: PlatformStatus, embedded: bool) -> list[Finding]:
    found = []
    for sync in status.durability:
        if sync.durable is False:
            mend = (
                "unset MEMSTREAM_NATS_SYNC (or set it to always) and restart memstream"
                if embedded
                else "set `jetstream { sync_interval: always }` in each server's config and "
                "restart the servers one at a time"
            )
            found.append(Finding("durability", False, sync.describe(), mend))
        else:
            found.append(Finding("durability", True, sync.describe()))
    return found


def _log_position(status: PlatformStatus, embedded: bool) -> Finding:
    if status.log_gap is None:
        return Finding("read model", True, f"copy {status.copy_id} stands on the log")
    mend = REBUILD_COMMAND
    if embedded:
        mend += " (or open the data dir with memstream up: it rebuilds it by itself)"
    return Finding("read model", False, f"copy {status.copy_id}: {status.log_gap}", mend)


def _dead_letters(status: PlatformStatus) -> Finding:
    count = status.dead_letter_count
    if not count:
        return Finding("dead letters", True, "none")
    projections = sorted({str(letter["projection"]) for letter in status.dead_letters})
    return Finding(
        "dead letters",
        False,
        f"{count} event(s) could not be applied (latest in {', '.join(projections)})",
        f"memstream status --dead-letters {min(count, 50)} shows them; once their cause is "
        f"fixed, {REBUILD_COMMAND} {','.join(projections)}",
    )


def _lag(
    first: PlatformStatus, second: PlatformStatus, embedded: bool, idle: bool
) -> list[Finding]:
    before = {p.name: p.tracked_seq for p in first.projections}
    found = []
    for projection in second.projections:
        if projection.lag <= 0:
            continue
        moving = projection.tracked_seq > before.get(projection.name, projection.tracked_seq)
        if moving or idle:
            how = "catching up" if moving else "the next process on the data dir catches up"
            found.append(
                Finding("lag", True, f"{projection.name} is {projection.lag} behind: {how}")
            )
            continue
        mend = (
            "memstream up (a process that owns the data dir runs the projectors)"
            if embedded
            else f"memstream worker {'indexer' if projection.name == 'vectors' else 'projector'}"
        )
        found.append(
            Finding(
                "lag",
                False,
                f"{projection.name} is {projection.lag} events behind the log and not moving",
                mend,
            )
        )
    if not found:
        found.append(Finding("lag", True, "every projection is at the log's end"))
    return found


def _replicas(status: PlatformStatus) -> list[Finding]:
    found = []
    for replica in status.replicas:
        if replica.offline or not replica.current:
            state = "offline" if replica.offline else f"not current ({replica.lag} behind)"
            found.append(
                Finding(
                    "replica",
                    False,
                    f"stream replica {replica.server} is {state}",
                    f"restart nats-server {replica.server}; if its store is damaged, move the "
                    "stream's directory aside and let it catch up from its peers",
                )
            )
    for server, line in status.damaged_copies:
        found.append(
            Finding(
                "replica",
                False,
                line,
                f"stop nats-server {server}, move jetstream/<account>/streams/"
                f"{status.stream.name} in its store aside and start it again: it copies the "
                f"stream anew from the others (with a spare server: nats stream cluster "
                f"peer-remove {status.stream.name} {server})",
            )
        )
    if status.replicas and not found:
        names = ", ".join(r.server for r in status.replicas)
        found.append(Finding("replica", True, f"every replica is current ({names})"))
    return found
