"""A read transaction on either engine's reader: one consistent view for a snapshot and the
lookups made while deciding on it."""

from __future__ import annotations

from typing import Any, Protocol


class Reader(Protocol):
    """A client's reads: statements, and a read transaction around several."""

    def execute(self, query: Any, params: Any = ..., /) -> Any: ...

    def begin(self) -> bool:
        """Open a read transaction unless one is open; True if this call opened it."""
        ...

    def commit(self) -> None:
        """End the read transaction :meth:`begin` opened."""
        ...


class Reading:
    """A read transaction on ``reader`` (nothing new when one is open)."""

    __slots__ = ("opened", "reader")

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self.opened = False

    def __enter__(self) -> None:
        self.opened = self.reader.begin()

    def __exit__(self, *exc_info: object) -> None:
        if self.opened:
            self.opened = False
            self.reader.commit()
