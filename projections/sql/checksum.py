"""Checksums of read models over their logical content (independent of row ids), and the first
row where two builds differ, on either engine: each engine names its projections' content as
parts, each one query in a canonical order."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterable
from typing import Any

from memstream.projections.ports import Difference

Parts = tuple[tuple[str, str], ...]  # (part, query)
Rows = Callable[[str], Iterable[Any]]  # a query's rows on one build


def digest(parts: Parts, rows: Rows) -> str:
    """SHA-256 over the rows of every part, in order."""
    sha = hashlib.sha256()
    for _, query in parts:
        for row in rows(query):
            sha.update(json.dumps(row, ensure_ascii=False).encode("utf-8", "surrogatepass"))
            sha.update(b"\n")
        sha.update(b"\x00")
    return sha.hexdigest()


def difference(parts: Parts, live: Rows, rebuilt: Rows) -> Difference | None:
    """The first row where two builds differ, in checksum order (``None`` when they hold the
    same content, i.e. when their checksums are equal)."""
    for part, query in parts:
        for live_row, rebuilt_row in itertools.zip_longest(live(query), rebuilt(query)):
            if live_row != rebuilt_row:
                return Difference(part, live_row, rebuilt_row)
    return None
