"""A session's context blocks: loading providers, writes, the frozen prompt, and skills (§6, §7)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from memstream.context.providers import (
    StoredBlock,
    call,
    is_searchable,
    is_skill,
    is_writable,
)
from memstream.domain.context import check_content, check_max_tokens, joined_content
from memstream.domain.errors import InvalidInputError, NotFoundError
from memstream.domain.limits import utf8_size
from memstream.domain.system_prompt import ContextBlock, render_system_prompt

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BlockConfig:
    """A block as configured: its provider is resolved by the session before loading."""

    label: str
    description: str | None = None
    max_tokens: int | None = None
    provider: Any = None


class PromptStore(Protocol):
    """Where a frozen prompt persists (the session's log, or a user's writable provider)."""

    async def get(self) -> str | None: ...

    async def freeze(self, prompt: str) -> str:
        """Persist a first freeze; returns the prompt that is frozen now (maybe another's)."""

    async def refresh(self, prompt: str) -> None:
        """Replace the persisted prompt."""


class SkillLog(Protocol):
    """Where loaded skills are recorded (the session's log)."""

    async def loaded(self) -> list[str]: ...

    async def record_load(self, label: str, key: str) -> None: ...

    async def record_unload(self, label: str, key: str) -> None: ...


class ProviderPromptStore:
    """A prompt store over a user's writable provider (``get``/``set``)."""

    def __init__(self, provider: Any) -> None:
        if not is_writable(provider):
            raise InvalidInputError(
                "with_cached_prompt(provider) needs a provider with get and set"
            )
        self.provider = provider

    async def get(self) -> str | None:
        value = await call(self.provider.get)
        return None if value is None else str(value)

    async def freeze(self, prompt: str) -> str:
        await call(self.provider.set, prompt)
        return prompt

    async def refresh(self, prompt: str) -> None:
        await call(self.provider.set, prompt)


def _label_error(label: object) -> str:
    return str(label) if isinstance(label, str) else repr(label)


class ContextBlocks:
    """Loads blocks from their providers in configuration order, renders and freezes the
    system prompt, routes writes, and tracks loaded skills."""

    def __init__(
        self,
        configs: list[BlockConfig],
        *,
        prompt_store: PromptStore | None,
        skills: SkillLog,
        on_skill_unload: Callable[[str, str], Awaitable[None]] | None = None,
    ) -> None:
        self._configs: dict[str, BlockConfig] = {c.label: c for c in configs}
        self._blocks: dict[str, ContextBlock] | None = None
        self._snapshot: str | None = None
        self._prompt_store = prompt_store
        self._skill_log = skills
        self._on_skill_unload = on_skill_unload
        self._loaded_skills: dict[str, None] = {}
        self._skills_restored = False
        self._lock = asyncio.Lock()

    # -- loading -------------------------------------------------------------------------------

    async def restore_skills(self) -> None:
        """Take the loaded skills recorded on the log, once, if any block is a skill block."""
        if self._skills_restored:
            return
        if not any(is_skill(c.provider) for c in self._configs.values()):
            return
        self._skills_restored = True
        restored = await self._skill_log.loaded()
        if restored:
            self._loaded_skills = dict.fromkeys(restored)

    async def _load_block(self, config: BlockConfig) -> ContextBlock:
        provider = config.provider
        content: Any = None
        if provider is not None:
            if callable(getattr(provider, "init", None)):
                await call(provider.init, config.label)
            content = await call(provider.get)
        if content is not None and not isinstance(content, str):
            raise InvalidInputError(
                f'the provider of block "{config.label}" returned {type(content).__name__}, '
                "not a string"
            )
        if content is not None:
            _check_provider_text(config.label, content)
        return ContextBlock(
            label=config.label,
            content=content or "",
            description=config.description,
            max_tokens=config.max_tokens,
            writable=provider is not None and is_writable(provider),
            is_skill=provider is not None and is_skill(provider),
            is_searchable=provider is not None and is_searchable(provider),
        )

    async def load(self) -> None:
        """(Re)load every block: ``init(label)`` then ``get()`` of each provider, in order."""
        blocks = {}
        for config in self._configs.values():
            blocks[config.label] = await self._load_block(config)
        self._blocks = blocks

    async def ensure_loaded(self) -> None:
        if self._blocks is None:
            async with self._lock:
                if self._blocks is None:
                    await self.load()

    # -- reading -------------------------------------------------------------------------------

    def get_block(self, label: str) -> ContextBlock | None:
        """A loaded block, or ``None`` (also before anything loaded the blocks, §6.3)."""
        return None if self._blocks is None else self._blocks.get(label)

    def get_blocks(self) -> list[ContextBlock]:
        return [] if self._blocks is None else list(self._blocks.values())

    # -- writing -------------------------------------------------------------------------------

    def _writable(self, label: object, missing: str) -> tuple[ContextBlock, BlockConfig]:
        assert self._blocks is not None
        block = self._blocks.get(label) if isinstance(label, str) else None
        if block is None:
            raise NotFoundError(f'Block "{_label_error(label)}" {missing}')
        if not block.writable:
            raise InvalidInputError(f'Block "{label}" is readonly')
        if block.is_skill or block.is_searchable:
            raise InvalidInputError(
                f'Block "{label}" is a keyed provider. Use setSkill() or setSearchEntry() instead.'
            )
        return block, self._configs[block.label]

    async def set_block(self, label: str, content: str) -> ContextBlock:
        """Replace a writable block's content (the frozen prompt is not touched).

        A label with no block gets the reference's text, ``Block "x" is readonly`` (§6.4), as
        a :class:`NotFoundError`.
        """
        await self.ensure_loaded()
        block, config = self._writable(label, "is readonly")
        text = check_content(content)
        check_max_tokens(label, text, config.max_tokens)
        await call(config.provider.set, text)
        return self._store(replace(block, content=text))

    async def append_to_block(self, label: str, content: str) -> ContextBlock:
        """Append to a writable block (a newline between, §6.4); ``max_tokens`` applies to the
        whole. The built-in block appends on the log's current content."""
        await self.ensure_loaded()
        block, config = self._writable(label, "not found")
        addition = check_content(content)
        provider = config.provider
        if isinstance(provider, StoredBlock):
            text = await provider.append(addition)
        else:
            text = joined_content(block.content, addition)
            check_max_tokens(label, text, config.max_tokens)
            await call(provider.set, text)
        return self._store(replace(block, content=text))

    def _store(self, block: ContextBlock) -> ContextBlock:
        assert self._blocks is not None
        self._blocks[block.label] = block
        return block

    async def add(self, config: BlockConfig) -> ContextBlock:
        """Add a block after the configured ones (the frozen prompt is not touched)."""
        await self.ensure_loaded()
        if config.label in self._configs:
            raise InvalidInputError(f'Block "{config.label}" already exists')
        block = await self._load_block(config)
        self._configs[config.label] = config
        self._store(block)
        if block.is_skill and not self._skills_restored:
            await self.restore_skills()
        return block

    def remove(self, label: str) -> bool:
        """Drop a block (and its loaded skills, without unloading them from history)."""
        if label not in self._configs:
            return False
        del self._configs[label]
        if self._blocks is not None:
            self._blocks.pop(label, None)
        prefix = f"{label}:"
        self._loaded_skills = {k: None for k in self._loaded_skills if not k.startswith(prefix)}
        return True

    # -- system prompt -------------------------------------------------------------------------

    def render(self) -> str:
        if self._blocks is None:
            raise InvalidInputError("Context blocks not loaded. Call load() first.")
        return render_system_prompt(self._blocks.values())

    async def freeze(self) -> str:
        """The frozen prompt: the persisted one if any (even ``""``), else rendered once."""
        store = self._prompt_store
        if store is not None:
            stored = await store.get()
            if stored is not None:
                return stored
        await self.ensure_loaded()
        async with self._lock:
            if self._snapshot is None:
                self._snapshot = self.render()
            if store is not None:
                self._snapshot = await store.freeze(self._snapshot)
            return self._snapshot

    async def estimate_prompt(self) -> str:
        """The system prompt a token estimate counts (spec §5.3): the frozen snapshot, else the
        stored prompt, else the blocks rendered now, without freezing or storing anything."""
        if self._snapshot is not None:
            return self._snapshot
        if self._prompt_store is not None:
            stored = await self._prompt_store.get()
            if stored is not None:
                return stored
        await self.ensure_loaded()
        return self.render()

    async def refresh(self) -> str:
        """Reload every provider, re-render, and replace the frozen prompt."""
        async with self._lock:
            await self.load()
            self._snapshot = self.render()
            if self._prompt_store is not None:
                await self._prompt_store.refresh(self._snapshot)
            return self._snapshot

    # -- skills and search ---------------------------------------------------------------------

    def _skill_block(self, label: object) -> tuple[ContextBlock, BlockConfig]:
        assert self._blocks is not None
        block = self._blocks.get(label) if isinstance(label, str) else None
        if block is None or not block.is_skill:
            raise InvalidInputError(f'Block "{_label_error(label)}" is not a skill provider')
        return block, self._configs[block.label]

    @property
    def loaded_skills(self) -> list[str]:
        """``"label:key"`` of the loaded skills, in load order."""
        return list(self._loaded_skills)

    def clear_skill_state(self) -> None:
        self._loaded_skills = {}

    async def load_skill(self, label: str, key: str) -> str | None:
        """A skill's content (``None`` if the provider has none); a found skill is recorded."""
        await self.ensure_loaded()
        _, config = self._skill_block(label)
        if not isinstance(key, str):
            raise InvalidInputError(f"key must be a string, not {type(key).__name__}")
        content = await call(config.provider.load, key)
        if content is None:
            return None
        if not isinstance(content, str):
            raise InvalidInputError(f'skill "{key}" of "{label}" is not text')
        await self._skill_log.record_load(label, key)
        self._loaded_skills[f"{label}:{key}"] = None
        return content

    async def unload_skill(self, label: str, key: str) -> bool:
        """Unload a loaded skill (``False`` if it was not loaded); reclaims it in history."""
        name = f"{label}:{key}"
        if name not in self._loaded_skills:
            return False
        await self._skill_log.record_unload(label, key)
        self._loaded_skills.pop(name, None)
        if self._on_skill_unload is not None:
            try:
                await self._on_skill_unload(label, key)
            except Exception:  # the unload stands; the history rewrite is best effort (§7.2)
                logger.exception("could not rewrite the load_context output of %s", name)
        return True

    async def set_skill(
        self, label: str, key: str, content: str, description: str | None = None
    ) -> None:
        """Write a skill through its provider, then refresh the block's listing."""
        await self.ensure_loaded()
        block, config = self._skill_block(label)
        if not is_writable(config.provider):
            raise InvalidInputError(f'Block "{label}" does not support writes')
        await call(config.provider.set, key, check_content(content), description)
        await self._refresh_listing(block, config)

    async def set_search_entry(self, label: str, key: str, content: str) -> None:
        """Index an entry in a search block, then refresh the block's summary."""
        await self.ensure_loaded()
        assert self._blocks is not None
        block = self._blocks.get(label)
        if block is None or not block.is_searchable:
            raise InvalidInputError(f'Block "{label}" is not a search provider')
        config = self._configs[label]
        if not is_writable(config.provider):
            raise InvalidInputError(f'Block "{label}" does not support writes')
        await call(config.provider.set, key, check_content(content))
        await self._refresh_listing(block, config)

    async def _refresh_listing(self, block: ContextBlock, config: BlockConfig) -> None:
        listing = await call(config.provider.get)
        if isinstance(listing, str):
            _check_provider_text(config.label, listing)
            self._store(replace(block, content=listing))

    async def search(self, label: str, query: str) -> str | None:
        await self.ensure_loaded()
        assert self._blocks is not None
        block = self._blocks.get(label)
        if block is None or not block.is_searchable:
            raise InvalidInputError(f'Block "{label}" is not searchable')
        result = await call(self._configs[label].provider.search, query)
        return None if result is None else str(result)


def _check_provider_text(label: str, text: str) -> None:
    """Refuse provider text that cannot be stored or rendered (a lone surrogate)."""
    utf8_size(f'the content the provider of block "{label}" returned', text)
