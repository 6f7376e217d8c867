"""Backup, restore and migration of the log: JSONL exports read back into a stream.

An export line (see ``docs/events.md``, "Export lines") carries the event's subject, its
payload and, under ``nats_headers``, the headers it was stored with. Import publishes each line
again, in file order, with the same headers (so the same ``Nats-Msg-Id``, command id, actor,
causation and correlation) and the same payload, under the target stream's subject prefix.
Optimistic-concurrency headers (``Nats-Expected-*``) are dropped: they name the source stream's
sequences. The stream stores each event at import time (its own stored time); the decision time
stays in the payload's ``time``.

A purge record (``purge.events_purged``) names events by their source sequences: import renumbers
them to the sequences the named events got here and leaves out those the export does not hold
(erased), the one payload it changes (see :func:`_renumbered`).

The whole file is checked before anything is published, so a bad line leaves the stream as it
was. Events go out as JetStream atomic batches (all or none each); a batch the stream has stored
already (an import run again within the duplicate window) is acknowledged as duplicates.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import nats.errors
import nats.js.errors

from memstream.domain.errors import InvalidInputError, UnavailableError
from memstream.workers.log.codec import (
    H_ACTOR,
    H_CAUSATION_ID,
    H_COMMAND_ID,
    H_CORRELATION_ID,
    H_MSG_ID,
    H_SCHEMA,
)
from memstream.workers.log.event_log import EventLog, ExpectedSequenceMismatch, OutgoingMessage

# Events per atomic batch, and the payload bytes a batch may hold, before it is cut at the next
# group (an atomic batch of the source, or one event): a group is never split, and the server
# takes at most 1,000 messages per batch (a source batch holds at most 500).
IMPORT_BATCH = 250
IMPORT_BATCH_BYTES = 4 * 1024 * 1024
# Headers an import never sends again: the source stream's concurrency guards and batch framing.
_DROPPED_PREFIX = "Nats-Expected-"
_BATCH_ID = "Nats-Batch-Id"
_DROPPED = frozenset({_BATCH_ID, "Nats-Batch-Sequence", "Nats-Batch-Commit"})
_TOKEN = re.compile(r"[A-Za-z0-9_=\-]+")
_PURGE_TYPE = "purge.events_purged"
_HEADER_NAME = re.compile(r"[!-9;-~]+")  # printable ASCII without ':' (RFC 7230 token-ish)
MAX_LINE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ImportEvent:
    """One event of an export, ready to publish: ``subject`` under the target's prefix."""

    line: int
    subject: str
    payload: bytes
    headers: dict[str, str]
    msg_id: str
    group: str  # what it was written with all or none: its source batch's id, or its own id
    source_seq: int = 0  # its sequence in the source stream (0: the line does not say)
    # A purge record's payload (purge.events_purged), whose sequences name source events
    purge: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ImportResult:
    """What an import did: events stored, events the stream had already, and the stream's last
    sequence afterwards."""

    stored: int
    duplicates: int
    last_seq: int

    def as_json(self) -> dict[str, int]:
        return {"stored": self.stored, "duplicates": self.duplicates, "last_seq": self.last_seq}


def _bad(line: int, what: str) -> InvalidInputError:
    return InvalidInputError(f"import line {line}: {what}")


def encode_json_payload(payload: Any) -> bytes:
    """A payload as memstream writes JSON: compact, UTF-8, keys in their given order (the
    bytes of the original for every event memstream or eventsourcing wrote)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


def parse_line(text: str, line: int, prefix: str) -> ImportEvent:
    """One export line as an event to publish under ``prefix``.

    Raises:
        InvalidInputError: the line is not an export line (naming the line and what is wrong).
    """
    try:
        data = json.loads(text)
    except ValueError as error:
        raise _bad(line, f"not JSON ({error})") from None
    if not isinstance(data, dict):
        raise _bad(line, f"a JSON {type(data).__name__}, not an object")
    subject = data.get("subject")
    if not isinstance(subject, str):
        raise _bad(line, "no 'subject' string")
    tokens = subject.split(".")
    if len(tokens) == 5 and tokens[4].isascii() and tokens[4].isdigit():
        # Exported from a partitioned stream: published without the partition, which the
        # target's own partitioning (if any) computes again.
        tokens = tokens[:4]
        subject = ".".join(tokens)
    if len(tokens) != 4 or not all(_TOKEN.fullmatch(token) for token in tokens):
        raise _bad(
            line,
            f"subject {subject[:200]!r} is not <prefix>.<namespace>.<kind>.<id>[.<partition>]",
        )
    if "payload" not in data:
        raise _bad(line, "no 'payload'")
    payload = data["payload"]
    raw_headers = data.get("nats_headers")
    group = ""
    if raw_headers is None:
        headers = _headers_from_audit(data.get("headers"), line)
    elif isinstance(raw_headers, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw_headers.items()
    ):
        headers = {
            name: value
            for name, value in raw_headers.items()
            if not name.startswith(_DROPPED_PREFIX) and name not in _DROPPED
        }
        group = raw_headers.get(_BATCH_ID, "")
    else:
        raise _bad(line, "'nats_headers' is not an object of strings")
    for name, value in headers.items():
        if not _HEADER_NAME.fullmatch(name) or "\r" in value or "\n" in value:
            raise _bad(line, f"header {name[:100]!r} is not a valid NATS header")
    msg_id = headers.get(H_MSG_ID, "")
    if not msg_id:
        raise _bad(line, f"no {H_MSG_ID} header: an event cannot be imported without its id")
    if isinstance(payload, str) and H_SCHEMA not in headers and not _is_json_text(payload):
        body = payload.encode()  # a payload that was not JSON, exported as its text
    else:
        body = encode_json_payload(payload)
    target = f"{prefix}.{tokens[1]}.{tokens[2]}.{tokens[3]}"
    source_seq = data.get("seq")
    if not isinstance(source_seq, int) or isinstance(source_seq, bool) or source_seq < 0:
        source_seq = 0
    purge = None
    if isinstance(payload, dict) and payload.get("type") == _PURGE_TYPE:
        sequences = payload.get("sequences")
        if not isinstance(sequences, list) or not all(
            isinstance(seq, int) and not isinstance(seq, bool) for seq in sequences
        ):
            raise _bad(line, f"a {_PURGE_TYPE} event whose 'sequences' are not integers")
        purge = payload
    return ImportEvent(line, target, body, headers, msg_id, group or msg_id, source_seq, purge)


def _is_json_text(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _headers_from_audit(audit: object, line: int) -> dict[str, str]:
    """The stored headers of a contract event, from the audit view of an export written before
    exports carried ``nats_headers``."""
    if not isinstance(audit, dict) or audit.get("schema") is None:
        raise _bad(line, "no 'nats_headers' (and no contract audit headers to rebuild them from)")
    fields = {key: str(value) for key, value in audit.items() if value is not None}
    msg_id = fields.get("msg_id", "")
    command = fields.get("command_id", "")
    headers = {H_SCHEMA: fields["schema"], H_MSG_ID: msg_id, H_ACTOR: fields.get("actor", "")}
    if command and command != msg_id.partition(":")[0]:
        headers[H_COMMAND_ID] = command
    for key, name in (("causation_id", H_CAUSATION_ID), ("correlation_id", H_CORRELATION_ID)):
        if fields.get(key) and fields[key] != command:
            headers[name] = fields[key]
    return headers


def read_lines(source: IO[str]) -> Iterator[tuple[int, str]]:
    """The non-blank lines of ``source`` with their 1-based numbers.

    Raises:
        InvalidInputError: a line is longer than :data:`MAX_LINE_BYTES`.
    """
    for number, text in enumerate(source, start=1):
        if len(text) > MAX_LINE_BYTES:
            raise _bad(number, f"is {len(text)} characters; the limit is {MAX_LINE_BYTES}")
        if text.strip():
            yield number, text


def check_file(
    path: Path, prefix: str, max_payload: int, referenced: set[int] | None = None
) -> int:
    """Check every line of the export at ``path``; return how many events it holds (and add
    the source sequences its purge records name to ``referenced``).

    Raises:
        InvalidInputError: a line is not an export line, or an event is larger than the
            server's ``max_payload``.
    """
    count = 0
    with path.open(encoding="utf-8", errors="strict") as source:
        try:
            for number, text in read_lines(source):
                event = parse_line(text, number, prefix)
                headers = event.headers.items()
                size = len(event.payload) + sum(len(k) + len(v) + 4 for k, v in headers)
                if max_payload and size + 64 > max_payload:
                    raise _bad(
                        number,
                        f"the event is {size} bytes; the NATS server's max_payload is "
                        f"{max_payload}",
                    )
                if event.purge is not None and referenced is not None:
                    referenced.update(event.purge["sequences"])
                count += 1
        except UnicodeDecodeError as error:
            raise InvalidInputError(f"import file {path} is not UTF-8: {error}") from None
    return count


def batches(events: Iterable[ImportEvent]) -> Iterator[list[ImportEvent]]:
    """Events cut into atomic batches of about :data:`IMPORT_BATCH` events or
    :data:`IMPORT_BATCH_BYTES` of payload, each cut between two groups (so the events a
    source wrote all or none are imported all or none)."""
    batch: list[ImportEvent] = []
    size = 0
    for event in events:
        full = len(batch) >= IMPORT_BATCH or size + len(event.payload) > IMPORT_BATCH_BYTES
        # A purge record starts a batch: the events it names are stored by then (and their
        # new sequences known).
        full = full or event.purge is not None
        if batch and full and event.group != batch[-1].group:
            yield batch
            batch, size = [], 0
        batch.append(event)
        size += len(event.payload)
    if batch:
        yield batch


async def stream_message_count(log: EventLog) -> int:
    """How many messages the stream holds now."""
    try:
        info = await log.js.stream_info(log.stream)
    except (nats.errors.Error, nats.js.errors.Error, OSError, TimeoutError) as error:
        raise UnavailableError(f"cannot read stream {log.stream}: {error!r}") from error
    return int(info.state.messages or 0)


async def import_events(
    log: EventLog,
    path: Path,
    *,
    force: bool = False,
    on_total: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Publish the events of the export at ``path`` into ``log``'s stream, in file order.

    ``on_total`` is told how many events the file holds once it is checked; ``on_progress``
    how many more went out after each batch.

    Raises:
        InvalidInputError: the stream holds events and ``force`` is not set, or a line of the
            file is not an export line (nothing is published then).
        UnavailableError: NATS did not acknowledge a batch in time (the events of the batches
            acknowledged before it are stored; the error says how many).
    """
    held = await stream_message_count(log)
    if held and not force:
        raise InvalidInputError(
            f"stream {log.stream!r} holds {held} events; import loads an export into an empty "
            "stream (use --force to append to it)"
        )
    max_payload = int(getattr(log.client, "max_payload", 0) or 0)
    referenced: set[int] = set()
    total = check_file(path, log.subject_prefix, max_payload, referenced)
    # Where the events that purge records name are stored in this stream (see _renumbered)
    stored_at: dict[int, int] = {}
    if on_total is not None:
        on_total(total)
    stored = duplicates = 0
    last_seq = 0
    with path.open(encoding="utf-8") as source:
        events = (parse_line(text, n, log.subject_prefix) for n, text in read_lines(source))
        for batch in batches(events):
            batch = [_renumbered(event, stored_at) for event in batch]
            try:
                result = await _publish_batch(log, batch)
            except UnavailableError as error:
                raise UnavailableError(
                    f"{error}; {stored + duplicates} events of {total} were imported before it "
                    f"(line {batch[0].line} on are not): run the import again with --force to "
                    "finish it within the stream's duplicate window"
                ) from error
            stored += result[0]
            duplicates += result[1]
            last_seq = max(last_seq, result[2])
            for event, seq in zip(batch, result[3], strict=True):
                if event.source_seq in referenced:
                    stored_at[event.source_seq] = seq
            if on_progress is not None:
                on_progress(len(batch))
    return ImportResult(stored, duplicates, last_seq or await log.stream_last_seq())


def _renumbered(event: ImportEvent, stored_at: dict[int, int]) -> ImportEvent:
    """A purge record with the sequences it names as this stream numbers them: the events it
    names that the export holds (a purge recorded but never carried out) are stored here under
    new sequences, and those it does not hold (erased) under none. Sequences of the source
    stream would name other events here, whose rows projections would then remove."""
    if event.purge is None:
        return event
    payload = dict(event.purge)
    payload["sequences"] = sorted(stored_at[s] for s in payload["sequences"] if s in stored_at)
    return replace(event, payload=encode_json_payload(payload), purge=payload)


async def _publish_batch(
    log: EventLog, batch: Sequence[ImportEvent]
) -> tuple[int, int, int, list[int]]:
    """(stored, duplicates, last sequence, each event's sequence) of one batch; one by one when
    the stream refuses the batch as a whole (some of its events are stored already)."""
    messages = [
        (event.subject, OutgoingMessage(event.payload, _without_id(event.headers), event.msg_id))
        for event in batch
    ]
    try:
        result = await log.publish_many(messages, {})
    except (ExpectedSequenceMismatch, nats.js.errors.BadRequestError):
        result = None
    if result is not None and not result.duplicate:
        # An atomic batch is stored as one run of sequences.
        first = result.seq - len(batch) + 1
        return len(batch), 0, result.seq, list(range(first, result.seq + 1))
    stored = duplicates = last = 0
    seqs: list[int] = []
    for subject, message in messages:
        one = await log.publish_many([(subject, message)], {})
        if one.duplicate:
            duplicates += 1
        else:
            stored += 1
        last = max(last, one.seq)
        seqs.append(one.seq)
    return stored, duplicates, last, seqs


def _without_id(headers: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in headers.items() if name != H_MSG_ID}
