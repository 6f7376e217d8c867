"""A session's context state on the log: its cached prompt, its loaded skills, and the rewrite
of a ``load_context`` tool output when its skill is unloaded (§6.7, §7.2)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from memstream.context.ports import SessionPort
from memstream.domain.session import SessionAggregate
from memstream.domain.tool_specs import LOAD_CONTEXT, UNLOAD_CONTEXT, skill_unloaded_marker
from memstream.workers.log.aggregate_store import Decided


class SessionPromptStore:
    """The built-in cached prompt: ``SystemPromptFrozen`` events on the session's subject."""

    def __init__(self, session: SessionPort) -> None:
        self.session = session

    async def get(self) -> str | None:
        ms = self.session.memstream
        await ms.ryw.wait_for("context")
        return ms.reads.context_queries.cached_prompt(ms.namespace, self.session.session_id)

    async def freeze(self, prompt: str) -> str:
        def decide(aggregate: SessionAggregate) -> Decided[str]:
            # The first freeze wins: a concurrent one elsewhere makes ours a no-op.
            winner = prompt if aggregate.frozen_prompt is None else aggregate.frozen_prompt
            return Decided(aggregate.freeze_system_prompt(prompt), winner)

        result = await self.session.memstream.commands.session_command(
            self.session.session_id, decide, self.session.command_meta()
        )
        assert result.value is not None  # decide always decides one
        return result.value

    async def refresh(self, prompt: str) -> None:
        await self.session.memstream.commands.session_command(
            self.session.session_id,
            lambda aggregate: aggregate.refresh_system_prompt(prompt),
            self.session.command_meta(),
        )


class SessionSkillLog:
    """Loaded skills as ``SkillLoaded``/``SkillUnloaded`` events on the session's subject."""

    def __init__(self, session: SessionPort) -> None:
        self.session = session

    async def loaded(self) -> list[str]:
        """Skills loaded through memstream's tools (events), plus those whose ``load_context``
        tool output sits in the active history (written by an app that ran the tool itself)."""
        ms, session_id = self.session.memstream, self.session.session_id
        await ms.ryw.wait_for("context")
        recorded = ms.reads.context_queries.loaded_skills(ms.namespace, session_id)
        await ms.ryw.wait_for("sessions")
        # Raw rows, as the reference reads them: a load inside a compacted range still counts.
        # ("unload_context" contains "load_context", so one needle finds both tools' parts.)
        candidates = ms.reads.session_queries.path_messages_containing(
            ms.namespace, session_id, "assistant", LOAD_CONTEXT
        )
        in_history = skills_in_history(candidates)
        return list(dict.fromkeys([*recorded, *in_history]))

    async def record_load(self, label: str, key: str) -> None:
        await self.session.memstream.commands.session_command(
            self.session.session_id,
            lambda aggregate: aggregate.load_skill(label, key),
            self.session.command_meta(),
        )

    async def record_unload(self, label: str, key: str) -> None:
        await self.session.memstream.commands.session_command(
            self.session.session_id,
            lambda aggregate: aggregate.unload_skill(label, key),
            self.session.command_meta(),
        )


def skills_in_history(history: list[dict[str, Any]]) -> list[str]:
    """``"label:key"`` loaded according to the tool parts of assistant messages (§7.3): a
    ``load_context`` output adds (unless it reads ``[skill unloaded: …]``), ``unload_context``
    removes."""
    loaded: dict[str, None] = {}
    for message in history:
        parts = message.get("parts")
        if message.get("role") != "assistant" or not isinstance(parts, list):
            continue
        for part in parts:
            if not isinstance(part, Mapping) or part.get("state") != "output-available":
                continue
            arguments = part.get("input")
            if not isinstance(arguments, Mapping):
                continue
            label, key = arguments.get("label"), arguments.get("key")
            if not isinstance(label, str) or not isinstance(key, str):
                continue
            name = f"{label}:{key}"
            if part.get("toolName") == LOAD_CONTEXT:
                output = part.get("output")
                if isinstance(output, str) and output.startswith("[skill unloaded:"):
                    loaded.pop(name, None)
                else:
                    loaded[name] = None
            elif part.get("toolName") == UNLOAD_CONTEXT:
                loaded.pop(name, None)
    return list(loaded)


def _is_load_of(part: object, label: str, key: str) -> bool:
    if not isinstance(part, Mapping):
        return False
    arguments = part.get("input")
    return (
        part.get("toolName") == LOAD_CONTEXT
        and part.get("state") == "output-available"
        and isinstance(arguments, Mapping)
        and arguments.get("label") == label
        and arguments.get("key") == key
    )


def reclaimed(history: list[dict[str, Any]], label: str, key: str) -> dict[str, Any] | None:
    """The newest assistant message that loaded ``label:key``, with that tool output replaced
    by ``[skill unloaded: key]`` (``None`` if the active history has none)."""
    for message in reversed(history):
        if message.get("role") != "assistant":
            continue
        parts = message.get("parts")
        if not isinstance(parts, list):
            continue
        for index, part in enumerate(parts):
            if _is_load_of(part, label, key):
                rewritten: dict[str, Any] = copy.deepcopy(message)
                rewritten["parts"][index]["output"] = skill_unloaded_marker(key)
                return rewritten
    return None
