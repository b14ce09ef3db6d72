"""A secret the service reads: from the environment as is, or from Secrets Manager, read on first use and cached.

One reader for every secret we hold: the model API keys (llm/anthropic.py, llm/openai.py), the Stripe API key
(refunds/provider/stripe_key.py), Stripe's webhook signing secrets and an outside MCP server's credential
(wiring.py). Fetched on the first call that needs it rather than at import, so cold starts and tests that
never call out need no AWS access; a missing secret only fails the call that needs it (`ModelUnavailable`,
which each caller reads as its own: the model's 502 ``model_error``, the payment provider's unavailability).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from support_agent.errors import ModelUnavailable

# A failed read is transient: the caller may try again after this many seconds (as a model call's, llm/retry.py).
RETRY_AFTER = 5
_SECRET_KEYS = (
    "ANTHROPIC_API_KEY",
    "anthropic_api_key",
    "OPENAI_API_KEY",
    "openai_api_key",
    "STRIPE_API_KEY",
    "stripe_api_key",
    "api_key",
    "apiKey",
    "token",  # an outside MCP server's service credential (mcp/outside.py)
)


def key_provider(
    key: str, arn: str, secrets_client: Any = None, max_age: int = 300, *, what: str = "model API key"
) -> Callable[[], str]:
    """A key from the environment as is; from Secrets Manager through Powertools parameters.

    The provider (and its cache) lives as long as the client, i.e. across warm invocations; after
    `max_age` seconds the next call reads the secret again, so a rotated key is picked up without a
    deploy (docs/OPERATIONS.md). One read at a time; a failed read is not cached. ``what`` names the
    secret in the error of a failed read.
    """
    if key or not arn:
        return lambda: key
    lock = threading.Lock()
    providers: list[Any] = []

    def provide() -> str:
        with lock:
            return _fetch_secret(arn, secrets_client, providers, max_age, what)

    return provide


def _fetch_secret(arn: str, client: Any, providers: list[Any], max_age: int, what: str) -> str:
    """The key from a plain-string secret or a JSON object holding it."""
    try:
        if not providers:
            # Lazy: only deployments that keep the key in Secrets Manager import boto3 and Powertools parameters.
            from aws_lambda_powertools.utilities.parameters import SecretsProvider

            # ``client`` may be a factory (wiring's cache, so the client is built only now) or a client itself.
            boto3_client = client() if callable(client) else client
            providers.append(
                SecretsProvider(boto3_client=boto3_client) if boto3_client is not None else SecretsProvider()
            )
        value = str(providers[0].get(arn, max_age=max_age) or "")
    except Exception as exc:  # any AWS or network fault: transient from the caller's point of view
        raise ModelUnavailable(
            f"could not read the {what} secret ({type(exc).__name__})", retry_after=RETRY_AFTER
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
