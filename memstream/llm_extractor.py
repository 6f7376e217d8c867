"""Memory extraction with a language model: any OpenAI-compatible chat endpoint, asked for JSON,
its answer validated before anything is recorded.

An answer that is not the JSON asked for is retried with the reason (``invalid_retries``
times); then the extraction fails, the extractor worker retries the source, and after its
attempts records it with no memories and the error (a dead letter in the log: never half
applied). The prompt's version and the model are recorded with every extraction.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any, Final

from memstream.domain.errors import MemstreamError
from memstream.domain.extraction.model import (
    MEMORY_TYPES,
    Embed,
    ExtractedMemory,
    ExtractorInfo,
    SourceMessage,
)
from memstream.domain.extraction.topics import topic_key
from memstream.domain.extraction.vocabulary import keywords
from memstream.domain.memory_input import iso, parse_time
from memstream.settings import Settings
from memstream.summarizers import OpenAICompatibleSummarizer

PROMPT_VERSION: Final = "1"
SUMMARY_MAX_CHARS: Final = 300
CONTENT_MAX_CHARS: Final = 4000
PROMPT: Final = """You extract memories about the user from a conversation, for an AI agent's
long-term memory. Return JSON only, exactly this shape:
{"memories": [{"type": "fact|event|instruction|task", "topic_key": "subject:predicate",
"summary": "one standalone sentence, third person, dates resolved", "content": "supporting text",
"sources": [message numbers], "event_time": "ISO 8601 date or null",
"keywords": ["..."], "queries": ["3 to 5 questions this memory answers"]}]}
Types: fact = stable knowledge about the user or the world; event = something that happened or
will happen at a time; instruction = how the agent should behave; task = something to do.
Resolve relative dates ("yesterday", "last week", "by Friday") against each message's time.
Leave out greetings and chit-chat; return {"memories": []} when nothing is worth remembering.
"""


class ExtractionOutputError(MemstreamError, ValueError):
    """The model's answer is not the JSON the extractor asked for."""


Chat = Callable[[str], Coroutine[Any, Any, str]]


class OpenAICompatibleExtractor:
    """Extract memories with the chat model at ``base_url`` (see the module doc).

    Example::

        extractor = OpenAICompatibleExtractor("http://localhost:8000/v1", "qwen2.5-7b")

    Raises:
        InvalidInputError: a bad URL, an empty model, bad timeouts or retry counts.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout: float = 120.0,
        max_retries: int = 3,
        invalid_retries: int = 2,
        backoff: float = 0.5,
    ) -> None:
        self._chat: Chat = OpenAICompatibleSummarizer(
            base_url,
            model,
            api_key,
            timeout=timeout,
            max_retries=max_retries,
            backoff=backoff,
            extra={"response_format": {"type": "json_object"}, "temperature": 0},
        )
        self._invalid_retries = invalid_retries
        self.info = ExtractorInfo("openai-compatible", PROMPT_VERSION, {"model": model})

    def __repr__(self) -> str:
        return f"OpenAICompatibleExtractor({self._chat!r})"

    def extract(
        self, messages: Sequence[SourceMessage], embed: Embed | None = None
    ) -> list[ExtractedMemory]:
        """The memories of a conversation (called in a worker thread).

        Raises:
            ExtractionOutputError: the answer stayed invalid after the retries.
            UnavailableError: the endpoint failed.
        """
        lines = [
            f"{number}. [{iso(m.timestamp)}] {m.role}: {m.content}"
            for number, m in enumerate(messages, start=1)
        ]
        prompt = PROMPT + "\nConversation:\n" + "\n".join(lines)
        error: ExtractionOutputError | None = None
        for _ in range(self._invalid_retries + 1):
            asked = (
                prompt if error is None else f"{prompt}\n\nYour last answer was invalid: {error}"
            )
            answer: str = asyncio.run(self._chat(asked))
            try:
                return parse_memories(answer, messages)
            except ExtractionOutputError as invalid:
                error = invalid
        assert error is not None
        raise error

    def extract_remembered(
        self, content: str, timestamp: datetime, embed: Embed | None = None
    ) -> ExtractedMemory:
        """Exactly one memory of a remembered text.

        Raises:
            ExtractionOutputError: the answer had no memory after the retries.
        """
        source = SourceMessage("remembered", "", "user", content, timestamp)
        for _ in range(self._invalid_retries + 1):
            found = self.extract([source])
            if found:
                first = found[0]
                return ExtractedMemory(
                    first.type,
                    first.topic_key,
                    first.summary,
                    content,
                    first.keywords,
                    first.queries,
                    (),
                    first.event_time,
                )
        raise ExtractionOutputError("the model found nothing to remember in the text")


def parse_memories(answer: str, messages: Sequence[SourceMessage]) -> list[ExtractedMemory]:
    """The memories in a model's answer, checked field by field.

    Raises:
        ExtractionOutputError: not JSON of the asked shape (names what is wrong).
    """
    text = answer.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        data = json.loads(text)
    except ValueError as error:
        raise ExtractionOutputError(f"the answer is not JSON ({error})") from None
    items = data.get("memories") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ExtractionOutputError('the answer has no "memories" list')
    return [_memory(item, index, messages) for index, item in enumerate(items)]


def _memory(item: Any, index: int, messages: Sequence[SourceMessage]) -> ExtractedMemory:
    where = f"memories[{index}]"
    if not isinstance(item, dict):
        raise ExtractionOutputError(f"{where} is not an object")
    kind = item.get("type")
    if kind not in MEMORY_TYPES:
        raise ExtractionOutputError(f"{where}.type is {kind!r}, not one of {MEMORY_TYPES}")
    summary = item.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        raise ExtractionOutputError(f"{where}.summary is missing or empty")
    content = item.get("content") or summary
    if not isinstance(content, str):
        raise ExtractionOutputError(f"{where}.content is not a string")
    sources = item.get("sources") or []
    if not isinstance(sources, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= len(messages) for n in sources
    ):
        raise ExtractionOutputError(f"{where}.sources must be message numbers 1–{len(messages)}")
    event_time = item.get("event_time")
    try:
        when = None if event_time in (None, "") else parse_time("event_time", event_time)
    except ValueError:
        raise ExtractionOutputError(f"{where}.event_time {event_time!r} is not ISO 8601") from None
    key = item.get("topic_key")
    if not isinstance(key, str) or not key.strip():
        key = topic_key(summary, kind)
    return ExtractedMemory(
        kind,
        key.strip().lower()[:200],
        summary.strip()[:SUMMARY_MAX_CHARS],
        content[:CONTENT_MAX_CHARS],
        tuple(_strings(item.get("keywords")) or keywords(summary)),
        tuple(_strings(item.get("queries"))[:5]),
        tuple(dict.fromkeys(messages[n - 1].id for n in sources if messages[n - 1].id)),
        when,
    )


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str) and v.strip()] if isinstance(value, list) else []


def extractor_from_settings(settings: Settings) -> Callable[[], Any]:
    """What makes the extractor of ``settings``: the model of ``llm_url``/``llm_model`` when
    both are set, else the offline extractor (made when first needed)."""
    if settings.llm_url and settings.llm_model:
        url, model, key = settings.llm_url, settings.llm_model, settings.llm_api_key
        return lambda: OpenAICompatibleExtractor(url, model, key)

    def offline() -> Any:
        from memstream.domain.extraction.offline import OfflineExtractor

        return OfflineExtractor()

    return offline
