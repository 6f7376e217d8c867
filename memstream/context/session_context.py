"""The context side of a session: block configuration from the builder, set up on first use."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from memstream.context.blocks import BlockConfig, ContextBlocks, PromptStore, ProviderPromptStore
from memstream.context.ports import SessionPort
from memstream.context.providers import LogBacked, StoredBlock, is_skill
from memstream.context.state import SessionPromptStore, SessionSkillLog, reclaimed
from memstream.domain.context import check_content, check_label
from memstream.domain.errors import InvalidInputError
from memstream.domain.limits import check_int
from memstream.domain.messages import Message
from memstream.domain.system_prompt import ContextBlock


def block_config(
    label: object, description: object, max_tokens: object, provider: object
) -> BlockConfig:
    """Validate a block's configuration (label 1–64 chars, ``max_tokens`` an integer ≥ 0)."""
    checked = check_label(label)
    if description is not None:
        check_content(description, "description")  # a string of ≤ 1 MiB, valid Unicode
    if max_tokens is not None:
        check_int("max_tokens", max_tokens, minimum=0, maximum=2**31)
    if provider is not None and not callable(getattr(provider, "get", None)):
        raise InvalidInputError(
            f'the provider of block "{checked}" has no get() method ({type(provider).__name__})'
        )
    return BlockConfig(checked, description, max_tokens, provider)  # type: ignore[arg-type]


class SessionContext:
    """Holds what the builder configured; on first use resolves the providers (a block without
    one gets the built-in block of this session), restores loaded skills and creates the
    :class:`ContextBlocks`."""

    def __init__(self, session: SessionPort) -> None:
        self._session = session
        self._configs: list[BlockConfig] = []
        self._cached_prompt = False
        self._prompt_provider: Any = None
        self._blocks: ContextBlocks | None = None
        self._lock = asyncio.Lock()

    @property
    def started(self) -> ContextBlocks | None:
        """The context blocks once set up, else ``None``."""
        return self._blocks

    @property
    def configured(self) -> bool:
        """Whether the session has blocks or a cached prompt."""
        return bool(self._configs) or self._cached_prompt

    def before_use(self, method: str) -> None:
        if self._blocks is not None:
            raise InvalidInputError(
                f"{method}() must be called before the session's context is first used"
            )

    def configure(self, config: BlockConfig) -> None:
        self.before_use("with_context")
        if any(c.label == config.label for c in self._configs):
            raise InvalidInputError(f'Block "{config.label}" already exists')
        self._configs.append(config)

    def cache_prompt(self, provider: Any) -> None:
        self.before_use("with_cached_prompt")
        self._cached_prompt = True
        self._prompt_provider = provider

    def remove(self, label: str) -> bool:
        configured = any(c.label == label for c in self._configs)
        self._configs = [c for c in self._configs if c.label != label]
        if self._blocks is not None:
            return self._blocks.remove(label) or configured
        return configured

    def _attach(self, provider: Any) -> Any:
        if isinstance(provider, LogBacked):
            provider.attach(self._session.memstream)
        return provider

    def resolve(self, config: BlockConfig) -> BlockConfig:
        """The config with its provider ready to use (bound to this session's memstream)."""
        provider = config.provider
        if provider is None:
            provider = StoredBlock(config.label, self._session.session_id, config.max_tokens)
        return BlockConfig(
            config.label, config.description, config.max_tokens, self._attach(provider)
        )

    async def ready(self) -> None:
        """Before the first call of a session with skill blocks, restore its loaded skills
        (§2.2: every async method waits for that restore)."""
        if self._blocks is None and any(is_skill(c.provider) for c in self._configs):
            await self.blocks()

    async def blocks(self) -> ContextBlocks:
        """The context blocks, set up on first use (loaded skills restored from the log)."""
        if self._blocks is None:
            async with self._lock:
                if self._blocks is None:
                    store: PromptStore | None = None
                    if self._prompt_provider is not None:
                        store = ProviderPromptStore(self._attach(self._prompt_provider))
                    elif self._cached_prompt:
                        store = SessionPromptStore(self._session)
                    blocks = ContextBlocks(
                        [self.resolve(c) for c in self._configs],
                        prompt_store=store,
                        skills=SessionSkillLog(self._session),
                        on_skill_unload=self._reclaim_skill_output,
                    )
                    await blocks.restore_skills()
                    self._blocks = blocks
        return self._blocks

    async def loaded(self) -> ContextBlocks:
        """The context blocks with every provider read."""
        blocks = await self.blocks()
        await blocks.ensure_loaded()
        return blocks

    async def add(self, config: BlockConfig) -> ContextBlock:
        resolved = self.resolve(config)
        block = await (await self.blocks()).add(resolved)
        self._configs.append(resolved)
        return block

    async def _reclaim_skill_output(self, label: str, key: str) -> None:
        session = self._session
        rewritten = reclaimed(cast("list[Message]", await session.get_history()), label, key)
        if rewritten is not None:
            await session.update_message(rewritten)
