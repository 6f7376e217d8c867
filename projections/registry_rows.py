"""Registry rows as every backend reads them: the columns of a registered session, a row as a
``SessionInfo`` dict, and the state a registry record is restored from."""

from __future__ import annotations

from typing import Any

COLUMNS = (
    "session_id, name, parent_session_id, model, source, input_tokens, output_tokens, cost, "
    "end_reason, created_at, updated_at, updated_seq"
)
# The record's state columns (after record_seq, record_version), as SessionRecord.restore names
# them.
RECORD_STATE = (
    "name",
    "model",
    "source",
    "parent_session_id",
    "input_tokens",
    "output_tokens",
    "cost",
    "end_reason",
)


def session_info(row: tuple[Any, ...]) -> dict[str, Any]:
    """A row of :data:`COLUMNS` as a ``SessionInfo`` (the reference's field names)."""
    return {
        "id": row[0],
        "name": row[1],
        "parent_session_id": row[2],
        "model": row[3],
        "source": row[4],
        "input_tokens": int(row[5]),
        "output_tokens": int(row[6]),
        "estimated_cost": float(row[7]),
        "end_reason": row[8],
        "created_at": row[9],
        "updated_at": row[10],
    }


def record_state(row: tuple[Any, ...]) -> dict[str, Any]:
    """The :data:`RECORD_STATE` values of a row, typed as the record holds them."""
    state: dict[str, Any] = dict(zip(RECORD_STATE, row, strict=True))
    state["input_tokens"] = int(state["input_tokens"])
    state["output_tokens"] = int(state["output_tokens"])
    state["cost"] = float(state["cost"])
    return state
