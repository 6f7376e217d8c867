"""memstream: an event-sourced memory platform for AI agents (sessions and agent memory)."""

from memstream.agent_memory import AgentMemory, Profile
from memstream.client import Memstream, connect
from memstream.compaction import CompactResult, create_compact_function
from memstream.context.providers import DirectorySkillProvider, SearchBlock, StaticContext
from memstream.context.tools import Tool, ToolSet
from memstream.domain.errors import (
    CompactionNotConfiguredError,
    ConcurrencyError,
    ExtractionLagError,
    IncompatibleServerError,
    InvalidInputError,
    LogGapError,
    MemstreamError,
    MessageNotFoundError,
    NotFoundError,
    ProjectionLagError,
    ProjectorRunningError,
    ReadModelAheadError,
    ReadModelDamagedError,
    ReadModelUnavailableError,
    UnavailableError,
)
from memstream.domain.messages import COMPACTION_PREFIX, is_compaction_message
from memstream.domain.system_prompt import ContextBlock
from memstream.domain.tokens import estimate_message_tokens, estimate_string_tokens
from memstream.llm_extractor import OpenAICompatibleExtractor
from memstream.projections.recent_history import RecentHistory
from memstream.session import Session
from memstream.session_manager import SessionManager
from memstream.settings import Settings
from memstream.summarizers import (
    ExtractiveSummarizer,
    OpenAICompatibleSummarizer,
    summarizer_from_settings,
)
from memstream.sync import SyncMemstream, connect_sync
from memstream.types import MessageInput, MessagePart, SearchHit, SessionMessage

__all__ = [
    "COMPACTION_PREFIX",
    "AgentMemory",
    "CompactResult",
    "CompactionNotConfiguredError",
    "ConcurrencyError",
    "ContextBlock",
    "DirectorySkillProvider",
    "ExtractionLagError",
    "ExtractiveSummarizer",
    "IncompatibleServerError",
    "InvalidInputError",
    "LogGapError",
    "Memstream",
    "MemstreamError",
    "MessageInput",
    "MessageNotFoundError",
    "MessagePart",
    "NotFoundError",
    "OpenAICompatibleExtractor",
    "OpenAICompatibleSummarizer",
    "Profile",
    "ProjectionLagError",
    "ProjectorRunningError",
    "ReadModelAheadError",
    "ReadModelDamagedError",
    "ReadModelUnavailableError",
    "RecentHistory",
    "SearchBlock",
    "SearchHit",
    "Session",
    "SessionManager",
    "SessionMessage",
    "Settings",
    "StaticContext",
    "SyncMemstream",
    "Tool",
    "ToolSet",
    "UnavailableError",
    "connect",
    "connect_sync",
    "create_compact_function",
    "estimate_message_tokens",
    "estimate_string_tokens",
    "is_compaction_message",
    "summarizer_from_settings",
]
