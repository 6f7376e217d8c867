"""AI tools over a session's context blocks (§9): JSON-Schema tools whose ``execute`` returns a
string and never raises, exportable in the OpenAI and Anthropic tool formats."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memstream.context.blocks import ContextBlocks
from memstream.domain.entry_keys import entry_key
from memstream.domain.errors import InvalidInputError, MemstreamError
from memstream.domain.tool_specs import (
    LOAD_CONTEXT,
    NO_RESULTS,
    SEARCH_CONTEXT,
    SET_CONTEXT,
    UNLOAD_CONTEXT,
    ToolSpec,
    indexed_reply,
    not_a_skill_block,
    not_loaded_reply,
    not_searchable,
    session_tool_specs,
    unloaded_reply,
    written_reply,
)
from memstream.home_loop import caller_loop, home_loop_methods

logger = logging.getLogger(__name__)
Execute = Callable[[Mapping[str, Any]], Awaitable[str]]


@home_loop_methods(lambda tool: tool.home)
@dataclass(frozen=True, slots=True)
class Tool:
    """One tool: ``name``, ``description``, ``parameters`` (JSON Schema) and ``execute``.

    ``execute`` runs on the event loop the tool was made on (its client's: see
    :mod:`memstream.home_loop`), whichever loop an agent framework calls it from."""

    name: str
    description: str
    parameters: dict[str, Any]
    run: Execute
    home: asyncio.AbstractEventLoop | None = field(default_factory=caller_loop, compare=False)

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the arguments (the AI SDK's name for :attr:`parameters`)."""
        return self.parameters

    async def execute(self, arguments: Mapping[str, Any] | None = None) -> str:
        """Run the tool; every failure comes back as an ``Error: …`` string."""
        try:
            if arguments is None:
                arguments = {}
            if not isinstance(arguments, Mapping):
                raise InvalidInputError(
                    f"arguments must be an object, not {type(arguments).__name__}"
                )
            return await self.run(arguments)
        except MemstreamError as error:
            return f"Error: {error}"
        except Exception as error:  # a tool never raises into the agent loop (§9, #1297)
            logger.exception("tool %s failed", self.name)
            return f"Error: {error}"

    def openai(self) -> dict[str, Any]:
        """OpenAI chat-completions tool format."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def anthropic(self) -> dict[str, Any]:
        """Anthropic Messages API tool format."""
        return {"name": self.name, "description": self.description, "input_schema": self.parameters}


class ToolSet(dict[str, Tool]):
    """Tools by name (``{}`` when there are none), with exports for model APIs."""

    def openai(self) -> list[dict[str, Any]]:
        return [tool.openai() for tool in self.values()]

    def anthropic(self) -> list[dict[str, Any]]:
        return [tool.anthropic() for tool in self.values()]

    async def execute(self, name: str, arguments: Mapping[str, Any] | None = None) -> str:
        """Run a tool by name; an unknown name is an ``Error: …`` string too."""
        tool = self.get(name) if isinstance(name, str) else None
        if tool is None:
            available = ", ".join(self) or "none"
            return f'Error: unknown tool "{name}". Available tools: {available}'
        return await tool.execute(arguments)


def _text(arguments: Mapping[str, Any], name: str, *, required: bool = True) -> Any:
    value = arguments.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        if value is None:
            raise InvalidInputError(f"{name} is required")
        raise InvalidInputError(f"{name} must be a string, not {type(value).__name__}")
    return value


def context_tools(blocks: ContextBlocks) -> ToolSet:
    """The tools of the loaded blocks (call ``ensure_loaded`` first)."""
    loaded = blocks.get_blocks()
    skill_labels = [b.label for b in loaded if b.is_skill]
    search_labels = [b.label for b in loaded if b.is_searchable]

    async def set_context(arguments: Mapping[str, Any]) -> str:
        label = arguments.get("label")
        content = _text(arguments, "content")
        block = blocks.get_block(label) if isinstance(label, str) else None
        if block is None:
            return f'Error: block "{label}" not found'
        if block.is_skill or block.is_searchable:
            metadata = arguments.get("metadata") or {}
            if not isinstance(metadata, Mapping):
                raise InvalidInputError(
                    f"metadata must be an object, not {type(metadata).__name__}"
                )
            title = metadata.get("title")
            title = title if isinstance(title, str) else None
            key = entry_key(title, content)
            if block.is_skill:
                description = metadata.get("description")
                if not isinstance(description, str):
                    description = title
                await blocks.set_skill(block.label, key, content, description)
            else:
                await blocks.set_search_entry(block.label, key, content)
            return indexed_reply(key, block.label)
        if arguments.get("action") == "append":
            written = await blocks.append_to_block(block.label, content)
        else:
            written = await blocks.set_block(block.label, content)
        return written_reply(written)

    async def load_context(arguments: Mapping[str, Any]) -> str:
        label = arguments.get("label")
        if label not in skill_labels:
            return not_a_skill_block(str(label), skill_labels)
        key = _text(arguments, "key")
        content = await blocks.load_skill(label, key)
        return content if content is not None else f"Not found: {key}"

    async def unload_context(arguments: Mapping[str, Any]) -> str:
        label = arguments.get("label")
        if label not in skill_labels:
            return not_a_skill_block(str(label), skill_labels)
        key = _text(arguments, "key")
        if not await blocks.unload_skill(label, key):
            return not_loaded_reply(key, label)
        return unloaded_reply(key, label)

    async def search_context(arguments: Mapping[str, Any]) -> str:
        label = arguments.get("label")
        if label not in search_labels:
            return not_searchable(str(label), search_labels)
        result = await blocks.search(label, _text(arguments, "query"))
        return result if result is not None else NO_RESULTS

    runners: dict[str, Execute] = {
        SET_CONTEXT: set_context,
        LOAD_CONTEXT: load_context,
        UNLOAD_CONTEXT: unload_context,
        SEARCH_CONTEXT: search_context,
    }
    specs: list[ToolSpec] = session_tool_specs(loaded, blocks.loaded_skills)
    return ToolSet(
        (spec.name, Tool(spec.name, spec.description, spec.parameters, runners[spec.name]))
        for spec in specs
    )
