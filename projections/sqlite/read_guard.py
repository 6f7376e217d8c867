"""Reads of a read model that may be damaged: SQLite damage becomes a one-line memstream error."""

from __future__ import annotations

import sqlite3
from typing import Any, TypeVar, cast

from memstream.projections.ports import OnDamage
from memstream.projections.sqlite.damage import damaged, is_damage

T = TypeVar("T")


class _Guarded:
    """Calls the methods of a query object, handing SQLite damage errors, as
    :class:`~memstream.domain.errors.ReadModelDamagedError`, to ``on_damage`` (which raises).
    Each wrapped method is kept, so a read costs one extra call."""

    def __init__(self, target: object, on_damage: OnDamage) -> None:
        self._target = target
        self._on_damage = on_damage

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not callable(attribute):
            return attribute
        on_damage = self._on_damage

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attribute(*args, **kwargs)
            except sqlite3.DatabaseError as error:
                if not is_damage(error):
                    raise
                on_damage(damaged(error))

        setattr(self, name, call)
        return call


def guarded(target: T, on_damage: OnDamage) -> T:
    """``target`` (a query object whose methods read SQLite and return complete results, not
    cursors) with SQLite damage errors handed to ``on_damage``."""
    return cast(T, _Guarded(target, on_damage))
