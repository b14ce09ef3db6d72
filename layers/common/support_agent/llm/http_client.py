"""What the two HTTP adapters (Anthropic, OpenAI-compatible) share: one JSON POST per attempt.

An adapter names its URL and says how to read a 200 (`_parse`) and what any other status means
(`_failure`: `Retryable`, `ModelUnavailable` or `ModelRefused`); timeouts and transport faults are
handled here, the same for both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from support_agent.llm.base import LlmResponse
from support_agent.llm.retry import Retryable, RetryingClient, RetryPolicy
from support_agent.messages import Deadline
from support_agent.outbound import attempt_timeout, http_client


def http_timeout(policy: RetryPolicy, deadline: Deadline | None) -> httpx.Timeout:
    """Per attempt, so one attempt never outlives the turn."""
    return attempt_timeout(policy.connect_timeout, policy.read_timeout, deadline)


class HttpClient(RetryingClient):
    """`api_key` may be a callable, so a key kept in Secrets Manager is read on first use, not at import."""

    def __init__(
        self,
        url: str,
        api_key: str | Callable[[], str],
        model: str,
        max_tokens: int,
        transport: httpx.BaseTransport | None,
        policy: RetryPolicy | None,
    ) -> None:
        super().__init__(policy)
        self.url = url
        self.model = model
        self.max_tokens = max_tokens
        self._api_key = api_key
        self._http = http_client(url, transport)

    def _key(self) -> str:
        return self._api_key() if callable(self._api_key) else self._api_key

    def close(self) -> None:
        self._http.close()

    def _post(self, content: bytes, headers: dict[str, str], key: str, deadline: Deadline | None) -> LlmResponse:
        """One attempt; `key` is only passed on so `_failure` can scrub it from what it logs."""
        try:
            r = self._http.post(self.url, content=content, headers=headers, timeout=http_timeout(self.policy, deadline))
        except httpx.TransportError as exc:
            raise Retryable(type(exc).__name__) from None
        if r.status_code != 200:
            raise self._failure(r, key)
        try:
            return self._parse(r.json())
        except ValueError as exc:  # in practice a proxy or gateway fault, not our request
            raise Retryable(f"malformed response: {exc}") from None

    def _parse(self, data: Any) -> LlmResponse:
        raise NotImplementedError

    def _failure(self, r: httpx.Response, key: str) -> Exception:
        raise NotImplementedError
