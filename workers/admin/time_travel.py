"""Read models as they were: built from the log up to a sequence, or up to a time.

``--as-of`` takes a stream sequence (``120``) or an ISO 8601 time (``2026-01-01T00:00``, UTC
unless it names a zone): the state after the last event the stream stored at or before it.
``projections rebuild --as-of --into`` builds such a copy where the operator says; read
commands answer from a cached copy per sequence under the data dir (``as-of/``), built on first
use and kept for the next (the :data:`CACHE_KEEP` most recently used are kept).

A purge (``memstream admin purge``) erases events that cached copies built before it still
hold, in every data dir that has some, on any host. Each cached copy records how many purge
records the stream held when it was built (:func:`purge_count`); a read that finds the count
changed deletes the stream's cached copies and builds anew from the purged log.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NoReturn

import nats.errors
import nats.js.errors
from nats.js import api

from memstream.domain.errors import InvalidInputError, ReadModelDamagedError, UnavailableError
from memstream.projections.ports import ReadModelCopy, ReadModels
from memstream.projections.read_models import DATABASE_FILE, read_models_at
from memstream.projections.registry import MODEL_FREE_PROJECTIONS, select_projections
from memstream.workers.admin.rebuild import Progress, catch_up
from memstream.workers.log.event_log import EventLog
from memstream.workers.log.subjects import encode_token
from memstream.workers.pull import Puller
from memstream.workers.runtime.data_dir import private_dir, write_private

CACHE_DIR = "as-of"
CACHE_KEEP = 8
# In a cached copy's folder: the stream's purge count when it was built.
PURGES_FILE = "purges"
_TIME_STEP = timedelta(microseconds=1)


def parse_as_of(text: str) -> int | datetime:
    """``--as-of``: a stream sequence (an integer ≥ 0) or an aware time.

    Raises:
        InvalidInputError: neither.
    """
    value = text.strip()
    if value.isdigit():
        return int(value)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInputError(
            f"--as-of {text!r} is neither a stream sequence nor an ISO 8601 time"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


async def sequence_as_of(log: EventLog, as_of: int | datetime) -> int:
    """The stream sequence ``as_of`` names: a sequence as given (at most the stream's last), or
    the last sequence stored at or before a time (0: the stream held nothing then).

    Raises:
        InvalidInputError: a sequence after the stream's last.
        UnavailableError: NATS did not answer.
    """
    last = await log.stream_last_seq()
    if isinstance(as_of, int):
        if as_of > last:
            raise InvalidInputError(f"--as-of {as_of} is after the stream's last sequence {last}")
        return as_of
    config = api.ConsumerConfig(
        deliver_policy=api.DeliverPolicy.BY_START_TIME,
        opt_start_time=as_of + _TIME_STEP,
        ack_policy=api.AckPolicy.NONE,
        filter_subject=f"{log.subject_prefix}.>",
        inactive_threshold=30.0,
        mem_storage=True,
    )
    try:
        puller, info = await Puller.create(log.client, log.stream, config)
    except (nats.errors.Error, nats.js.errors.Error, OSError, TimeoutError) as error:
        raise UnavailableError(f"cannot read stream {log.stream!r}: {error!r}") from error
    try:
        if not info.num_pending:
            return last  # nothing stored after the time
        msgs = await puller.fetch(1, log.timeout)
    except TimeoutError as error:
        raise UnavailableError(f"reading stream {log.stream!r} timed out") from error
    finally:
        await puller.close()
    return msgs[0].metadata.sequence.stream - 1 if msgs else last


async def build_as_of(
    log: EventLog,
    copy: ReadModelCopy,
    seq: int,
    names: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
) -> int:
    """Make ``copy`` hold the read models ``names`` (default: all but ``vectors``) as of
    ``seq``: a copy past it is emptied and rebuilt, one short of it is carried on. Returns
    ``seq``.

    Raises:
        InvalidInputError: an unknown projection name.
    """
    selected = select_projections(names, MODEL_FREE_PROJECTIONS)
    if not set(selected) <= set(MODEL_FREE_PROJECTIONS):
        raise InvalidInputError(
            f"--as-of builds {', '.join(MODEL_FREE_PROJECTIONS)}; not "
            f"{', '.join(sorted(set(selected) - set(MODEL_FREE_PROJECTIONS)))} (embeddings are "
            "made again by a full rebuild)"
        )
    store = copy.store(selected)
    try:
        positions = store.positions()
        if max(positions.values()) > seq:
            for projection in store.projections:
                store.drop(projection)
        if min(store.positions().values()) < seq:
            await catch_up(log, store, until=seq, progress=progress)
    finally:
        store.close()
    return seq


def cached_copy(data_dir: Path, stream: str, seq: int) -> ReadModelCopy:
    """The cached as-of copy of ``stream`` at ``seq`` under ``data_dir`` (0700; marked used)."""
    folder = private_dir(data_dir / CACHE_DIR / f"{encode_token(stream)}-{seq}")
    with contextlib.suppress(OSError):
        os.utime(folder)
    return read_models_at(str(folder / DATABASE_FILE))


async def purge_count(log: EventLog) -> int:
    """How many purge records (``purge.events_purged``, every namespace) the stream holds:
    each purge that erases anything adds at least one, and none is ever removed.

    Raises:
        UnavailableError: NATS did not answer.
    """
    try:
        info = await log.js.stream_info(
            log.stream, subjects_filter=f"{log.subject_prefix}.*.purge.>"
        )
    except (nats.errors.Error, nats.js.errors.Error, OSError, TimeoutError) as error:
        raise UnavailableError(f"cannot read stream {log.stream!r}: {error!r}") from error
    return sum((info.state.subjects or {}).values())


def forget_purged_copies(data_dir: Path, stream: str, purges: int) -> list[Path]:
    """Delete the cached copies of ``stream`` built under another purge count than
    ``purges`` (or recording none: built by an older memstream): they may hold what a purge
    erased since. Returns those deleted."""
    root = data_dir / CACHE_DIR
    if not root.is_dir():
        return []
    prefix = f"{encode_token(stream)}-"
    deleted = []
    for folder in root.iterdir():
        name = folder.name
        if not (name.startswith(prefix) and name[len(prefix) :].isdigit()):
            continue
        if folder.is_symlink() or not folder.is_dir():
            continue
        try:
            with (folder / PURGES_FILE).open("rb") as file:
                recorded = file.read(32).decode("ascii", "replace").strip()
        except OSError:
            recorded = ""
        if recorded != str(purges) and _delete(folder):
            deleted.append(folder)
    return deleted


def _delete(folder: Path) -> bool:
    """Delete a cached copy's folder and its files; False if it could not be (or is gone)."""
    try:
        for file in folder.iterdir():
            with contextlib.suppress(OSError):
                file.unlink()
        folder.rmdir()
    except OSError:
        return False
    return True


def prune_cache(data_dir: Path, keep: int = CACHE_KEEP) -> list[Path]:
    """Delete all but the ``keep`` most recently used cached copies; returns those deleted."""
    root = data_dir / CACHE_DIR
    if not root.is_dir():
        return []
    folders = sorted(
        (p for p in root.iterdir() if p.is_dir() and not p.is_symlink()),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    return [folder for folder in folders[keep:] if _delete(folder)]


def clear_cache(data_dir: Path) -> int:
    """Delete every cached as-of copy (their state no longer holds: e.g. after a purge)."""
    return len(prune_cache(data_dir, keep=0))


def _damaged(error: ReadModelDamagedError) -> NoReturn:
    raise ReadModelDamagedError(
        f"the cached as-of read model is damaged ({error.reason}); delete it to rebuild it",
        reason=error.reason,
    ) from error


async def as_of_reads(
    log: EventLog,
    data_dir: Path,
    as_of: int | datetime,
    *,
    progress: Progress | None = None,
) -> tuple[int, ReadModels]:
    """The sequence ``as_of`` names and the read models as of it (from the cache, built on
    first use). The caller closes nothing: the reader lives as long as the process."""
    seq = await sequence_as_of(log, as_of)
    purges = await purge_count(log)
    forget_purged_copies(data_dir, log.stream, purges)
    copy = cached_copy(data_dir, log.stream, seq)
    # Recorded before the build: a purge meanwhile makes the next read build it again.
    marker = data_dir / CACHE_DIR / f"{encode_token(log.stream)}-{seq}" / PURGES_FILE
    try:
        write_private(marker, str(purges))
    except OSError as error:
        raise UnavailableError(f"cannot write {marker}: {error}") from None
    await build_as_of(log, copy, seq, progress=progress)
    prune_cache(data_dir)
    return seq, copy.reader(on_damage=_damaged)
