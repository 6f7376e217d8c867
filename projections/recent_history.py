"""Byte-budgeted windows over a path (``get_recent_history``, spec §3.10)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from memstream.domain.messages import Message


@dataclass(frozen=True, slots=True)
class RecentHistory:
    """A recent window of the active path and what it left out."""

    messages: list[Message]
    truncated: bool
    total_content_bytes: int


def recent_window(sizes: Sequence[int], max_content_bytes: int, min_recent_messages: float) -> int:
    """Index where the window starts: the leaf always, then older rows while the budget or the
    minimum count allows."""
    if not sizes:
        return 0
    floor = max(1, math.floor(min_recent_messages))
    start = len(sizes) - 1
    used = sizes[start]
    count = 1
    while start > 0:
        previous = sizes[start - 1]
        if count < floor or used + previous <= max_content_bytes:
            start -= 1
            used += previous
            count += 1
        else:
            break
    return start
