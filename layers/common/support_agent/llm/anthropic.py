"""`LlmClient` for the Anthropic Messages API (or any server speaking it), on plain httpx.

Why not the SDK: the Lambda layer stays small, and retries, timeouts and the breaker must follow
the turn's `Deadline` (rule 4), which the SDK's own retry loop does not know about.

Error mapping (docs/ARCHITECTURE.md's error table):

* 429 / 529 / 408 / 5xx, connection errors and timeouts are retried (exponential backoff with full
  jitter, or the server's `retry-after`), never sleeping past the deadline; when retries run out or
  the next wait would cross the deadline → `ModelUnavailable` (503) with a `retry_after` for clients.
* A spend / billing limit (a 4xx whose error says so) is not retried: resending will not help for a
  long time, yet nothing is wrong with the request, so → `ModelUnavailable` with `retry_after=3600`.
* Any other 4xx → `ModelRefused` (502), no retry: the same request would be refused again. The body names
  the HTTP status and error type only; the provider's message goes to the log (`retry.refused`).
* A 200 whose body is not a Messages API response (bad JSON, no `content`/`stop_reason`) →
  retried, then `ModelUnavailable`: in practice that is a proxy or gateway fault, not our request.

The request body and the response are the Messages API's wire format (llm/messages_api.py). With a text
sink the call streams (`"stream": true`, llm/messages_stream.py): the same error mapping, plus an `error`
event inside the stream read as its type's HTTP status (`overloaded_error` mid-stream is retried).
"""

from __future__ import annotations

import logging
from typing import Any, Unpack

import httpx

from support_agent.config import Settings
from support_agent.errors import ModelRefused
from support_agent.llm.base import LlmRequest, LlmResponse, Seams
from support_agent.llm.http_client import HttpClient, HttpOptions, http_options
from support_agent.llm.http_errors import ProviderError
from support_agent.llm.messages_api import build_body, encode_body, parse_response
from support_agent.llm.messages_stream import MessageStream
from support_agent.llm.retry import SPEND_LIMIT, RetryPolicy

log = logging.getLogger(__name__)

__all__ = ["AnthropicClient", "build_body", "encode_body", "parse_response"]

RETRYABLE_STATUS = frozenset({408, 429, 529})


class AnthropicClient(HttpClient):
    """One `create` = one Messages API call, under the shared `RetryPolicy` (`llm/retry.py`)."""

    BASE_URL = "https://api.anthropic.com"
    PATH = "/v1/messages"
    RETRYABLE_STATUS = RETRYABLE_STATUS

    def __init__(self, *, anthropic_version: str = "2023-06-01", **options: Unpack[HttpOptions]) -> None:
        super().__init__(**options)
        self.anthropic_version = anthropic_version

    @classmethod
    def from_settings(cls, settings: Settings, policy: RetryPolicy, seams: Seams) -> AnthropicClient:
        secret = (settings.anthropic_api_key, settings.anthropic_api_key_secret_arn)
        options = http_options(settings, policy, seams, secret, settings.model_id, settings.anthropic_base_url)
        return cls(anthropic_version=settings.anthropic_version, **options)

    def _headers(self, key: str) -> dict[str, str]:
        if not key:
            raise ModelRefused("model API key not configured")
        return {"x-api-key": key, "anthropic-version": self.anthropic_version, "content-type": "application/json"}

    def _body(self, request: LlmRequest) -> dict[str, Any]:
        return build_body(self.model, self.max_tokens, request)

    def _parse(self, data: Any) -> LlmResponse:
        return parse_response(data)

    def _assembler(self) -> MessageStream:
        return MessageStream()

    def _error(self, r: httpx.Response) -> ProviderError:
        """An Anthropic error body's type and message; a billing error, or a spend limit its message names, is spent."""
        try:
            err = r.json().get("error")
        except (ValueError, AttributeError):
            return ProviderError()
        if not isinstance(err, dict):
            return ProviderError()
        kind, message = str(err.get("type") or ""), str(err.get("message") or "")
        spent = kind == "billing_error" or (kind != "" and SPEND_LIMIT.search(message) is not None)
        return ProviderError(kind, message, spent)
