"""The Stripe API key: ``STRIPE_API_KEY`` as is, or the secret ``STRIPE_API_KEY_SECRET_ARN`` read on first use.

The secret is read as every secret is (`secrets.py`: Powertools' cache, re-read after
``API_KEY_CACHE_SECONDS`` so a rotated key needs no deploy), as a plain string or JSON
``{"api_key": "sk_..."}``; a failed read is `ProviderUnavailable`, so nothing was sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from support_agent.config import Settings
from support_agent.errors import ModelUnavailable
from support_agent.refunds.provider.port import ProviderUnavailable


def stripe_key(settings: Settings, secrets_client: Any = None) -> str | Callable[[], str]:
    if settings.stripe_api_key or not settings.stripe_api_key_secret_arn:
        return settings.stripe_api_key
    from support_agent.secrets import key_provider  # only deployments keeping the key in Secrets Manager

    read = key_provider(
        "",
        settings.stripe_api_key_secret_arn,
        secrets_client,
        settings.api_key_cache_seconds,
        what="Stripe API key",
    )

    def provide() -> str:
        try:
            return read()
        except ModelUnavailable as exc:  # secrets.py's error: here it is the payment provider's
            raise ProviderUnavailable(exc.message) from None

    return provide
