"""The LLM extractor against a local fake OpenAI-compatible server: JSON asked for, validated,
invalid answers retried, and a source that stays invalid dead-lettered in the log, never half
applied."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from support.fake_llm import (
    FakeLLM,
    Reply,
    completion,
)

from memstream.client import open_memstream
from memstream.domain.extraction.model import SourceMessage
from memstream.llm_extractor import ExtractionOutputError, OpenAICompatibleExtractor
from memstream.settings import Settings

WHEN = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
MESSAGES = [
    SourceMessage("a1", "s1", "user", "I moved to Berlin last week.", WHEN),
    SourceMessage("a2", "s1", "assistant", "Nice! How is it?", WHEN),
]
GOOD = {
    "memories": [
        {
            "type": "fact",
            "topic_key": "user:lives_in",
            "summary": "The user moved to Berlin in the week of 1 May 2023.",
            "content": "I moved to Berlin last week.",
            "sources": [1],
            "event_time": "2023-05-01",
            "keywords": ["berlin", "moved"],
            "queries": ["Where does the user live?"],
        }
    ]
}


def extractor(server: FakeLLM) -> OpenAICompatibleExtractor:
    return OpenAICompatibleExtractor(
        server.url(), "test-model", "sk-test-key", timeout=5.0, backoff=0.01
    )


async def test_a_valid_answer_becomes_memories_with_their_sources(llm: Any) -> None:
    server = await llm(completion(json.dumps(GOOD)))
    memories = await asyncio.to_thread(extractor(server).extract, MESSAGES)
    [memory] = memories
    assert (memory.type, memory.topic_key) == ("fact", "user:lives_in")
    assert memory.source_message_ids == ("a1",)
    assert memory.event_time == datetime(2023, 5, 1, tzinfo=UTC)
    # And the request asked for JSON, with the key, the model and the numbered conversation
    [request] = server.requests
    body = request.json()
    assert body["response_format"] == {"type": "json_object"}
    assert body["model"] == "test-model"
    assert request.headers["authorization"] == "Bearer sk-test-key"
    assert "1. [2023-05-08T13:56:00Z] user: I moved to Berlin" in body["messages"][0]["content"]


async def test_an_invalid_answer_is_retried_with_the_reason(llm: Any) -> None:
    server = await llm(
        completion("not json at all"),
        completion(json.dumps({"memories": [{"type": "opinion", "summary": "x"}]})),
        completion(json.dumps(GOOD)),
    )
    memories = await asyncio.to_thread(extractor(server).extract, MESSAGES)
    assert len(memories) == 1
    assert len(server.requests) == 3
    assert "is not JSON" in server.requests[1].json()["messages"][0]["content"]
    assert "memories[0].type is 'opinion'" in server.requests[2].json()["messages"][0]["content"]


async def test_an_answer_that_stays_invalid_fails_the_extraction(llm: Any) -> None:
    server = await llm(completion(json.dumps({"memories": [{"type": "fact", "sources": [9]}]})))
    with pytest.raises(ExtractionOutputError, match="summary"):
        await asyncio.to_thread(extractor(server).extract, MESSAGES)
    assert len(server.requests) == 3  # the first answer and two retries


async def test_a_source_that_keeps_failing_is_recorded_with_no_memories(
    llm: Any, settings: Settings
) -> None:
    # Given a platform whose extractor is a model that never answers valid JSON
    server = await llm(completion("{}"))
    configured = settings.with_(llm_url=server.url(), llm_model="test-model")
    ms = await open_memstream(configured, workers=True)
    try:
        profile = await ms.agent_memory("default").get_profile("zoe")
        # When a conversation is ingested, Then ingest returns (the source is done) ...
        await asyncio.wait_for(
            profile.ingest(
                [{"role": "user", "content": "I moved to Berlin last week."}], session_id="s1"
            ),
            timeout=60,
        )
        # ... with no memory, its raw message kept, and the failure recorded in the log
        assert (await profile.list())["memories"] == []
        [listed] = await ms.agent_memory("default").list_profiles()
        assert listed["messages"] == 1
        entries = [
            e
            async for e in ms.core.log.read_subject(
                f"{ms.core.log.subject_prefix}.default.profile.zoe"
            )
        ]
        extracted = [json.loads(e.payload) for e in entries]
        [record] = [p for p in extracted if p["type"] == "memory.memories_extracted"]
        assert record["memories"] == []
        assert record["extractor"]["name"] == "openai-compatible"
        assert "ExtractionOutputError" in record["extractor"]["error"]
        assert ms.core.workers.extractor is not None
        assert ms.core.workers.extractor.failed == 1
    finally:
        await ms.close()


async def test_with_a_model_recall_answers_from_the_candidates_only(
    llm: Any, settings: Settings
) -> None:
    # Given a platform whose model extracts, then answers, then fails
    server = await llm(
        completion(json.dumps(GOOD)),
        completion("The user moved to Berlin in early May 2023."),
        Reply(status=400, body='{"error": {"message": "bad request"}}'),
    )
    configured = settings.with_(llm_url=server.url(), llm_model="test-model")
    ms = await open_memstream(configured, workers=True)
    try:
        profile = await ms.agent_memory("default").get_profile("yan")
        await profile.ingest(
            [{"role": "user", "content": "I moved to Berlin last week.", "timestamp": WHEN}],
            session_id="s1",
        )
        # When recall finds candidates, Then the model's answer is the answer
        result = await profile.recall("Where did the user move?")
        assert result["answer"] == "The user moved to Berlin in early May 2023."
        # And the model saw the question and the candidates' summaries, nothing else
        prompt = server.requests[1].json()["messages"][0]["content"]
        assert "Question: Where did the user move?" in prompt
        assert "- [fact, 2023-05-01] The user moved to Berlin in the week of 1 May 2023." in prompt
        # When the model fails, Then the answer is the extractive one
        again = await profile.recall("Where did the user move?")
        assert again["answer"] == "The user moved to Berlin in the week of 1 May 2023."
        # And with no candidates the model is not asked
        asked = len(server.requests)
        assert (await profile.recall("volcano astronomy"))["answer"] == ""
        assert len(server.requests) == asked
    finally:
        await ms.close()
