"""The AI tools' model-facing text: names, JSON Schemas, descriptions and replies (§9), exactly.

Pure: built from the loaded blocks and the loaded skills; executing a tool lives elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from memstream.domain.system_prompt import ContextBlock
from memstream.domain.tokens import js_round

SET_CONTEXT = "set_context"
LOAD_CONTEXT = "load_context"
UNLOAD_CONTEXT = "unload_context"
SEARCH_CONTEXT = "search_context"
SESSION_SEARCH = "session_search"
NO_RESULTS = "No results found."

_TITLE_DESCRIPTION = (
    "Short title. Used as a stable identifier — entries with the same title are updated in "
    "place, different titles create new entries."
)
_ENTRY_DESCRIPTION = (
    "One-line summary shown alongside the title in the system prompt so the model can decide "
    "when to load the entry."
)
_KEYED_HINT = (
    "\n\nFor keyed blocks (skill collections / searchable), pass `metadata: { title, "
    "description }` — title stabilises updates, description helps the model pick entries. "
    "Metadata is optional; short content rarely needs it, long loadable entries benefit most."
)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as a model sees it: name, description, JSON Schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


def _quoted(labels: Iterable[str]) -> str:
    return ", ".join(f'"{label}"' for label in labels)


def _kind(block: ContextBlock) -> str:
    if block.is_skill:
        return "skill collection, keyed entries"
    if block.is_searchable:
        return "searchable, keyed entries"
    return "writable"


def set_context_spec(blocks: Sequence[ContextBlock]) -> ToolSpec | None:
    """``set_context``, present iff some block is writable (§9.1)."""
    writable = [b for b in blocks if b.writable]
    if not writable:
        return None
    keyed = [b for b in writable if b.is_skill or b.is_searchable]
    properties: dict[str, Any] = {
        "label": {
            "type": "string",
            "enum": [b.label for b in writable],
            "description": "Block label to write to",
        },
        "content": {"type": "string", "description": "The main content to write to the block."},
        "action": {
            "type": "string",
            "enum": ["replace", "append"],
            "description": "replace (default) or append",
        },
    }
    if keyed:
        properties["metadata"] = {
            "type": "object",
            "description": (
                "Optional metadata for keyed entries (skill collections, searchable blocks: "
                f"{_quoted(b.label for b in keyed)}). Short content doesn't need metadata; longer "
                "loadable entries (skills) benefit from a title and description so the model can "
                "pick the right one without loading it."
            ),
            "properties": {
                "title": {"type": "string", "description": _TITLE_DESCRIPTION},
                "description": {"type": "string", "description": _ENTRY_DESCRIPTION},
            },
        }
    lines = "\n".join(
        f'- "{b.label}" ({_kind(b)}): {b.description or "no description"}' for b in writable
    )
    description = (
        f"Write to a context block. Available blocks:\n{lines}"
        "\n\nWrites are durable and persist across sessions."
    )
    if keyed:
        description += _KEYED_HINT
    return ToolSpec(
        SET_CONTEXT,
        description,
        {"type": "object", "properties": properties, "required": ["label", "content"]},
    )


def _label_key_schema(labels: list[str], label_description: str, key_description: str) -> Any:
    return {
        "type": "object",
        "properties": {
            "label": {"type": "string", "enum": labels, "description": label_description},
            "key": {"type": "string", "description": key_description},
        },
        "required": ["label", "key"],
    }


def skill_specs(blocks: Sequence[ContextBlock], loaded: Sequence[str]) -> list[ToolSpec]:
    """``load_context`` and ``unload_context``, present iff some block is a skill (§9.2)."""
    labels = [b.label for b in blocks if b.is_skill]
    if not labels:
        return []
    currently = (
        f" Currently loaded: {', '.join(loaded)}." if loaded else " No skills currently loaded."
    )
    return [
        ToolSpec(
            LOAD_CONTEXT,
            f"Load a document from a skill block by key. Available skill blocks: "
            f"{_quoted(labels)}. Check the system prompt for available keys.",
            _label_key_schema(labels, "Skill block label", "Skill key to load"),
        ),
        ToolSpec(
            UNLOAD_CONTEXT,
            "Unload a previously loaded skill to free context space. The skill remains "
            "available for re-loading." + currently,
            _label_key_schema(labels, "Skill block label", "Skill key to unload"),
        ),
    ]


def search_context_spec(blocks: Sequence[ContextBlock]) -> ToolSpec | None:
    """``search_context``, present iff some block is searchable (§9.3)."""
    labels = [b.label for b in blocks if b.is_searchable]
    if not labels:
        return None
    return ToolSpec(
        SEARCH_CONTEXT,
        f"Search for information in a searchable context block. ONLY these blocks are "
        f"searchable: {_quoted(labels)}. Other blocks cannot be searched.",
        {
            "type": "object",
            "properties": {
                "label": {
                    "type": "string",
                    "enum": labels,
                    "description": "Searchable block label",
                },
                "query": {"type": "string", "description": "Search query"},
            },
            "required": ["label", "query"],
        },
    )


def session_search_spec() -> ToolSpec:
    """``session_search`` of a SessionManager (never on a session's tools, §9.4)."""
    return ToolSpec(
        SESSION_SEARCH,
        "Search past conversations for relevant context. Searches across all sessions.",
        {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "Search query"}},
            "required": ["query"],
        },
    )


def session_tool_specs(blocks: Sequence[ContextBlock], loaded: Sequence[str]) -> list[ToolSpec]:
    """A session's tools in the reference order (none without writable/skill/search blocks)."""
    specs = [set_context_spec(blocks), *skill_specs(blocks, loaded), search_context_spec(blocks)]
    return [s for s in specs if s is not None]


# -- replies -----------------------------------------------------------------------------------


def written_reply(block: ContextBlock) -> str:
    """``set_context``'s reply after a plain block write."""
    if block.max_tokens:
        pct = js_round(block.tokens / block.max_tokens * 100)
        return f"Written to {block.label}. Usage: {pct}% ({block.tokens}/{block.max_tokens} tokens)"
    return f"Written to {block.label}. Usage: {block.tokens} tokens"


def indexed_reply(key: str, label: str) -> str:
    return f'Indexed "{key}" in {label}.'


def not_a_skill_block(label: str, labels: Iterable[str]) -> str:
    return f'Error: "{label}" is not a skill block. Skill blocks: {", ".join(labels)}'


def not_searchable(label: str, labels: Iterable[str]) -> str:
    return f'Error: "{label}" is not searchable. Searchable blocks: {", ".join(labels)}'


def not_loaded_reply(key: str, label: str) -> str:
    return f'Skill "{key}" is not currently loaded in "{label}".'


def unloaded_reply(key: str, label: str) -> str:
    return f'Unloaded "{key}" from {label}. Context reclaimed.'


def skill_unloaded_marker(key: str) -> str:
    """What a ``load_context`` output in history is rewritten to when its skill is unloaded."""
    return f"[skill unloaded: {key}]"
