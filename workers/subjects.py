"""Subjects of the log: ``<prefix>.<namespace>.<aggregate>.<token>`` with reversible id tokens."""

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

    def __str__(self) -> str:
        return f"{self.prefix}.{self.namespace}.{self.aggregate}.{encode_token(self.identifier)}"


def subject_for(prefix: str, namespace: str, aggregate: str, identifier: str) -> str:
    """The subject one aggregate instance owns."""
    return str(SubjectName(prefix, namespace, aggregate, identifier))


@lru_cache(maxsize=4096)
def parse_subject(subject: str) -> SubjectName:
    """Split a subject into its parts (the id token decoded; memoised: the projector parses
    the subject of every event for every projection)."""
    parts = subject.split(".")
    if len(parts) != 4:
        raise InvalidInputError(f"subject {subject!r} is not <prefix>.<namespace>.<kind>.<id>")
    return SubjectName(parts[0], parts[1], parts[2], decode_token(parts[3]))


def demand_subject(stream: str) -> str:
    """The core NATS subject on which readers tell ``stream``'s projector what they wait for
    (outside every stream's subjects: nothing published there is stored)."""
    return f"_memstream.demand.{encode_token(stream)}"
