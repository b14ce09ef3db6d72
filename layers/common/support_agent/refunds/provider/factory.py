"""Build the configured `PaymentProvider` from `Settings` (``PAYMENT_PROVIDER``: ``none`` or ``stripe``).

`LazyProvider` is what the services hold: nothing is built (no HTTP client, no CA bundle, no secret
read) until the first refund call, so a cold start that refunds nothing pays nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from support_agent.config import Settings
from support_agent.messages import Deadline
from support_agent.refunds.provider.port import PaymentProvider, ProviderRefund, RefundAttempt

if TYPE_CHECKING:  # httpx itself only with the Stripe adapter: the lead API never loads it otherwise
    import httpx


def payment_provider_from_settings(
    settings: Settings, *, transport: httpx.BaseTransport | None = None, secrets_client: Any = None
) -> PaymentProvider:
    """`transport` (httpx) carries Stripe's calls in tests; `secrets_client` may be a client or a factory."""
    if settings.payment_provider == "stripe":
        from support_agent.refunds.provider.stripe import StripeProvider

        return StripeProvider.from_settings(settings, transport=transport, secrets_client=secrets_client)
    from support_agent.refunds.provider.none import LedgerOnly

    return LedgerOnly()


class LazyProvider:
    """A `PaymentProvider` built by ``build`` on its first call (once, also under concurrent first calls)."""

    def __init__(self, name: str, build: Callable[[], PaymentProvider]) -> None:
        self.name = name
        self._build = build
        self._lock = threading.Lock()
        self._provider: PaymentProvider | None = None

    @property
    def provider(self) -> PaymentProvider:
        with self._lock:
            if self._provider is None:
                self._provider = self._build()
            return self._provider

    def refund(self, attempt: RefundAttempt, *, deadline: Deadline | None = None) -> ProviderRefund:
        return self.provider.refund(attempt, deadline=deadline)

    def find(self, refund_key: str, payment_intent: str, *, deadline: Deadline | None = None) -> ProviderRefund | None:
        return self.provider.find(refund_key, payment_intent, deadline=deadline)

    def retrieve(self, refund_id: str, *, deadline: Deadline | None = None) -> ProviderRefund:
        return self.provider.retrieve(refund_id, deadline=deadline)

    def list_for_intent(self, payment_intent: str, *, deadline: Deadline | None = None) -> list[ProviderRefund]:
        return self.provider.list_for_intent(payment_intent, deadline=deadline)

    def list_created_since(self, created_gte: int, *, deadline: Deadline | None = None) -> list[ProviderRefund]:
        return self.provider.list_created_since(created_gte, deadline=deadline)


def lazy_provider(
    settings: Settings, *, transport: httpx.BaseTransport | None = None, secrets_client: Any = None
) -> LazyProvider:
    return LazyProvider(
        settings.payment_provider,
        lambda: payment_provider_from_settings(settings, transport=transport, secrets_client=secrets_client),
    )
