"""memstream: an event-sourced memory platform for AI agents (sessions and agent memory).

Names are loaded on first use (PEP 562): importing a part of the package (the CLI, the domain,
a worker) does not import the whole client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memstream.agent_memory import AgentMemory as AgentMemory
    from memstream.agent_memory import Profile as Profile
    from memstream.client import Memstream as Memstream
    from memstream.client import connect as connect
    from memstream.compaction import CompactResult as CompactResult
    from memstream.compaction import create_compact_function as create_compact_function
    from memstream.context.providers import DirectorySkillProvider as DirectorySkillProvider
    from memstream.context.providers import SearchBlock as SearchBlock
    from memstream.context.providers import StaticContext as StaticContext
    from memstream.context.tools import Tool as Tool
    from memstream.context.tools import ToolSet as ToolSet
    from memstream.domain.errors import CompactionNotConfiguredError as CompactionNotConfiguredError
    from memstream.domain.errors import ConcurrencyError as ConcurrencyError
    from memstream.domain.errors import ExtractionLagError as ExtractionLagError
    from memstream.domain.errors import IncompatibleServerError as IncompatibleServerError
    from memstream.domain.errors import InvalidInputError as InvalidInputError
    from memstream.domain.errors import LogGapError as LogGapError
    from memstream.domain.errors import MemstreamError as MemstreamError
    from memstream.domain.errors import MessageNotFoundError as MessageNotFoundError
    from memstream.domain.errors import NotFoundError as NotFoundError
    from memstream.domain.errors import ProjectionLagError as ProjectionLagError
    from memstream.domain.errors import ProjectorRunningError as ProjectorRunningError
    from memstream.domain.errors import ReadModelAheadError as ReadModelAheadError
    from memstream.domain.errors import ReadModelDamagedError as ReadModelDamagedError
    from memstream.domain.errors import ReadModelUnavailableError as ReadModelUnavailableError
    from memstream.domain.errors import UnavailableError as UnavailableError
    from memstream.domain.messages import COMPACTION_PREFIX as COMPACTION_PREFIX
    from memstream.domain.messages import is_compaction_message as is_compaction_message
    from memstream.domain.system_prompt import ContextBlock as ContextBlock
    from memstream.domain.tokens import estimate_message_tokens as estimate_message_tokens
    from memstream.domain.tokens import estimate_string_tokens as estimate_string_tokens
    from memstream.llm_extractor import OpenAICompatibleExtractor as OpenAICompatibleExtractor
    from memstream.projections.recent_history import RecentHistory as RecentHistory
    from memstream.session import Session as Session
    from memstream.session_manager import SessionManager as SessionManager
    from memstream.settings import Settings as Settings
    from memstream.summarizers import ExtractiveSummarizer as ExtractiveSummarizer
    from memstream.summarizers import OpenAICompatibleSummarizer as OpenAICompatibleSummarizer
    from memstream.summarizers import summarizer_from_settings as summarizer_from_settings
    from memstream.sync import SyncMemstream as SyncMemstream
    from memstream.sync import connect_sync as connect_sync
    from memstream.types import MessageInput as MessageInput
    from memstream.types import MessagePart as MessagePart
    from memstream.types import SearchHit as SearchHit
    from memstream.types import SessionMessage as SessionMessage

# Where each public name is defined.
_WHERE = {
    "AgentMemory": "memstream.agent_memory",
    "Profile": "memstream.agent_memory",
    "Memstream": "memstream.client",
    "connect": "memstream.client",
    "CompactResult": "memstream.compaction",
    "create_compact_function": "memstream.compaction",
    "DirectorySkillProvider": "memstream.context.providers",
    "SearchBlock": "memstream.context.providers",
    "StaticContext": "memstream.context.providers",
    "Tool": "memstream.context.tools",
    "ToolSet": "memstream.context.tools",
    "CompactionNotConfiguredError": "memstream.domain.errors",
    "ConcurrencyError": "memstream.domain.errors",
    "ExtractionLagError": "memstream.domain.errors",
    "IncompatibleServerError": "memstream.domain.errors",
    "InvalidInputError": "memstream.domain.errors",
    "LogGapError": "memstream.domain.errors",
    "MemstreamError": "memstream.domain.errors",
    "MessageNotFoundError": "memstream.domain.errors",
    "NotFoundError": "memstream.domain.errors",
    "ProjectionLagError": "memstream.domain.errors",
    "ProjectorRunningError": "memstream.domain.errors",
    "ReadModelAheadError": "memstream.domain.errors",
    "ReadModelDamagedError": "memstream.domain.errors",
    "ReadModelUnavailableError": "memstream.domain.errors",
    "UnavailableError": "memstream.domain.errors",
    "COMPACTION_PREFIX": "memstream.domain.messages",
    "is_compaction_message": "memstream.domain.messages",
    "ContextBlock": "memstream.domain.system_prompt",
    "estimate_message_tokens": "memstream.domain.tokens",
    "estimate_string_tokens": "memstream.domain.tokens",
    "OpenAICompatibleExtractor": "memstream.llm_extractor",
    "RecentHistory": "memstream.projections.recent_history",
    "Session": "memstream.session",
    "SessionManager": "memstream.session_manager",
    "Settings": "memstream.settings",
    "ExtractiveSummarizer": "memstream.summarizers",
    "OpenAICompatibleSummarizer": "memstream.summarizers",
    "summarizer_from_settings": "memstream.summarizers",
    "SyncMemstream": "memstream.sync",
    "connect_sync": "memstream.sync",
    "MessageInput": "memstream.types",
    "MessagePart": "memstream.types",
    "SearchHit": "memstream.types",
    "SessionMessage": "memstream.types",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        # A submodule not imported yet (``memstream.client`` after ``import memstream``).
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # found once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
