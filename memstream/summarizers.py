"""Summarisers for compaction: an OpenAI-compatible chat model, or an extractive one offline.

A summariser is an async callable ``summarize(prompt) -> str``, as
:func:`memstream.create_compact_function` takes it. :func:`summarizer_from_settings` picks the
model when ``MEMSTREAM_LLM_URL`` and ``MEMSTREAM_LLM_MODEL`` are set, else
:class:`ExtractiveSummarizer`, which needs no model and no network.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from typing import TYPE_CHECKING, Any, Final, NoReturn
from urllib.parse import urlsplit

from memstream.domain.errors import InvalidInputError, UnavailableError
from memstream.domain.extractive_summary import DEFAULT_BUDGET, extractive_summary
from memstream.domain.limits import check_int, require_str
from memstream.domain.redaction import redact, redacted_exception, url_secrets
from memstream.settings import Settings

# httpx is imported where a request is made, as its import is costly
# (bench/RESULTS.md, 'Figures moved from code comments').
if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)

ERROR_DETAIL_MAX_CHARS: Final = 200


class OpenAICompatibleSummarizer:
    """Summarise with any OpenAI-compatible ``/chat/completions`` endpoint (OpenAI, vLLM,
    llama.cpp, Ollama, LiteLLM...): the prompt is sent as one user message and the reply's
    ``choices[0].message.content`` is the summary.

    Each attempt is bounded by ``timeout`` seconds. A timeout, a connection error, HTTP 429 or
    5xx is retried up to ``max_retries`` times, waiting ``backoff`` × 2ⁿ seconds (or the
    server's ``Retry-After``) but never more than ``max_backoff``; other HTTP errors are not
    retried, nor are redirects followed. Errors name the endpoint with any credentials masked
    and never contain the API key.

    Example::

        summarize = memstream.OpenAICompatibleSummarizer(
            "https://api.openai.com/v1", "gpt-4o-mini", api_key=os.environ["OPENAI_API_KEY"]
        )
        compact = memstream.create_compact_function(summarize=summarize)

    Args:
        base_url: the API root, ``http`` or ``https`` (``/chat/completions`` is appended).
        model: the model name sent with each request.
        api_key: sent as ``Authorization: Bearer <api_key>`` when given.
        timeout: seconds each attempt may take.
        max_retries: further attempts after a transient failure.
        backoff: seconds before the first retry (doubling after each).
        max_backoff: the longest wait between attempts.
        extra: further fields of each request (e.g. ``response_format``).

    Raises:
        InvalidInputError: a bad URL, an empty model or a negative timeout or retry count.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 10.0,
        extra: dict[str, Any] | None = None,
    ) -> None:
        if api_key is not None:
            require_str("api_key", api_key)
        self._url = _endpoint(base_url)
        self._secrets = [s for s in [api_key, *url_secrets(self._url)] if s]
        self._shown_url = redact(self._url, self._secrets)
        if not require_str("model", model).strip():
            raise InvalidInputError("model must not be empty")
        self._model = model
        self._api_key = api_key
        self._timeout = _seconds("timeout", timeout, minimum_exclusive=True)
        self._max_retries = check_int("max_retries", max_retries, minimum=0, maximum=100)
        self._backoff = _seconds("backoff", backoff)
        self._max_backoff = _seconds("max_backoff", max_backoff)
        self._extra = dict(extra or {})  # more request fields, e.g. response_format

    def __repr__(self) -> str:
        return f"OpenAICompatibleSummarizer({self._shown_url!r}, {self._model!r})"

    async def __call__(self, prompt: str) -> str:
        """Return the model's summary for ``prompt``.

        Raises:
            UnavailableError: the endpoint failed after the retries, refused the request, or
                answered with something other than a chat completion.
        """
        require_str("prompt", prompt)
        body = {
            **self._extra,
            "model": self._model,
            "messages": [{"role": "user", "content": prompt}],
        }
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        import httpx

        async with httpx.AsyncClient(timeout=self._timeout, follow_redirects=False) as client:
            for attempt in range(self._max_retries + 1):
                last = attempt == self._max_retries
                try:
                    response = await client.post(self._url, json=body, headers=headers)
                except httpx.TimeoutException as error:
                    if last:
                        self._fail(f"no answer within {self._timeout:g} s", attempt, error)
                    reason, wait = f"no answer within {self._timeout:g} s", None
                except httpx.TransportError as error:
                    if last:
                        self._fail(f"cannot connect ({type(error).__name__})", attempt, error)
                    reason, wait = f"cannot connect ({type(error).__name__})", None
                except httpx.RequestError as error:
                    self._fail(f"request failed ({type(error).__name__})", attempt, error)
                else:
                    if response.status_code < 300:
                        return self._content(response)
                    reason = f"HTTP {response.status_code}{self._detail(response)}"
                    if not _transient(response.status_code) or last:
                        self._fail(reason, attempt)
                    wait = _retry_after(response)
                delay = min(self._max_backoff, wait if wait is not None else self._delay(attempt))
                logger.warning(
                    "summarizer %s: %s; retry %d of %d in %.2f s",
                    self._shown_url,
                    reason,
                    attempt + 1,
                    self._max_retries,
                    delay,
                )
                await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _delay(self, attempt: int) -> float:
        return float(self._backoff * 2**attempt)

    def _fail(self, reason: str, attempt: int, error: BaseException | None = None) -> NoReturn:
        tries = f" after {attempt + 1} attempts" if attempt else ""
        message = redact(f"summarizer {self._shown_url}: {reason}{tries}", self._secrets)
        if error is None:
            raise UnavailableError(message)
        raise UnavailableError(message) from redacted_exception(error, self._secrets)

    def _detail(self, response: httpx.Response) -> str:
        """The server's error message (OpenAI's ``error.message``, else the body's start)."""
        text = response.text
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            text = str(parsed["error"].get("message", text))
        text = " ".join(text.split())[:ERROR_DETAIL_MAX_CHARS]
        return f": {redact(text, self._secrets)}" if text else ""

    def _content(self, response: httpx.Response) -> str:
        try:
            payload = response.json()
        except ValueError:
            self._fail(f"HTTP {response.status_code} answer is not JSON", 0)
        content = _dig(payload, "choices", 0, "message", "content")
        if not isinstance(content, str):
            self._fail(
                "the answer has no choices[0].message.content string "
                f"(found {type(content).__name__})",
                0,
            )
        return content


def _transient(status: int) -> bool:
    """Worth another attempt: too many requests, or a server error."""
    return status == 429 or status >= 500


def _dig(value: Any, *path: str | int) -> Any:
    for key in path:
        if isinstance(key, int) and isinstance(value, list) and len(value) > key:
            value = value[key]
        elif isinstance(key, str) and isinstance(value, dict):
            value = value.get(key)
        else:
            return None
    return value


def _endpoint(base_url: object) -> str:
    """``{base_url}/chat/completions``, refusing anything but an absolute http(s) URL."""
    url = require_str("base_url", base_url).strip()
    shown = redact(url, url_secrets(url))[:200]
    if any(not char.isprintable() or char.isspace() for char in url):
        raise InvalidInputError(f"base_url {shown!r} holds whitespace or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise InvalidInputError(f"base_url {shown!r} is not a valid URL") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise InvalidInputError(f"base_url {shown!r} must start with http:// or https://")
    if not parts.hostname:
        raise InvalidInputError(f"base_url {shown!r} has no host")
    if parts.query or parts.fragment:
        raise InvalidInputError(f"base_url {shown!r} must not have a query or fragment")
    return url.rstrip("/") + "/chat/completions"


def _seconds(name: str, value: object, *, minimum_exclusive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value) or value < 0 or (minimum_exclusive and value == 0):
        bound = "> 0" if minimum_exclusive else ">= 0"
        raise InvalidInputError(f"{name} is {value}; it must be finite and {bound}")
    return float(value)


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


class ExtractiveSummarizer:
    """Summarise without a model: the default when no LLM is configured.

    Answers a compaction prompt with its four sections (Topic, Key Points, Current State, Open
    Items) built from the conversation's own sentences: the most salient by term frequency, the
    last turns, questions and announced next steps; an update keeps the previous summary's
    points. Deterministic, fast, offline, and within the prompt's token target (any target
    of 30 tokens or more; the four headings alone take about 25, and a compaction asks for at
    least 100).

    Args:
        default_budget: the token target for a prompt that states none.
    """

    def __init__(self, default_budget: int = DEFAULT_BUDGET) -> None:
        self._default_budget = check_int(
            "default_budget", default_budget, minimum=1, maximum=1_000_000
        )

    def __repr__(self) -> str:
        return "ExtractiveSummarizer()"

    async def __call__(self, prompt: str) -> str:
        """Return an extractive summary of the conversation in ``prompt``."""
        return extractive_summary(require_str("prompt", prompt), self._default_budget)


def summarizer_from_settings(
    settings: Settings,
) -> OpenAICompatibleSummarizer | ExtractiveSummarizer:
    """The model of ``settings.llm_url``/``llm_model`` (with ``llm_api_key``) when both are
    set, else :class:`ExtractiveSummarizer`.

    Raises:
        InvalidInputError: ``llm_url`` is not an http(s) URL.
    """
    if settings.llm_url and settings.llm_model:
        return OpenAICompatibleSummarizer(
            settings.llm_url, settings.llm_model, api_key=settings.llm_api_key
        )
    return ExtractiveSummarizer()
