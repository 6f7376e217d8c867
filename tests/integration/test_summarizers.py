"""Summarisers: the OpenAI-compatible one against a real local HTTP server, and the offline one."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from support.fake_llm import (
    DROP,
    HANG,
    FakeLLM,
    Reply,
    completion,
)

import memstream
from memstream.domain.compaction import build_summary_prompt, parse_summary_prompt
from memstream.domain.errors import InvalidInputError, UnavailableError
from memstream.domain.tokens import estimate_string_tokens
from memstream.settings import Settings
from memstream.summarizers import summarizer_from_settings

API_KEY = "sk-test-3f9a1c7e5b"


def fast(url: str, **options: Any) -> memstream.OpenAICompatibleSummarizer:
    """A summariser with short waits, for tests."""
    settings = {"api_key": API_KEY, "timeout": 5.0, "backoff": 0.01, "max_backoff": 0.05}
    return memstream.OpenAICompatibleSummarizer(url, "test-model", **{**settings, **options})


def chain(error: BaseException) -> str:
    """The text of an error and of every error under it."""
    texts = []
    current: BaseException | None = error
    while current is not None:
        texts.append(f"{current!s} {current!r}")
        current = current.__cause__ or current.__context__
    return "\n".join(texts)


# ── OpenAICompatibleSummarizer ───────────────────────────────────────────────────────────────


async def test_a_summary_is_the_first_choice_content(llm: Any) -> None:
    # Given a server that answers with a completion
    server = await llm(completion("## Topic\nTea"))
    # When asked for a summary
    summary = await fast(server.url())("Summarise this")
    # Then the answer is the content, from one POST to /v1/chat/completions
    assert summary == "## Topic\nTea"
    [request] = server.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.json() == {
        "model": "test-model",
        "messages": [{"role": "user", "content": "Summarise this"}],
    }
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.headers["content-type"] == "application/json"


async def test_no_api_key_sends_no_authorization(llm: Any) -> None:
    server = await llm(completion("ok"))
    await fast(server.url() + "/", api_key=None)("p")
    assert "authorization" not in server.requests[0].headers
    assert server.requests[0].path == "/v1/chat/completions"


async def test_server_errors_and_rate_limits_are_retried(llm: Any) -> None:
    server = await llm(Reply(500, "boom"), Reply(429, "{}"), Reply(503, ""), completion("ok"))
    assert await fast(server.url(), max_retries=3)("p") == "ok"
    assert len(server.requests) == 4


async def test_retry_after_is_honoured_up_to_the_longest_wait(llm: Any) -> None:
    server = await llm(Reply(429, "{}", {"Retry-After": "120"}), completion("ok"))
    started = time.monotonic()
    assert await fast(server.url(), max_backoff=0.05)("p") == "ok"
    assert time.monotonic() - started < 5


async def test_a_client_error_is_not_retried(llm: Any) -> None:
    body = json.dumps({"error": {"message": "model 'test-model' does not exist"}})
    server = await llm(Reply(400, body))
    with pytest.raises(UnavailableError) as caught:
        await fast(server.url(), max_retries=3)("p")
    assert len(server.requests) == 1
    assert str(caught.value) == (
        f"summarizer {server.url()}/chat/completions: HTTP 400: model 'test-model' does not exist"
    )


async def test_retries_are_bounded(llm: Any) -> None:
    server = await llm(Reply(503, "down"))
    with pytest.raises(UnavailableError, match="HTTP 503: down after 3 attempts"):
        await fast(server.url(), max_retries=2)("p")
    assert len(server.requests) == 3


async def test_a_server_that_never_answers_times_out(llm: Any) -> None:
    server = await llm(HANG)
    started = time.monotonic()
    with pytest.raises(UnavailableError, match=r"no answer within 0\.3 s after 2 attempts"):
        await fast(server.url(), timeout=0.3, max_retries=1)("p")
    assert time.monotonic() - started < 3
    assert len(server.requests) == 2


async def test_a_dropped_connection_is_retried(llm: Any) -> None:
    server = await llm(DROP, completion("ok"))
    assert await fast(server.url())("p") == "ok"
    assert len(server.requests) == 2


async def test_nobody_listening_is_unavailable() -> None:
    server = FakeLLM()
    await server.start()
    url = server.url()
    await server.stop()
    with pytest.raises(UnavailableError, match="cannot connect") as caught:
        await fast(url, max_retries=1)("p")
    assert API_KEY not in chain(caught.value)


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (Reply(200, "<html>not json</html>"), "HTTP 200 answer is not JSON"),
        (Reply(200, json.dumps({"choices": []})), r"no choices\[0\]\.message\.content string"),
        (Reply(200, json.dumps({"error": "x"})), r"\(found NoneType\)"),
        (completion(["a", "list"]), r"\(found list\)"),
        (Reply(200, json.dumps([1, 2])), r"message\.content string"),
    ],
)
async def test_an_answer_that_is_no_completion_is_a_clear_error(
    llm: Any, reply: Reply, message: str
) -> None:
    server = await llm(reply)
    with pytest.raises(UnavailableError, match=message):
        await fast(server.url())("p")
    assert len(server.requests) == 1


async def test_a_prompt_must_be_text(llm: Any) -> None:
    server = await llm(completion("ok"))
    with pytest.raises(InvalidInputError, match="prompt must be a string, not int"):
        await fast(server.url())(42)  # type: ignore[arg-type]
    assert server.requests == []


async def test_an_empty_content_is_returned_as_is(llm: Any) -> None:
    server = await llm(completion(""))
    assert await fast(server.url())("p") == ""


async def test_the_api_key_never_appears_in_an_error(llm: Any) -> None:
    # Given a server that echoes the key in its error, as some do
    body = json.dumps({"error": {"message": f"Incorrect API key provided: {API_KEY}"}})
    server = await llm(Reply(401, body))
    with pytest.raises(UnavailableError) as caught:
        await fast(server.url())("p")
    assert API_KEY not in chain(caught.value)
    assert "Incorrect API key provided: ***" in str(caught.value)
    assert API_KEY not in repr(fast(server.url()))


async def test_a_password_in_the_url_is_masked(llm: Any) -> None:
    server = await llm(Reply(502, "bad gateway"))
    with pytest.raises(UnavailableError) as caught:
        await fast(server.url("alice:hunter2@"), max_retries=0)("p")
    assert "hunter2" not in chain(caught.value)
    assert f"http://alice:***@127.0.0.1:{server.port}/v1/chat/completions" in str(caught.value)
    # and the server got it as basic auth, not in the path
    assert server.requests[0].path == "/v1/chat/completions"


async def test_a_redirect_is_not_followed(llm: Any) -> None:
    server = await llm(Reply(302, "", {"Location": "http://169.254.169.254/"}))
    with pytest.raises(UnavailableError, match="HTTP 302"):
        await fast(server.url())("p")
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("base_url", "message"),
    [
        ("ftp://host/v1", "must start with http:// or https://"),
        ("file:///etc/passwd", "must start with http:// or https://"),
        ("javascript:alert(1)", "must start with http:// or https://"),
        ("localhost:8080", "must start with http:// or https://"),
        ("http:///v1", "has no host"),
        ("http://host:99999/v1", "is not a valid URL"),
        ("http://host/v1?key=1", "must not have a query or fragment"),
        ("http://ho st/v1", "whitespace or control characters"),
        ("http://host/v1\r\nX-Injected: 1", "whitespace or control characters"),
        ("ftp://bob:s3cret@host/", "'ftp://bob:\\*\\*\\*@host/'"),
    ],
)
def test_a_bad_base_url_is_refused(base_url: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message) as caught:
        memstream.OpenAICompatibleSummarizer(base_url, "m")
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"model": ""}, "model must not be empty"),
        ({"model": 3}, "model must be a string"),
        ({"api_key": 5}, "api_key must be a string"),
        ({"timeout": 0}, "timeout is 0; it must be finite and > 0"),
        ({"timeout": float("inf")}, "timeout is inf"),
        ({"max_retries": -1}, "max_retries is -1"),
        ({"backoff": -0.5}, "backoff is -0.5"),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], message: str) -> None:
    arguments = {"base_url": "https://api.example.com/v1", "model": "m", **options}
    with pytest.raises(InvalidInputError, match=message):
        memstream.OpenAICompatibleSummarizer(**arguments)


async def test_the_model_summarises_a_compaction(llm: Any) -> None:
    # Given a compaction function on the model
    server = await llm(completion("## Topic\nA chat"))
    compact = memstream.create_compact_function(
        summarize=fast(server.url()), protect_head=1, tail_token_budget=10
    )
    messages = [
        {"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"turn {i}"}]}
        for i in range(8)
    ]
    # When compacted
    outcome = await compact(messages)
    # Then the model got the summary prompt and its answer is the summary
    assert outcome == {
        "from_message_id": "m1",
        "to_message_id": "m5",
        "summary": "## Topic\nA chat",
    }
    prompt = server.requests[0].json()["messages"][0]["content"]
    assert prompt.startswith("Create a concise summary of this conversation")


def test_settings_choose_the_summarizer() -> None:
    configured = Settings(llm_url="https://u:pw@llm.example/v1", llm_model="m", llm_api_key="k")
    model = summarizer_from_settings(configured)
    assert isinstance(model, memstream.OpenAICompatibleSummarizer)
    assert (
        repr(model)
        == "OpenAICompatibleSummarizer('https://u:***@llm.example/v1/chat/completions', 'm')"
    )
    assert isinstance(summarizer_from_settings(Settings()), memstream.ExtractiveSummarizer)
    assert isinstance(
        summarizer_from_settings(Settings(llm_url="https://x/v1")), memstream.ExtractiveSummarizer
    )
    with pytest.raises(InvalidInputError, match="must start with http"):
        summarizer_from_settings(Settings(llm_url="nats://x", llm_model="m"))


# ── ExtractiveSummarizer ─────────────────────────────────────────────────────────────────────

CONVERSATION = [
    ("user", "We need to migrate the billing service from MySQL to PostgreSQL before March."),
    (
        "assistant",
        "Understood. The billing service has 40 tables; the invoices table is the largest with "
        "12 million rows. I suggest a dual-write phase so PostgreSQL catches up without downtime.",
    ),
    ("user", "What about the stored procedures? There are about 30 of them in MySQL."),
    (
        "assistant",
        "The stored procedures must be rewritten in PL/pgSQL. Most are simple reports; the "
        "tax calculation procedure is the hard one because it uses MySQL-specific date functions.",
    ),
    ("user", "OK. Let's keep the tax calculation in the application code instead."),
    (
        "assistant",
        "Good decision: moving the tax calculation into the application removes the hardest "
        "procedure from the migration. I will draft the dual-write plan for the invoices table.",
    ),
    ("user", "Who owns the rollback plan? We still have to decide that."),
    (
        "assistant",
        "The rollback plan is not assigned yet. Next step: pick an owner for the rollback plan "
        "and schedule a PostgreSQL load test with production-sized invoices.",
    ),
]


def conversation_messages() -> list[dict[str, Any]]:
    messages = [
        {"id": f"m{i}", "role": role, "parts": [{"type": "text", "text": body}]}
        for i, (role, body) in enumerate(CONVERSATION)
    ]
    messages.insert(
        4,
        {
            "id": "tool",
            "role": "assistant",
            "parts": [
                {
                    "type": "tool-count_rows",
                    "toolCallId": "c1",
                    "input": {"table": "invoices"},
                    "output": {"rows": 12000000},
                }
            ],
        },
    )
    return messages


def sections(summary: str) -> list[str]:
    return [line[3:] for line in summary.splitlines() if line.startswith("## ")]


async def test_the_extractive_summary_has_the_four_sections_within_budget() -> None:
    # Given the summary prompt for a real conversation
    prompt = build_summary_prompt(conversation_messages(), None, 220)
    summarize = memstream.ExtractiveSummarizer()
    # When summarised twice
    summary = await summarize(prompt)
    # Then the same four sections come back, within the target, from the conversation's words
    assert summary == await summarize(prompt)
    assert sections(summary) == ["Topic", "Key Points", "Current State", "Open Items"]
    assert estimate_string_tokens(summary) <= 220
    assert "migrate the billing service from MySQL to PostgreSQL" in summary
    assert "postgresql" in summary.lower().split("## key points")[0]  # a key term in the topic
    key_points = summary.split("## Key Points\n")[1].split("\n\n")[0]
    assert "tax calculation" in key_points
    assert "count_rows" in key_points  # the tools used
    open_items = summary.split("## Open Items\n")[1]
    assert "Next step: pick an owner for the rollback plan" in open_items
    assert "migrate the billing service" not in open_items  # the topic is said once
    current = summary.split("## Current State\n")[1].split("\n\n")[0]
    assert "Last user message: Who owns the rollback plan?" in current
    # And with room, every question of the user is an open item
    roomy = await summarize(build_summary_prompt(conversation_messages(), None, 1000))
    roomy_open_items = roomy.split("## Open Items\n")[1]
    assert "- What about the stored procedures?" in roomy_open_items
    assert "- Who owns the rollback plan?" in roomy_open_items
    assert "12 million rows" in roomy


@pytest.mark.parametrize("budget", [100, 150, 400, 2000])
async def test_the_extractive_summary_respects_any_budget(budget: int) -> None:
    prompt = build_summary_prompt(conversation_messages(), None, budget)
    summary = await memstream.ExtractiveSummarizer()(prompt)
    assert estimate_string_tokens(summary) <= budget
    assert sections(summary) == ["Topic", "Key Points", "Current State", "Open Items"]


async def test_an_update_keeps_the_previous_points() -> None:
    # Given a first summary, then new turns
    summarize = memstream.ExtractiveSummarizer()
    first = await summarize(build_summary_prompt(conversation_messages()[:4], None, 300))
    new_turns = [
        {
            "id": "n1",
            "role": "user",
            "parts": [
                {
                    "type": "text",
                    "text": "The load test passed "
                    "with production-sized invoices at 2,000 writes per second.",
                }
            ],
        },
    ]
    # When the summary is updated
    updated = await summarize(build_summary_prompt(new_turns, first, 300))
    # Then the previous topic and points stay, and the new turn is in
    assert updated.split("\n\n")[0] == first.split("\n\n")[0]
    first_points = first.split("## Key Points\n")[1].split("\n\n")[0].splitlines()
    assert all(point in updated for point in first_points)
    assert "2,000 writes per second" in updated
    assert estimate_string_tokens(updated) <= 300


async def test_the_extractive_summarizer_compacts_a_session_history() -> None:
    compact = memstream.create_compact_function(
        summarize=memstream.ExtractiveSummarizer(), protect_head=1, tail_token_budget=60
    )
    outcome = await compact(conversation_messages())
    assert outcome is not None
    assert outcome["from_message_id"] == "m1"
    assert sections(outcome["summary"]) == ["Topic", "Key Points", "Current State", "Open Items"]


async def test_any_text_is_summarised_as_one_conversation() -> None:
    summary = await memstream.ExtractiveSummarizer(default_budget=120)(
        "The deploy failed twice because the disk was full. We should add disk alerts. "
        "Can we rotate the logs daily?"
    )
    assert estimate_string_tokens(summary) <= 120
    assert "disk" in summary
    assert sections(summary) == ["Topic", "Key Points", "Current State", "Open Items"]
    assert parse_summary_prompt(summary).budget is None


async def test_a_long_history_is_summarised_quickly() -> None:
    messages = [
        {
            "id": f"m{i}",
            "role": "user" if i % 2 == 0 else "assistant",
            "parts": [
                {
                    "type": "text",
                    "text": f"Step {i} of the rollout touched service {i % 17}. "
                    f"Latency stayed under {i % 50 + 20} ms on node {i % 7}.",
                }
            ],
        }
        for i in range(3000)
    ]
    prompt = build_summary_prompt(messages, None, 2000)
    started = time.monotonic()
    summary = await memstream.ExtractiveSummarizer()(prompt)
    assert time.monotonic() - started < 5
    assert estimate_string_tokens(summary) <= 2000
