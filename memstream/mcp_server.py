"""memstream as an MCP server (``memstream mcp``; the ``mcp`` package, ``memstream[mcp]``).

It serves the AI tools of one session — ``set_context`` for its writable blocks, and
``load_context``/``unload_context``/``search_context`` when it has skill or searchable blocks —
with ``session_search`` over every session of the namespace, and, given a profile, that
profile's memory: ``remember``, ``recall``, ``list`` and ``forget``. The tool list is asked of
the session at each request, so it follows the blocks (a loaded skill adds ``unload_context``).
A tool's failure is a result with ``isError`` and the ``Error: …`` text, never a protocol error.

Over stdio by default (what an MCP client launches); ``http_port`` serves streamable HTTP on
``host`` (loopback by default, with the ``mcp`` package's DNS-rebinding protection).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memstream.agent_memory import Profile
from memstream.client import Memstream
from memstream.context.tools import Tool, ToolSet
from memstream.domain.context import check_label
from memstream.domain.errors import InvalidInputError
from memstream.session import Session

# The block a server without --context gives its session.
DEFAULT_BLOCK = "memory"
SERVER_NAME = "memstream"


@dataclass(frozen=True, slots=True)
class BlockOption:
    """A ``--context LABEL[:MAX_TOKENS]`` option: a writable block of the served session."""

    label: str
    max_tokens: int | None = None

    @classmethod
    def parse(cls, text: str) -> BlockOption:
        """``LABEL`` or ``LABEL:MAX_TOKENS`` (a label may hold colons: the last part is the
        limit when it is a number).

        Raises:
            InvalidInputError: a bad label or limit (the message shows the option).
        """
        label, _, limit = text.rpartition(":")
        if not label or not limit.isdigit():
            label, limit = text, ""
        try:
            checked = check_label(label)
        except InvalidInputError as error:
            raise InvalidInputError(f"--context {text!r}: {error}") from None
        max_tokens = int(limit) if limit else None
        if max_tokens is not None and max_tokens > 2**31:
            raise InvalidInputError(f"--context {text!r}: max tokens {max_tokens} is over 2^31")
        return cls(checked, max_tokens)


class MemstreamTools:
    """The tools one server exposes (see the module's docstring)."""

    def __init__(
        self,
        ms: Memstream,
        *,
        session_id: str = "",
        blocks: Sequence[BlockOption] = (BlockOption(DEFAULT_BLOCK),),
        profile: str | None = None,
        search: bool = True,
    ) -> None:
        self.ms = ms
        self.session: Session = ms.session(session_id)
        self.blocks = list(blocks)
        self.profile_name = profile
        self.search = search
        self._profile: Profile | None = None
        self._started = False

    async def start(self) -> None:
        """Configure the session's blocks (once)."""
        if self._started:
            return
        for block in self.blocks:
            await self.session.add_context(block.label, max_tokens=block.max_tokens)
        if self.profile_name is not None:
            self._profile = await self.ms.agent_memory().get_profile(self.profile_name)
        self._started = True

    async def tools(self) -> ToolSet:
        """The tools as they are now."""
        await self.start()
        tools = ToolSet(await self.session.tools())
        if self.search:
            tools.update(self.ms.session_manager().tools())
        if self._profile is not None:
            tools.update(memory_tools(self._profile))
        return tools

    async def call(self, name: str, arguments: Mapping[str, Any] | None) -> tuple[str, bool]:
        """Run tool ``name``: its text, and whether it failed."""
        tools = await self.tools()
        tool = tools.get(name)
        if tool is None:
            return f"Error: unknown tool {name!r}; the tools are {sorted(tools)}", True
        text = await tool.execute(arguments)
        return text, text.startswith("Error:")


def memory_tools(profile: Profile) -> ToolSet:
    """``remember``, ``recall``, ``list`` and ``forget`` on ``profile``."""

    async def remember(arguments: Mapping[str, Any]) -> str:
        stored = await profile.remember(_text(arguments, "content"))
        return f"Remembered {stored['id']}: {stored.get('summary', '')}"

    async def recall(arguments: Mapping[str, Any]) -> str:
        found = await profile.recall(_text(arguments, "query"))
        if not found["candidates"]:
            return "No memories found."
        lines = [f"- [{c['type']}] {c['summary']} (id {c['id']})" for c in found["candidates"]]
        return "\n".join([found["answer"], *lines] if found.get("answer") else lines)

    async def list_memories(arguments: Mapping[str, Any]) -> str:
        limit = arguments.get("limit", 20)
        kind = arguments.get("type")
        page = await profile.list(limit=limit, type=kind)
        if not page["memories"]:
            return "No memories."
        return "\n".join(f"- [{m['type']}] {m['summary']} (id {m['id']})" for m in page["memories"])

    async def forget(arguments: Mapping[str, Any]) -> str:
        memory_id = _text(arguments, "memory_id")
        await profile.delete(memory_id)
        return f"Forgot {memory_id}."

    specs = [
        (
            "remember",
            "Store a memory about the user in the long-term profile (a fact, preference, "
            "instruction, event or task), in plain words.",
            {"content": {"type": "string", "description": "What to remember."}},
            ["content"],
            remember,
        ),
        (
            "recall",
            "Search the long-term profile for memories relevant to a question.",
            {"query": {"type": "string", "description": "The question or topic."}},
            ["query"],
            recall,
        ),
        (
            "list",
            "List the profile's memories, newest first.",
            {
                "limit": {"type": "integer", "minimum": 1, "maximum": 500, "default": 20},
                "type": {"type": "string", "enum": ["fact", "event", "instruction", "task"]},
            },
            [],
            list_memories,
        ),
        (
            "forget",
            "Delete one memory by its id (from recall or list).",
            {"memory_id": {"type": "string"}},
            ["memory_id"],
            forget,
        ),
    ]
    return ToolSet(
        {
            name: Tool(
                name,
                description,
                {"type": "object", "properties": properties, "required": required},
                run,
            )
            for name, description, properties, required, run in specs
        }
    )


def _text(arguments: Mapping[str, Any], name: str) -> str:
    value = arguments.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(f"{name} must be a non-empty string")
    return value


def build_server(tools: MemstreamTools) -> Any:
    """The ``mcp`` package's low-level server over ``tools``."""
    from mcp import types
    from mcp.server import Server

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name=t.name, description=t.description, input_schema=t.parameters)
                for t in (await tools.tools()).values()
            ]
        )

    async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
        text, failed = await tools.call(params.name, params.arguments)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=failed
        )

    return Server(
        SERVER_NAME,
        version=_version(),
        instructions="Memory for this agent: context blocks, past sessions and a profile.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve(
    tools: MemstreamTools, *, http_port: int | None = None, host: str = "127.0.0.1"
) -> None:
    """Serve ``tools`` over stdio, or streamable HTTP on ``host:http_port`` (path ``/mcp``)."""
    await tools.start()  # bad blocks or an unknown profile fail before serving
    server = build_server(tools)
    if http_port is None:
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return
    import uvicorn

    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=http_port, log_level="warning")
    await uvicorn.Server(config).serve()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memstream")
    except PackageNotFoundError:
        return "0"
