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

With a text sink the call streams (`"stream": true` and `"stream_options": {"include_usage": true}`, so the
last chunk carries the usage the plain answer has; llm/openai_stream.py), under the same error mapping.

`base_url` ends where the OpenAI SDK's does (`https://api.openai.com/v1`, `http://localhost:11434/v1`):
the client posts to `{base_url}/chat/completions`. An empty key sends no `Authorization` header,
for local servers that need none.
"""

from __future__ import annotations

from typing import Any, Literal, Unpack

import httpx

from support_agent.config import Settings
from support_agent.llm.base import LlmRequest, LlmResponse, Seams
from support_agent.llm.http_client import HttpClient, HttpOptions, http_options
from support_agent.llm.http_errors import ProviderError
from support_agent.llm.openai_stream import CompletionStream
from support_agent.llm.retry import SPEND_LIMIT, RetryPolicy, error_type
from support_agent.llm.translate import openai_request, parse_openai_response

RETRYABLE_STATUS = frozenset({408, 409, 429})
QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached", "billing_not_active"})
MaxTokensParam = Literal["max_tokens", "max_completion_tokens"]


class OpenAIClient(HttpClient):
    """One `create` = one chat completion, under the shared `RetryPolicy` (`llm/retry.py`).

    `max_tokens_param`: "max_tokens" is what compatible servers read; OpenAI's newer models want
    "max_completion_tokens".
    """

    BASE_URL = "https://api.openai.com/v1"
    PATH = "/chat/completions"
    RETRYABLE_STATUS = RETRYABLE_STATUS
    SPENT = "model API quota or spend limit reached"
    STREAM_FIELDS = {"stream": True, "stream_options": {"include_usage": True}}

    def __init__(self, *, max_tokens_param: MaxTokensParam = "max_tokens", **options: Unpack[HttpOptions]) -> None:
        super().__init__(**options)
        self.max_tokens_param = max_tokens_param

    @classmethod
    def from_settings(cls, settings: Settings, policy: RetryPolicy, seams: Seams) -> OpenAIClient:
        secret = (settings.openai_api_key, settings.openai_api_key_secret_arn)
        model = settings.openai_model or settings.model_id
        options = http_options(settings, policy, seams, secret, model, settings.openai_base_url)
        return cls(max_tokens_param=settings.openai_max_tokens_param, **options)

    def _headers(self, key: str) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if key:
            headers["authorization"] = f"Bearer {key}"
        return headers

    def _body(self, request: LlmRequest) -> dict[str, Any]:
        return openai_request(self.model, self.max_tokens, request, max_tokens_param=self.max_tokens_param)

    def _parse(self, data: Any) -> LlmResponse:
        return parse_openai_response(data)

    def _assembler(self) -> CompletionStream:
        return CompletionStream()

    def _error(self, r: httpx.Response) -> ProviderError:
        """An OpenAI error body (`{"error": {...}}`): its code, else its type; out of quota or credit is spent."""
        type_, code, message = _error_of(r)
        quota = code in QUOTA_CODES or type_ in QUOTA_CODES or r.status_code == 402
        spent = quota or SPEND_LIMIT.search(message) is not None
        return ProviderError(code if error_type(code) else type_, message, spent)


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
