"""`LlmClient` for OpenAI-compatible chat completions (OpenAI, LiteLLM, vLLM, Ollama...), on plain httpx.

No SDK, for the same reasons as `llm/anthropic.py`: a small layer, and retries that know the turn's
deadline. The translation to and from the canonical history is `llm/translate.py`; retries, the
deadline and the breaker are `llm/retry.py`, the same policy as the Anthropic client.

Error mapping:

* 408 / 409 / 429 / 5xx, connection errors and timeouts, and a 200 whose body is not a chat
  completion → retried (backoff with full jitter, or `retry-after-ms` / `retry-after`), then
  `ModelUnavailable` (503).
* Out of quota or credit (`insufficient_quota`, or a 4xx saying "billing", "credit", "spend") →
  `ModelUnavailable` with `retry_after=3600`, not retried.
* Any other 4xx → `ModelRefused` (502), not retried; its body names the status and error code only, the
  provider's message (the key scrubbed) goes to the log.

`base_url` ends where the OpenAI SDK's does (`https://api.openai.com/v1`, `http://localhost:11434/v1`):
the client posts to `{base_url}/chat/completions`. An empty key sends no `Authorization` header,
for local servers that need none.
"""

from __future__ import annotations

import json
import logging
import random as _random
import time
from collections.abc import Callable
from typing import Any, Literal

import httpx

from support_agent.errors import ModelUnavailable
from support_agent.llm.base import LlmResponse
from support_agent.llm.breaker import CircuitBreaker
from support_agent.llm.retry import (
    SPEND_LIMIT,
    SPEND_LIMIT_RETRY_AFTER,
    Retryable,
    RetryingClient,
    error_type,
    http_client,
    refused,
    retry_after_header,
)
from support_agent.llm.translate import openai_request, parse_openai_response
from support_agent.messages import Deadline, Message

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 429})
QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached", "billing_not_active"})
MaxTokensParam = Literal["max_tokens", "max_completion_tokens"]


class OpenAIClient(RetryingClient):
    """One `create` = one chat completion, with retries, per-attempt timeouts and a breaker.

    `max_tokens_param`: "max_tokens" is what compatible servers read; OpenAI's newer models want
    "max_completion_tokens".
    """

    def __init__(
        self,
        *,
        api_key: str | Callable[[], str],
        model: str,
        max_tokens: int = 1024,
        base_url: str = "https://api.openai.com/v1",
        max_tokens_param: MaxTokensParam = "max_tokens",
        connect_timeout: float = 3.0,
        read_timeout: float = 25.0,
        max_retries: int = 3,
        breaker: CircuitBreaker | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        random: Callable[[], float] = _random.random,
    ) -> None:
        super().__init__(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_retries=max_retries,
            breaker=breaker,
            sleep=sleep,
            clock=clock,
            random=random,
        )
        self.model = model
        self.max_tokens = max_tokens
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.max_tokens_param = max_tokens_param
        self._api_key = api_key
        self._http = http_client(self.url, transport)

    def close(self) -> None:
        self._http.close()

    def create(
        self,
        system: str,
        messages: list[Message],
        tools: list[dict[str, Any]],
        tool_choice: dict[str, Any] | None = None,
        *,
        deadline: Deadline | None = None,
    ) -> LlmResponse:
        self._begin()
        key = self._api_key() if callable(self._api_key) else self._api_key
        body = openai_request(
            self.model,
            self.max_tokens,
            system,
            messages,
            tools,
            tool_choice,
            max_tokens_param=self.max_tokens_param,
        )
        content = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        headers = {"content-type": "application/json"}
        if key:
            headers["authorization"] = f"Bearer {key}"
        return self._retried(lambda: self._attempt(content, headers, key, deadline), deadline)

    def _attempt(self, content: bytes, headers: dict[str, str], key: str, deadline: Deadline | None) -> LlmResponse:
        try:
            r = self._http.post(self.url, content=content, headers=headers, timeout=self._timeout(deadline))
        except httpx.TransportError as exc:
            raise Retryable(type(exc).__name__) from None
        if r.status_code == 200:
            try:
                return parse_openai_response(r.json())
            except ValueError as exc:
                raise Retryable(f"malformed response: {exc}") from None
        err_type, err_code, err_message = _error_of(r)
        reason = f"HTTP {r.status_code} {error_type(err_code) or error_type(err_type)}".rstrip()
        if 400 <= r.status_code < 500 and (
            err_code in QUOTA_CODES
            or err_type in QUOTA_CODES
            or r.status_code == 402
            or SPEND_LIMIT.search(err_message)
        ):
            raise ModelUnavailable(
                f"model API quota or spend limit reached ({reason})", retry_after=SPEND_LIMIT_RETRY_AFTER
            )
        if r.status_code in RETRYABLE_STATUS or r.status_code >= 500:
            raise Retryable(reason, retry_after_header(r.headers))
        raise refused(reason, err_message, key)


def _error_of(r: httpx.Response) -> tuple[str, str, str]:
    """(type, code, message) of an OpenAI error body (`{"error": {...}}`); empty strings otherwise."""
    try:
        data = r.json()
    except ValueError:
        return "", "", ""
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, str):  # some compatible servers: {"error": "message"}
        return "", "", err
    if not isinstance(err, dict):
        return "", "", ""
    return str(err.get("type") or ""), str(err.get("code") or ""), str(err.get("message") or "")
