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

The request body and the response are the Messages API's wire format (llm/messages_api.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import httpx

from support_agent.config import Settings
from support_agent.errors import ModelRefused, ModelUnavailable
from support_agent.llm.base import LlmResponse, Seams
from support_agent.llm.http_client import HttpClient
from support_agent.llm.messages_api import build_body, encode_body, parse_response
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
from support_agent.messages import Message
from support_agent.secrets import key_provider

log = logging.getLogger(__name__)

__all__ = ["AnthropicClient", "build_body", "encode_body", "parse_response"]

RETRYABLE_STATUS = frozenset({408, 429, 529})


class AnthropicClient(HttpClient):
    """One `create` = one Messages API call, under the shared `RetryPolicy` (`llm/retry.py`)."""

    def __init__(
        self,
        *,
        api_key: str | Callable[[], str],
        model: str,
        max_tokens: int = 1024,
        base_url: str = "https://api.anthropic.com",
        anthropic_version: str = "2023-06-01",
        transport: httpx.BaseTransport | None = None,
        policy: RetryPolicy | None = None,
    ) -> None:
        super().__init__(base_url.rstrip("/") + "/v1/messages", api_key, model, max_tokens, transport, policy)
        self.anthropic_version = anthropic_version

    @classmethod
    def from_settings(cls, settings: Settings, policy: RetryPolicy, seams: Seams) -> AnthropicClient:
        return cls(
            api_key=key_provider(
                settings.anthropic_api_key,
                settings.anthropic_api_key_secret_arn,
                seams.secrets_client,
                settings.api_key_cache_seconds,
            ),
            model=settings.model_id,
            max_tokens=settings.max_tokens,
            base_url=settings.anthropic_base_url,
            anthropic_version=settings.anthropic_version,
            transport=seams.transport,
            policy=policy,
        )

    def _request(
        self, system: str, messages: list[Message], tools: list[dict[str, Any]], tool_choice: dict[str, Any] | None
    ) -> Attempt:
        key = self._key()
        if not key:
            raise ModelRefused("model API key not configured")
        content = encode_body(build_body(self.model, self.max_tokens, system, messages, tools, tool_choice))
        headers = {"x-api-key": key, "anthropic-version": self.anthropic_version, "content-type": "application/json"}
        return lambda deadline: self._post(content, headers, key, deadline)

    def _parse(self, data: Any) -> LlmResponse:
        return parse_response(data)

    def _failure(self, r: httpx.Response, key: str) -> Exception:
        err_type, err_message = _error_of(r)
        reason = f"HTTP {r.status_code} {error_type(err_type)}".rstrip()
        if 400 <= r.status_code < 500 and (
            err_type == "billing_error" or (err_type != "" and SPEND_LIMIT.search(err_message))
        ):
            return ModelUnavailable(f"model API spend limit reached ({reason})", retry_after=SPEND_LIMIT_RETRY_AFTER)
        if r.status_code in RETRYABLE_STATUS or r.status_code >= 500:
            return Retryable(reason, retry_after_header(r.headers))
        return refused(reason, err_message, key)


def _error_of(r: httpx.Response) -> tuple[str, str]:
    """(error type, message) from an Anthropic error body; empty strings if it is not one."""
    try:
        err = r.json().get("error")
    except (ValueError, AttributeError):
        return "", ""
    if not isinstance(err, dict):
        return "", ""
    return str(err.get("type") or ""), str(err.get("message") or "")
