"""Where commands report to metrics, when a process serves them (see
:mod:`~memstream.workers.observability.telemetry`); without metrics nothing is recorded and the
Prometheus client is not even imported (its import costs more than a client's connect:
bench/RESULTS.md, 'Figures moved from code comments')."""

from __future__ import annotations

from typing import Protocol


class CommandObserver(Protocol):
    def command(self, kind: str, seconds: float) -> None:
        """A command on an aggregate of ``kind`` took ``seconds`` to decide and append."""

    def conflict(self) -> None:
        """A command lost a race for its subject and is decided again."""


class _Hooks:
    __slots__ = ("observer",)

    def __init__(self) -> None:
        self.observer: CommandObserver | None = None


hooks = _Hooks()
