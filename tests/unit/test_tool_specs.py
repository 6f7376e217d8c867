"""The AI tools' model-facing text (spec §9): exact descriptions, JSON Schemas and replies.

Pure: :mod:`memstream.domain.tool_specs` is built from loaded :class:`ContextBlock` lists, so these
tests need no services. Entry keys (``contextEntryKey``) are covered in ``test_tokens_and_keys``.
"""

from __future__ import annotations

from memstream.domain.system_prompt import ContextBlock
from memstream.domain.tool_specs import (
    NO_RESULTS,
    indexed_reply,
    not_a_skill_block,
    not_loaded_reply,
    not_searchable,
    search_context_spec,
    session_search_spec,
    session_tool_specs,
    set_context_spec,
    skill_specs,
    skill_unloaded_marker,
    unloaded_reply,
    written_reply,
)

SOUL = ContextBlock("soul", "You are helpful.", description="Identity")
MEMORY = ContextBlock("memory", "", description="Learned facts", max_tokens=1100, writable=True)
TODOS = ContextBlock("todos", "", writable=True)
SKILLS = ContextBlock("skills", "- pirate", description="Styles", writable=True, is_skill=True)
READONLY_SKILLS = ContextBlock("library", "- tax", is_skill=True)
KNOWLEDGE = ContextBlock("knowledge", "", description="Docs", writable=True, is_searchable=True)
READONLY_SEARCH = ContextBlock("archive", "3 entries indexed.", is_searchable=True)

SET_CONTEXT_TAIL = "\n\nWrites are durable and persist across sessions."
KEYED_HINT = (
    "\n\nFor keyed blocks (skill collections / searchable), pass `metadata: { title, "
    "description }` — title stabilises updates, description helps the model pick entries. "
    "Metadata is optional; short content rarely needs it, long loadable entries benefit most."
)
LABEL_TO_WRITE = "Block label to write to"


def test_no_tools_without_writable_skill_or_search_blocks() -> None:
    # Given no blocks, or only read-only plain blocks
    # Then a session has no tools at all
    assert session_tool_specs([], []) == []
    assert session_tool_specs([SOUL, ContextBlock("empty", "")], []) == []
    assert set_context_spec([SOUL]) is None
    assert skill_specs([SOUL], []) == []
    assert search_context_spec([SOUL]) is None


def test_set_context_for_plain_writable_blocks_is_exact() -> None:
    # Given a read-only soul and two writable blocks, one without a description
    spec = set_context_spec([SOUL, MEMORY, TODOS])
    assert spec is not None
    # Then the description lists only the writable blocks, in order, with their kind
    assert spec.name == "set_context"
    assert spec.description == (
        "Write to a context block. Available blocks:\n"
        '- "memory" (writable): Learned facts\n'
        '- "todos" (writable): no description' + SET_CONTEXT_TAIL
    )
    assert "soul" not in spec.description
    # And the schema has no metadata (no keyed block) and requires label and content
    assert spec.parameters == {
        "type": "object",
        "properties": {
            "label": {"type": "string", "enum": ["memory", "todos"], "description": LABEL_TO_WRITE},
            "content": {"type": "string", "description": "The main content to write to the block."},
            "action": {
                "type": "string",
                "enum": ["replace", "append"],
                "description": "replace (default) or append",
            },
        },
        "required": ["label", "content"],
    }


def test_set_context_labels_keyed_blocks_and_adds_metadata() -> None:
    # Given a writable block, a writable skill block, a writable search block, and read-only
    # skill and search blocks
    spec = set_context_spec([MEMORY, SKILLS, READONLY_SKILLS, KNOWLEDGE, READONLY_SEARCH, SOUL])
    assert spec is not None
    # Then the description names each writable block with its kind, plus the keyed-block hint
    assert spec.description == (
        "Write to a context block. Available blocks:\n"
        '- "memory" (writable): Learned facts\n'
        '- "skills" (skill collection, keyed entries): Styles\n'
        '- "knowledge" (searchable, keyed entries): Docs' + SET_CONTEXT_TAIL + KEYED_HINT
    )
    # And the label enum holds the writable blocks only
    properties = spec.parameters["properties"]
    assert properties["label"]["enum"] == ["memory", "skills", "knowledge"]
    assert spec.parameters["required"] == ["label", "content"]
    # And the metadata property names the keyed writable blocks
    assert properties["metadata"] == {
        "type": "object",
        "description": (
            "Optional metadata for keyed entries (skill collections, searchable blocks: "
            '"skills", "knowledge"). Short content doesn\'t need metadata; longer loadable '
            "entries (skills) benefit from a title and description so the model can pick the "
            "right one without loading it."
        ),
        "properties": {
            "title": {
                "type": "string",
                "description": (
                    "Short title. Used as a stable identifier — entries with the same title are "
                    "updated in place, different titles create new entries."
                ),
            },
            "description": {
                "type": "string",
                "description": (
                    "One-line summary shown alongside the title in the system prompt so the "
                    "model can decide when to load the entry."
                ),
            },
        },
    }


def test_a_block_that_is_both_skill_and_searchable_is_written_as_a_skill() -> None:
    # Given a writable provider that both loads and searches
    both = ContextBlock("kb", "", writable=True, is_skill=True, is_searchable=True)
    spec = set_context_spec([both])
    assert spec is not None
    # Then set_context describes it as a skill collection
    assert '- "kb" (skill collection, keyed entries): no description' in spec.description
    assert spec.description.endswith(KEYED_HINT)


def test_load_and_unload_context_are_exact() -> None:
    # Given two skill blocks (one read-only) and nothing loaded
    load, unload = skill_specs([MEMORY, SKILLS, READONLY_SKILLS], [])
    # Then load_context lists the skill blocks and has the label/key schema
    assert load.name == "load_context"
    assert load.description == (
        'Load a document from a skill block by key. Available skill blocks: "skills", '
        '"library". Check the system prompt for available keys.'
    )
    assert load.parameters == {
        "type": "object",
        "properties": {
            "label": {
                "type": "string",
                "enum": ["skills", "library"],
                "description": "Skill block label",
            },
            "key": {"type": "string", "description": "Skill key to load"},
        },
        "required": ["label", "key"],
    }
    # And unload_context says nothing is loaded
    assert unload.name == "unload_context"
    assert unload.description == (
        "Unload a previously loaded skill to free context space. The skill remains available "
        "for re-loading. No skills currently loaded."
    )
    assert unload.parameters["properties"]["key"] == {
        "type": "string",
        "description": "Skill key to unload",
    }
    assert unload.parameters["properties"]["label"] == load.parameters["properties"]["label"]
    assert unload.parameters["required"] == ["label", "key"]


def test_unload_context_lists_loaded_skills_in_order() -> None:
    # Given two loaded skills
    _, unload = skill_specs([SKILLS], ["skills:pirate", "skills:code-review"])
    # Then unload_context names them, comma-separated
    assert unload.description == (
        "Unload a previously loaded skill to free context space. The skill remains available "
        "for re-loading. Currently loaded: skills:pirate, skills:code-review."
    )


def test_search_context_is_exact_and_lists_read_only_search_blocks_too() -> None:
    # Given a writable and a read-only search block
    spec = search_context_spec([MEMORY, KNOWLEDGE, READONLY_SEARCH])
    assert spec is not None
    # Then both are searchable
    assert spec.name == "search_context"
    assert spec.description == (
        "Search for information in a searchable context block. ONLY these blocks are "
        'searchable: "knowledge", "archive". Other blocks cannot be searched.'
    )
    assert spec.parameters == {
        "type": "object",
        "properties": {
            "label": {
                "type": "string",
                "enum": ["knowledge", "archive"],
                "description": "Searchable block label",
            },
            "query": {"type": "string", "description": "Search query"},
        },
        "required": ["label", "query"],
    }


def test_read_only_search_provider_gives_search_context_but_no_set_context() -> None:
    specs = session_tool_specs([READONLY_SEARCH], [])
    assert [s.name for s in specs] == ["search_context"]


def test_session_tools_come_in_reference_order() -> None:
    # Given every kind of block
    specs = session_tool_specs([SOUL, MEMORY, SKILLS, KNOWLEDGE], ["skills:pirate"])
    # Then the tools are set, load, unload, search — never session_search
    assert [s.name for s in specs] == [
        "set_context",
        "load_context",
        "unload_context",
        "search_context",
    ]


def test_session_search_is_exact() -> None:
    spec = session_search_spec()
    assert spec.name == "session_search"
    assert spec.description == (
        "Search past conversations for relevant context. Searches across all sessions."
    )
    assert spec.parameters == {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "Search query"}},
        "required": ["query"],
    }


def test_written_reply_shows_usage_with_half_up_percentages() -> None:
    # Given blocks with and without a token budget ("User likes coffee." is 5 tokens)
    coffee = "User likes coffee."
    # Then the budget shows as a JS-rounded percentage: 5/8 = 62.5% → 63
    assert (
        written_reply(ContextBlock("memory", coffee, max_tokens=8, writable=True))
        == "Written to memory. Usage: 63% (5/8 tokens)"
    )
    assert (
        written_reply(ContextBlock("memory", coffee, max_tokens=1100, writable=True))
        == "Written to memory. Usage: 0% (5/1100 tokens)"
    )
    # And without a budget (or with a falsy 0 budget) only the token count shows
    assert (
        written_reply(ContextBlock("notes", coffee, writable=True))
        == "Written to notes. Usage: 5 tokens"
    )
    assert (
        written_reply(ContextBlock("notes", "", max_tokens=0, writable=True))
        == "Written to notes. Usage: 0 tokens"
    )


def test_fixed_replies_are_exact() -> None:
    assert NO_RESULTS == "No results found."
    assert indexed_reply("pirate-style", "skills") == 'Indexed "pirate-style" in skills.'
    assert (
        not_a_skill_block("memory", ["skills", "library"])
        == 'Error: "memory" is not a skill block. Skill blocks: skills, library'
    )
    assert (
        not_searchable("memory", ["knowledge"])
        == 'Error: "memory" is not searchable. Searchable blocks: knowledge'
    )
    assert (
        not_loaded_reply("pirate", "skills")
        == 'Skill "pirate" is not currently loaded in "skills".'
    )
    assert unloaded_reply("pirate", "skills") == 'Unloaded "pirate" from skills. Context reclaimed.'
    assert skill_unloaded_marker("pirate") == "[skill unloaded: pirate]"
