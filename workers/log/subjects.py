"""Subjects of the log: ``<prefix>.<namespace>.<aggregate>.<token>`` with reversible id tokens.

A partitioned stream (``MEMSTREAM_PARTITIONS``) stores each event under its subject with one
more token, the aggregate's partition: ``<prefix>.<namespace>.<aggregate>.<token>.<p>``, where
the stream's subject transform computes ``p`` from the namespace and id tokens (see
:func:`partition_of`). Writers publish to the 4-token subject; readers of one subject read
``<subject>.*`` (:func:`stored_filter`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from memstream.domain.errors import InvalidInputError

# Characters kept verbatim in a token; everything else (including "=") is escaped as =XX per byte.
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
_EMPTY = "="


def encode_token(identifier: str) -> str:
    """Map any string (dots, spaces, ``*``, ``>``, unicode, empty) to one subject-safe token."""
    if identifier == "":
        return _EMPTY
    out: list[str] = []
    for char in identifier:
        if char in _SAFE:
            out.append(char)
        else:
            out.extend(f"={byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
    return "".join(out)


def decode_token(token: str) -> str:
    """Invert :func:`encode_token`."""
    if token == _EMPTY:
        return ""
    raw = bytearray()
    index = 0
    while index < len(token):
        char = token[index]
        if char == "=":
            raw.append(int(token[index + 1 : index + 3], 16))
            index += 3
        else:
            raw.extend(char.encode("ascii"))
            index += 1
    return raw.decode("utf-8", "surrogatepass")


@dataclass(frozen=True, slots=True)
class SubjectName:
    """A parsed subject of the log."""

    prefix: str
    namespace: str
    aggregate: str
    identifier: str
    partition: int | None = None  # the stored subject's 5th token on a partitioned stream

    def __str__(self) -> str:
        """The subject writers publish to (without the partition token)."""
        return f"{self.prefix}.{self.namespace}.{self.aggregate}.{encode_token(self.identifier)}"


def subject_for(prefix: str, namespace: str, aggregate: str, identifier: str) -> str:
    """The subject one aggregate instance owns."""
    return str(SubjectName(prefix, namespace, aggregate, identifier))


@lru_cache(maxsize=4096)
def parse_subject(subject: str) -> SubjectName:
    """Split a subject into its parts (the id token decoded; memoised: the projector parses
    the subject of every event for every projection)."""
    parts = subject.split(".")
    if len(parts) == 5 and parts[4].isdigit() and parts[4].isascii():
        return SubjectName(parts[0], parts[1], parts[2], decode_token(parts[3]), int(parts[4]))
    if len(parts) != 4:
        raise InvalidInputError(
            f"subject {subject!r} is not <prefix>.<namespace>.<kind>.<id>[.<partition>]"
        )
    return SubjectName(parts[0], parts[1], parts[2], decode_token(parts[3]))


def logical_subject(subject: str) -> str:
    """``subject`` without the partition token a partitioned stream stored it with."""
    parts = subject.split(".")
    if len(parts) == 5 and parts[4].isdigit():
        return ".".join(parts[:4])
    return subject


def _fnv1a32(data: bytes) -> int:
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def partition_of(subject: str, partitions: int) -> int:
    """The partition a stream of ``partitions`` partitions stores ``subject`` (a 4-token
    subject) in: what the server's ``{{partition(n,1,3)}}`` computes, FNV-1a (32 bits) of the
    namespace token followed by the id token, modulo ``n``. A session's session and registry
    subjects share a partition (the same namespace and id); its blocks' do not."""
    parts = subject.split(".")
    return _fnv1a32((parts[1] + parts[3]).encode()) % partitions


def partition_transform(prefix: str, partitions: int) -> tuple[str, str]:
    """The stream's subject transform (source, destination) for ``partitions`` partitions."""
    return (
        f"{prefix}.*.*.*",
        f"{prefix}.{{{{wildcard(1)}}}}.{{{{wildcard(2)}}}}.{{{{wildcard(3)}}}}"
        f".{{{{partition({partitions},1,3)}}}}",
    )


def partition_filter(prefix: str, partition: int) -> str:
    """The subject filter of one partition's events."""
    return f"{prefix}.*.*.*.{partition}"


def stored_filter(subject: str, partitions: int) -> str:
    """The filter that matches what the stream stored for ``subject``: itself on a stream
    without partitions; on a partitioned one a 4-token subject or pattern gains ``.*`` (a
    filter ending in ``>`` matches both layouts as it is)."""
    if partitions and not subject.endswith(">") and subject.count(".") == 3:
        return f"{subject}.*"
    return subject


def demand_subject(stream: str) -> str:
    """The core NATS subject on which readers tell ``stream``'s projector what they wait for
    (outside every stream's subjects: nothing published there is stored)."""
    return f"_memstream.demand.{encode_token(stream)}"
