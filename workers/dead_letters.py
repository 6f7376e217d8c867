"""Dead letters of erased events: what a purge record makes a read-model copy forget.

A dead letter keeps an event's subject (which names its session or profile) and the error it
raised (which may quote it). When ``admin purge`` erases a deleted session or profile from the
log, every copy must drop those too, or the erasure leaves personal data in each copy's dead
letters that a rebuild from the purged log would not have. The purge record
(``purge.events_purged``) names the sequences of the erased subjects' last events only, so
whoever applies it asks the stream: a dead letter's subject whose last event is one of those
(it is being erased), or that holds no event any more, or a dead letter whose own event is gone,
belongs to what was erased.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager

from memstream.domain.errors import InvalidInputError
from memstream.domain.purge_log import PurgeLog
from memstream.projections.ports import LogRecord, ReadModelStore
from memstream.workers.log.event_log import EventLog
from memstream.workers.log.subjects import parse_subject

logger = logging.getLogger(__name__)

PURGE_AGGREGATE = "purge"


def is_purge_record(subject: str) -> bool:
    """Whether ``subject`` is a namespace's purge log (cheap: it is asked of every batch)."""
    if f".{PURGE_AGGREGATE}." not in subject:
        return False
    try:
        return parse_subject(subject).aggregate == PURGE_AGGREGATE
    except InvalidInputError:
        return False


def purged_sequences(records: Sequence[LogRecord]) -> dict[str, set[int]]:
    """The last-event sequences the purge records among ``records`` name, by namespace (an
    undecodable record names nothing: it is a dead letter itself)."""
    purged: dict[str, set[int]] = {}
    for record in records:
        if not is_purge_record(record.subject):
            continue
        try:
            event = record.decode()
        except Exception:  # the projections dead-letter it
            continue
        if isinstance(event, PurgeLog.EventsPurged):
            purged.setdefault(record.namespace(), set()).update(event.sequences)
    return purged


async def erased_dead_letters(
    log: EventLog, store: ReadModelStore, purged: dict[str, set[int]]
) -> list[tuple[str, int]]:
    """The ``(projection, seq)`` of the store's dead letters that belong to subjects the
    purges erase, found by asking the stream (one lookup per subject, one per event only where
    the subject holds events again).

    Raises:
        UnavailableError: NATS did not answer.
    """
    if not purged:
        return []
    erased: list[tuple[str, int]] = []
    last_of: dict[str, int] = {}
    for letter in store.dead_letters():
        projection, seq, stored = str(letter["projection"]), letter["seq"], letter["subject"]
        if not isinstance(seq, int) or not isinstance(stored, str):
            continue
        try:
            subject = parse_subject(stored)
        except InvalidInputError:
            continue  # not one of memstream's subjects: no session or profile
        sequences = purged.get(subject.namespace)
        if sequences is None or subject.aggregate == PURGE_AGGREGATE:
            continue
        name = str(subject)
        if name not in last_of:
            last_of[name] = await log.last_seq(name)
        last = last_of[name]
        # Being erased (its last event is named), erased already, or erased and written again.
        if last in sequences or last == 0 or (seq < last and not await log.holds(seq)):
            erased.append((projection, seq))
    return erased


async def forget_erased_dead_letters(
    log: EventLog, store: ReadModelStore, records: Sequence[LogRecord]
) -> int:
    """After ``records`` were applied to ``store``: delete the dead letters of what the purge
    records among them erase; how many were deleted. Only for a store no one else writes
    through meanwhile (its projector between batches, a rebuild between batches).

    Raises:
        UnavailableError: NATS did not answer.
    """
    letters = await erased_dead_letters(log, store, purged_sequences(records))
    if not letters:
        return 0
    forgotten = store.forget_dead_letters(letters)
    logger.info("forgot %d dead letters of events erased by a purge", forgotten)
    return forgotten


async def forget_erased_while_projecting(
    log: EventLog,
    store: ReadModelStore,
    purges: Sequence[LogRecord],
    alone: Callable[[], AbstractAsyncContextManager[ReadModelStore]],
    name: str,
) -> None:
    """Delete a copy's dead letters of the events ``purges`` (purge records, applied) erase,
    with the store to itself (``alone()``: the projector ``name``'s, with no own events held
    or open meanwhile). A failure is logged: the letters stay until the next purge record, or a
    rebuild."""
    try:
        letters = await erased_dead_letters(log, store, purged_sequences(purges))
        if not letters:
            return
        async with alone() as exclusive:
            forgotten = await asyncio.to_thread(exclusive.forget_dead_letters, letters)
    except Exception:
        logger.warning(
            "projector %s: the dead letters of events a purge erased are kept for now",
            name,
            exc_info=True,
        )
        return
    logger.info("projector %s: forgot %d dead letters of erased events", name, forgotten)
