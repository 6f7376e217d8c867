"""The row ids of message rows: one contiguous range per session."""

from __future__ import annotations

from memstream.domain.errors import MemstreamError

# A session's message rows take the row ids ``sid << 32 | n`` (n = 1, 2, ...): each session's
# rows are one contiguous range, and so are its FTS5 rows (same row ids), so that a session's
# search is the full-text query restricted to a row-id range (FTS5 seeks to it and stops after
# it) instead of the AND of a per-session token whose doclist is as long as the session, and a
# session's rows lie together in the table.
MID_BITS = 32
MAX_ORDINAL = (1 << MID_BITS) - 1


def mid_range(sid: int) -> tuple[int, int]:
    """The first and last row id a session's messages may take."""
    low = sid << MID_BITS
    return low, low | MAX_ORDINAL


class SessionRowsExhausted(MemstreamError):
    """A session has used up the row ids of its range (4,294,967,295 inserts)."""
