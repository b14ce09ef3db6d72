"""Build the configured `LlmClient` from `Settings`.

The API key comes from `ANTHROPIC_API_KEY`, else from Secrets Manager (`ANTHROPIC_API_KEY_SECRET_ARN`),
fetched on the first model call rather than at import, so cold starts and tests that never call the
model need no AWS access. A missing key only fails the call that needs it (502 `model_error`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import httpx

from support_agent.config import Settings
from support_agent.errors import ModelUnavailable
from support_agent.llm.anthropic import DEFAULT_RETRY_AFTER, AnthropicClient
from support_agent.llm.base import LlmClient
from support_agent.llm.breaker import CircuitBreaker

_SECRET_KEYS = ("ANTHROPIC_API_KEY", "anthropic_api_key", "api_key", "apiKey")


def llm_client_from_settings(
    settings: Settings,
    *,
    breaker: CircuitBreaker | None = None,
    transport: httpx.BaseTransport | None = None,
    secrets_client: Any = None,
) -> LlmClient:
    """An `AnthropicClient` for `settings`; pass a shared `breaker` to keep its state across calls."""
    if breaker is None:
        breaker = CircuitBreaker(settings.breaker_failure_threshold, settings.breaker_cooldown_seconds)
    return AnthropicClient(
        api_key=api_key_provider(settings, secrets_client),
        model=settings.model_id,
        max_tokens=settings.max_tokens,
        base_url=settings.anthropic_base_url,
        anthropic_version=settings.anthropic_version,
        connect_timeout=settings.llm_connect_timeout,
        read_timeout=settings.llm_read_timeout,
        max_retries=settings.llm_max_retries,
        breaker=breaker,
        transport=transport,
    )


def api_key_provider(settings: Settings, secrets_client: Any = None) -> Callable[[], str]:
    """A callable returning the key ("" when none is configured), fetching a secret at most once."""
    if settings.anthropic_api_key or not settings.anthropic_api_key_secret_arn:
        key = settings.anthropic_api_key
        return lambda: key
    arn = settings.anthropic_api_key_secret_arn
    lock = threading.Lock()
    cached: list[str] = []

    def provide() -> str:
        with lock:
            if not cached:
                cached.append(_fetch_secret(arn, secrets_client))
            return cached[0]

    return provide


def _fetch_secret(arn: str, client: Any) -> str:
    """The key from a plain-string secret or a JSON object holding it; a failed fetch is not cached."""
    try:
        if client is None:
            import boto3  # lazy: only deployments that keep the key in Secrets Manager pay for it

            client = boto3.client("secretsmanager")
        value = str(client.get_secret_value(SecretId=arn).get("SecretString") or "")
    except Exception as exc:  # any AWS or network fault: transient from the caller's point of view
        raise ModelUnavailable(
            f"could not read the model API key secret ({type(exc).__name__})", retry_after=DEFAULT_RETRY_AFTER
        ) from None
    value = value.strip()
    if value.startswith("{"):
        try:
            data = json.loads(value)
        except ValueError:
            return value
        if isinstance(data, dict):
            return next((str(data[k]) for k in _SECRET_KEYS if data.get(k)), "")
    return value
