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

from collections.abc import Callable
from typing import Any, Literal

import httpx

from support_agent.config import Settings
from support_agent.errors import ModelUnavailable
from support_agent.llm.base import LlmResponse, Seams
from support_agent.llm.http_client import HttpClient
from support_agent.llm.messages_api import encode_body
from support_agent.llm.retry import (
    SPEND_LIMIT,
    SPEND_LIMIT_RETRY_AFTER,
    Attempt,
    Retryable,
    RetryPolicy,
    error_type,
    refused,
    retry_after_header,
)
from support_agent.llm.translate import openai_request, parse_openai_response
from support_agent.messages import Message
from support_agent.secrets import key_provider

RETRYABLE_STATUS = frozenset({408, 409, 429})
QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached", "billing_not_active"})
MaxTokensParam = Literal["max_tokens", "max_completion_tokens"]


class OpenAIClient(HttpClient):
    """One `create` = one chat completion, under the shared `RetryPolicy` (`llm/retry.py`).

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
        transport: httpx.BaseTransport | None = None,
        policy: RetryPolicy | None = None,
    ) -> None:
        super().__init__(base_url.rstrip("/") + "/chat/completions", api_key, model, max_tokens, transport, policy)
        self.max_tokens_param = max_tokens_param

    @classmethod
    def from_settings(cls, settings: Settings, policy: RetryPolicy, seams: Seams) -> OpenAIClient:
        return cls(
            api_key=key_provider(
                settings.openai_api_key,
                settings.openai_api_key_secret_arn,
                seams.secrets_client,
                settings.api_key_cache_seconds,
            ),
            model=settings.openai_model or settings.model_id,
            max_tokens=settings.max_tokens,
            base_url=settings.openai_base_url,
            max_tokens_param=settings.openai_max_tokens_param,
            transport=seams.transport,
            policy=policy,
        )

    def _request(
        self, system: str, messages: list[Message], tools: list[dict[str, Any]], tool_choice: dict[str, Any] | None
    ) -> Attempt:
        key = self._key()
        body = openai_request(
            self.model, self.max_tokens, system, messages, tools, tool_choice, max_tokens_param=self.max_tokens_param
        )
        content = encode_body(body)
        headers = {"content-type": "application/json"}
        if key:
            headers["authorization"] = f"Bearer {key}"
        return lambda deadline: self._post(content, headers, key, deadline)

    def _parse(self, data: Any) -> LlmResponse:
        return parse_openai_response(data)

    def _failure(self, r: httpx.Response, key: str) -> Exception:
        err_type, err_code, err_message = _error_of(r)
        reason = f"HTTP {r.status_code} {error_type(err_code) or error_type(err_type)}".rstrip()
        if 400 <= r.status_code < 500 and (
            err_code in QUOTA_CODES
            or err_type in QUOTA_CODES
            or r.status_code == 402
            or SPEND_LIMIT.search(err_message)
        ):
            return ModelUnavailable(
                f"model API quota or spend limit reached ({reason})", retry_after=SPEND_LIMIT_RETRY_AFTER
            )
        if r.status_code in RETRYABLE_STATUS or r.status_code >= 500:
            return Retryable(reason, retry_after_header(r.headers))
        return refused(reason, err_message, key)


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
