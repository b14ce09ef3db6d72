"""``PAYMENT_PROVIDER=stripe``: Stripe's REST API v1 over httpx (not the SDK: its import costs a cold start).

Requests, as the `stripe` SDK sends them (tests/unit/test_payments_stripe.py compares the two):
``POST /v1/refunds`` form-encoded, ``GET /v1/refunds/{id}``, ``GET /v1/refunds?payment_intent=…`` and
``GET /v1/refunds?created[gte]=…`` (reconciliation);
``Authorization: Bearer``, ``Idempotency-Key: <attempt key>`` on the POST, ``Stripe-Version`` pinned.
The form of one attempt is built from its arguments alone, fields sorted and the amount an int, and
the same bytes are resent on every retry: whoever sends an attempt (a turn, a repair, a replayed
execution) sends it byte for byte, or Stripe would answer ``idempotency_error``.

When an attempt is repeated (stripe_retry.py has the rules): Stripe saves the first response for an
idempotency key once the endpoint began executing (a 500 included) and replays it with
``Idempotent-Replayed: true``; 409 (the key in use by a request in flight) and 429 are not saved.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import httpx
from pydantic import BaseModel, ValidationError

from support_agent.config import Settings
from support_agent.messages import Deadline
from support_agent.outbound import http_client
from support_agent.refunds.provider.port import OutcomeUnknown, ProviderRefund, ProviderUnavailable, RefundAttempt
from support_agent.refunds.provider.stripe_retry import StripePolicy, call

log = logging.getLogger(__name__)

# The API version the `stripe` SDK (16.x) in the test extras pins (`stripe.api_version`); a test keeps them equal.
STRIPE_VERSION = "2026-10-28.endive"
PAGE_SIZE = 100
# 10,000 refunds of one payment intent: far beyond any real one; a misbehaving list stops here. Also the bound
# of one `list_created_since` (a reconciliation window of more than 10,000 refunds fails loudly, never silently).
MAX_PAGES = 100


class _Page(BaseModel):
    data: list[ProviderRefund]
    has_more: bool


def refund_form(payment_intent: str, amount: int, metadata: Mapping[str, str]) -> bytes:
    """The POST /v1/refunds body: deterministic (fields sorted, the amount an int), as Stripe's form encoding."""
    fields = [("amount", str(amount)), ("payment_intent", payment_intent)]
    fields += [(f"metadata[{k}]", v) for k, v in metadata.items()]
    return urlencode(sorted(fields)).encode()


class StripeProvider:
    name = "stripe"

    def __init__(
        self,
        api_key: str | Callable[[], str],
        *,
        base_url: str = "https://api.stripe.com",
        policy: StripePolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.policy = policy or StripePolicy()
        self._api_key = api_key
        self._http = http_client(self.base_url, transport)

    @classmethod
    def from_settings(
        cls, settings: Settings, *, transport: httpx.BaseTransport | None = None, secrets_client: Any = None
    ) -> StripeProvider:
        from support_agent.refunds.provider.stripe_key import stripe_key

        return cls(
            stripe_key(settings, secrets_client),
            base_url=settings.stripe_api_base,
            policy=StripePolicy.from_settings(settings),
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def refund(self, attempt: RefundAttempt, *, deadline: Deadline | None = None) -> ProviderRefund:
        """Stripe takes the currency from the payment intent (``currency`` is for customer-balance refunds
        only), so it is not sent; a refund in another currency than the ledger's is logged as an error."""
        if not attempt.payment_intent:
            raise ValueError("a Stripe refund names its payment intent")
        body = refund_form(attempt.payment_intent, attempt.amount, attempt.stored_metadata())
        headers = {
            **self._headers(),
            "Content-Type": "application/x-www-form-urlencoded",
            "Idempotency-Key": attempt.key,
        }
        request = self._http.build_request("POST", f"{self.base_url}/v1/refunds", content=body, headers=headers)
        data = call(self._http, request, self.policy, deadline, write=True)
        try:
            refund = ProviderRefund.model_validate(data)
        except ValidationError as exc:  # a 200 we cannot read: the refund was probably made
            raise OutcomeUnknown(f"unreadable refund in Stripe's answer: {exc.error_count()} errors") from None
        currency = attempt.currency.lower()
        if refund.currency != currency or refund.amount != attempt.amount:
            log.error(
                "Stripe refund %s is %d %s, the ledger asked for %d %s",
                refund.id,
                refund.amount,
                refund.currency,
                attempt.amount,
                currency,
            )
        return refund

    def find(self, refund_key: str, payment_intent: str, *, deadline: Deadline | None = None) -> ProviderRefund | None:
        """Every refund of the payment intent, newest first, a page of 100 at a time; the first live one
        whose ``metadata.refund_key`` matches. Two live ones would be a duplicate: logged, the newest returned."""
        found = [r for r in self.list_for_intent(payment_intent, deadline=deadline) if r.refund_key == refund_key]
        found = [r for r in found if r.alive]
        if len(found) > 1:
            log.error("duplicate refunds for refund key %s: %s", refund_key, [r.id for r in found])
        return found[0] if found else None

    def list_for_intent(self, payment_intent: str, *, deadline: Deadline | None = None) -> list[ProviderRefund]:
        """``GET /v1/refunds?payment_intent=…&limit=100``, every page (``starting_after``)."""
        return self._list({"payment_intent": payment_intent}, deadline, payment_intent)

    def list_created_since(self, created_gte: int, *, deadline: Deadline | None = None) -> list[ProviderRefund]:
        """``GET /v1/refunds?created[gte]=…&limit=100``, every page: refunds on any payment intent."""
        return self._list({"created[gte]": str(int(created_gte))}, deadline, f"created >= {created_gte}")

    def _list(self, filters: dict[str, str], deadline: Deadline | None, what: str) -> list[ProviderRefund]:
        params: dict[str, str] = {"limit": str(PAGE_SIZE), **filters}
        listed: list[ProviderRefund] = []
        for _ in range(MAX_PAGES):
            page = self._page(self._get("/v1/refunds", params, deadline))
            listed += page.data
            if not page.has_more:
                return listed
            if not page.data:
                raise ProviderUnavailable("Stripe listed an empty page with has_more")
            params["starting_after"] = page.data[-1].id
        raise ProviderUnavailable(f"more than {MAX_PAGES * PAGE_SIZE} refunds listed for {what}")

    def retrieve(self, refund_id: str, *, deadline: Deadline | None = None) -> ProviderRefund:
        data = self._get(f"/v1/refunds/{quote(refund_id, safe='')}", {}, deadline)
        try:
            return ProviderRefund.model_validate(data)
        except ValidationError as exc:
            raise ProviderUnavailable(f"unreadable refund from Stripe: {exc.error_count()} errors") from None

    def _get(self, path: str, params: dict[str, str], deadline: Deadline | None) -> Any:
        request = self._http.build_request("GET", self.base_url + path, params=params, headers=self._headers())
        return call(self._http, request, self.policy, deadline, write=False)

    @staticmethod
    def _page(data: Any) -> _Page:
        try:
            return _Page.model_validate(data)
        except ValidationError as exc:
            raise ProviderUnavailable(f"unreadable refund list from Stripe: {exc.error_count()} errors") from None

    def _headers(self) -> dict[str, str]:
        key = self._api_key() if callable(self._api_key) else self._api_key
        if not key:
            raise ProviderUnavailable("no Stripe API key configured (STRIPE_API_KEY or STRIPE_API_KEY_SECRET_ARN)")
        return {"Authorization": f"Bearer {key}", "Stripe-Version": STRIPE_VERSION}
