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

`cache_control` breakpoints (last tool, the system block, the newest message's last block) are put
on copies per request; the caller's history is never changed, so they are never stored (rule 5).
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from typing import Any

import httpx

from support_agent.config import Settings
from support_agent.errors import ModelRefused, ModelUnavailable
from support_agent.llm.base import LlmResponse, Seams
from support_agent.llm.http import HttpClient
from support_agent.llm.keys import key_provider
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
from support_agent.messages import Message, Usage

log = logging.getLogger(__name__)

__all__ = ["AnthropicClient", "build_body", "encode_body", "parse_response"]

EPHEMERAL = {"type": "ephemeral"}
RETRYABLE_STATUS = frozenset({408, 429, 529})
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


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


# -- request and response, pure functions (tested directly) -----------------------------------


def build_body(
    model: str,
    max_tokens: int,
    system: str,
    messages: list[Message],
    tools: list[dict[str, Any]],
    tool_choice: dict[str, Any] | None,
) -> dict[str, Any]:
    """The request body, with cache breakpoints on copies; the arguments are left untouched.

    Any `cache_control` already on top-level blocks or tools is dropped from the copies so a request
    never exceeds the API's four breakpoints. `tool_choice` is only sent along with tools.

    Keys are in the prompt cache's order — tools, system, tool_choice (a change to it invalidates
    only the messages' cache), messages — so the bytes up to a request's last breakpoint are a
    prefix of the next request's (tests/unit/test_prompt_cache.py).
    """
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens}
    if tools:
        body["tools"] = [_without_cache(t) for t in tools]
        body["tools"][-1]["cache_control"] = dict(EPHEMERAL)
    body["system"] = [{"type": "text", "text": system, "cache_control": dict(EPHEMERAL)}]
    if tools and tool_choice is not None:
        body["tool_choice"] = copy.deepcopy(tool_choice)
    body["messages"] = [_copy_message(m) for m in messages]
    if body["messages"]:
        _mark_last_block(body["messages"][-1])
    return body


def encode_body(body: dict[str, Any]) -> bytes:
    """Deterministic bytes: same input, same request, so the cached prefix matches byte for byte."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _without_cache(block: dict[str, Any]) -> dict[str, Any]:
    """A new top-level dict without `cache_control`. Nested values are shared, not copied: nothing here
    changes them and the body is encoded at once, so a deep copy of the whole history per request
    would only cost time (docs/PERFORMANCE.md, loop overhead)."""
    return {k: v for k, v in block.items() if k != "cache_control"}


def _copy_message(message: Message) -> Message:
    out = {k: v for k, v in message.items() if k != "content"}
    content = message.get("content")
    if isinstance(content, list):
        out["content"] = [_without_cache(b) if isinstance(b, dict) else b for b in content]
    else:
        out["content"] = content
    return out


def _mark_last_block(message: Message) -> None:
    content = message.get("content")
    if isinstance(content, str):
        if content:
            message["content"] = [{"type": "text", "text": content, "cache_control": dict(EPHEMERAL)}]
        return
    if not isinstance(content, list):
        return
    for block in reversed(content):
        if not isinstance(block, dict) or block.get("type") in _UNMARKABLE:
            continue
        if block.get("type") == "text" and not block.get("text"):
            continue  # the API refuses cache_control on empty text
        block["cache_control"] = dict(EPHEMERAL)
        return


def parse_response(data: Any) -> LlmResponse:
    """An `LlmResponse` from a Messages API body; `ValueError` if it is not one."""
    if not isinstance(data, dict):
        raise ValueError("body is not an object")
    content, stop_reason = data.get("content"), data.get("stop_reason")
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise ValueError("no content list")
    if not isinstance(stop_reason, str):
        raise ValueError("no stop_reason")
    raw = data.get("usage")
    usage = raw if isinstance(raw, dict) else {}
    return LlmResponse(
        stop_reason=stop_reason,
        content=content,
        usage=Usage(
            input_tokens=_int(usage.get("input_tokens")),
            output_tokens=_int(usage.get("output_tokens")),
            cache_read_input_tokens=_int(usage.get("cache_read_input_tokens")),
            cache_creation_input_tokens=_int(usage.get("cache_creation_input_tokens")),
        ),
        model=str(data.get("model") or ""),
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _error_of(r: httpx.Response) -> tuple[str, str]:
    """(error type, message) from an Anthropic error body; empty strings if it is not one."""
    try:
        err = r.json().get("error")
    except (ValueError, AttributeError):
        return "", ""
    if not isinstance(err, dict):
        return "", ""
    return str(err.get("type") or ""), str(err.get("message") or "")
