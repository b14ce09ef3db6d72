"""Build the configured `LlmClient` from `Settings`: `LLM_PROVIDER` = anthropic | openai | bedrock.

The API key of the HTTP providers comes from `ANTHROPIC_API_KEY` / `OPENAI_API_KEY`, else from
Secrets Manager (`ANTHROPIC_API_KEY_SECRET_ARN` / `OPENAI_API_KEY_SECRET_ARN`), fetched on the
first model call rather than at import, so cold starts and tests that never call the model need no
AWS access. A missing key only fails the call that needs it (502 `model_error`). Bedrock uses the
function's IAM role instead. The OpenAI and Bedrock adapters are imported only when chosen.
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

_SECRET_KEYS = ("ANTHROPIC_API_KEY", "anthropic_api_key", "OPENAI_API_KEY", "openai_api_key", "api_key", "apiKey")


def llm_client_from_settings(
    settings: Settings,
    *,
    breaker: CircuitBreaker | None = None,
    transport: httpx.BaseTransport | None = None,
    secrets_client: Any = None,
    bedrock_client: Any = None,
) -> LlmClient:
    """The client `settings.llm_provider` names; pass a shared `breaker` to keep its state across calls.

    `transport` (httpx) serves the HTTP providers, `bedrock_client` (a bedrock-runtime client) Bedrock.
    """
    if breaker is None:
        breaker = CircuitBreaker(settings.breaker_failure_threshold, settings.breaker_cooldown_seconds)
    if settings.llm_provider == "openai":
        from support_agent.llm.openai import OpenAIClient

        return OpenAIClient(
            api_key=_key_provider(
                settings.openai_api_key,
                settings.openai_api_key_secret_arn,
                secrets_client,
                settings.api_key_cache_seconds,
            ),
            model=settings.openai_model or settings.model_id,
            max_tokens=settings.max_tokens,
            base_url=settings.openai_base_url,
            max_tokens_param=settings.openai_max_tokens_param,
            connect_timeout=settings.llm_connect_timeout,
            read_timeout=settings.llm_read_timeout,
            max_retries=settings.llm_max_retries,
            breaker=breaker,
            transport=transport,
        )
    if settings.llm_provider == "bedrock":
        from support_agent.llm.bedrock import BedrockClient

        return BedrockClient(
            model_id=settings.bedrock_model_id,
            max_tokens=settings.max_tokens,
            region=settings.bedrock_region or None,
            client=bedrock_client,
            connect_timeout=settings.llm_connect_timeout,
            read_timeout=settings.llm_read_timeout,
            max_retries=settings.llm_max_retries,
            breaker=breaker,
        )
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
    """The Anthropic key as a callable ("" when none is configured), a secret cached for a while."""
    return _key_provider(
        settings.anthropic_api_key,
        settings.anthropic_api_key_secret_arn,
        secrets_client,
        settings.api_key_cache_seconds,
    )


def _key_provider(key: str, arn: str, secrets_client: Any = None, max_age: int = 300) -> Callable[[], str]:
    """A key from the environment as is; from Secrets Manager through Powertools parameters.

    The provider (and its cache) lives as long as the client, i.e. across warm invocations; after
    `max_age` seconds the next call reads the secret again, so a rotated key is picked up without a
    deploy (docs/OPERATIONS.md). One read at a time; a failed read is not cached.
    """
    if key or not arn:
        return lambda: key
    lock = threading.Lock()
    providers: list[Any] = []

    def provide() -> str:
        with lock:
            return _fetch_secret(arn, secrets_client, providers, max_age)

    return provide


def _fetch_secret(arn: str, client: Any, providers: list[Any], max_age: int) -> str:
    """The key from a plain-string secret or a JSON object holding it."""
    try:
        if not providers:
            # Lazy: only deployments that keep the key in Secrets Manager import boto3 and Powertools parameters.
            from aws_lambda_powertools.utilities.parameters import SecretsProvider

            providers.append(SecretsProvider(boto3_client=client) if client is not None else SecretsProvider())
        value = str(providers[0].get(arn, max_age=max_age) or "")
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
