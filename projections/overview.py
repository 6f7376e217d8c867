"""One session at a glance, across the sessions and context read models (``sessions show``)."""

from __future__ import annotations

from typing import Any

from memstream.projections.ports import ContextQueries, SessionQueries


def session_overview(
    sessions: SessionQueries,
    context: ContextQueries,
    namespace: str,
    session_id: str,
) -> dict[str, Any] | None:
    """The session's :meth:`~memstream.projections.ports.SessionQueries.summary` plus its
    context block labels, loaded skills and whether its prompt is frozen; ``None`` when
    neither read model knows it."""
    summary = sessions.summary(namespace, session_id)
    blocks = context.blocks(namespace, session_id)
    prompt = context.cached_prompt(namespace, session_id)
    skills = context.loaded_skills(namespace, session_id)
    if summary is None and not blocks and prompt is None and not skills:
        return None
    return {
        **(summary or sessions.empty_summary(namespace, session_id)),
        "context_blocks": [block["label"] for block in blocks],
        "loaded_skills": skills,
        "prompt_frozen": prompt is not None,
    }
