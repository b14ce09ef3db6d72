"""Real Stripe, in test mode, through our adapter (opt-in: needs a test-mode STRIPE_API_KEY, ``sk_test_…``).

Run with `pytest -m live tests/live`. The `stripe` SDK makes a test-mode payment (a PaymentIntent confirmed
with ``pm_card_visa``); `StripeProvider` then refunds part of it twice with the same attempt key, and Stripe
must hold one refund, which `find` finds by its refund key. Proves against the real service what the unit
tests check against the simulated Stripe: our request is accepted, its idempotency holds, the list matches.
A live-mode key is refused: this test moves money.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from support_agent.refunds.keys import attempt_key
from support_agent.refunds.provider.port import RefundAttempt
from support_agent.refunds.provider.stripe import StripeProvider

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not os.environ.get("STRIPE_API_KEY"), reason="STRIPE_API_KEY is not set"),
]

API_BASE = os.environ.get("STRIPE_API_BASE") or "https://api.stripe.com"
PAID, REFUNDED = 2500, 700


@pytest.fixture(scope="module")
def test_key() -> str:
    key = os.environ["STRIPE_API_KEY"].strip()
    if not key.startswith("sk_test_"):
        pytest.fail("STRIPE_API_KEY is not a test-mode secret key (sk_test_…): refusing to move real money")
    return key


@pytest.fixture(scope="module")
def payment_intent(test_key: str) -> str:
    """A succeeded test-mode payment of PAID cents, made with the `stripe` SDK (not our code)."""
    import stripe

    client = stripe.StripeClient(test_key, base_addresses={"api": API_BASE}, max_network_retries=2)
    intent = client.v1.payment_intents.create(
        {
            "amount": PAID,
            "currency": "usd",
            "payment_method": "pm_card_visa",
            "confirm": True,
            "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
            "description": "support-agent live test (tests/live/test_live_stripe.py)",
        }
    )
    assert intent.status == "succeeded", intent.status
    return intent.id


@pytest.fixture
def provider(test_key: str) -> Iterator[StripeProvider]:
    adapter = StripeProvider(test_key, base_url=API_BASE)
    try:
        yield adapter
    finally:
        adapter.close()


def test_a_partial_refund_twice_with_one_attempt_key_is_one_refund_that_find_finds(
    provider: StripeProvider, payment_intent: str, test_key: str
) -> None:
    import stripe

    refund_key = f"live-test:{uuid.uuid4().hex}"
    key = attempt_key(refund_key, 1)
    metadata = {"conversation_id": "live-test"}
    first = provider.refund(RefundAttempt(key, payment_intent, REFUNDED, "USD", metadata))
    second = provider.refund(
        RefundAttempt(key, payment_intent, REFUNDED, "USD", metadata)
    )  # Stripe replays the first answer

    assert first.id == second.id and first.id.startswith("re_")
    assert (first.amount, first.currency, first.payment_intent) == (REFUNDED, "usd", payment_intent)
    assert first.status in ("succeeded", "pending")
    assert first.metadata["refund_key"] == refund_key and first.metadata["attempt"] == "1"

    found = provider.find(refund_key, payment_intent)
    assert found is not None and found.id == first.id
    assert provider.find(f"live-test:{uuid.uuid4().hex}", payment_intent) is None
    assert provider.retrieve(first.id).id == first.id

    # Stripe itself, read with its own SDK: one refund on the payment, of the partial amount.
    client = stripe.StripeClient(test_key, base_addresses={"api": API_BASE})
    listed = client.v1.refunds.list({"payment_intent": payment_intent, "limit": 100})
    assert [(r.id, r.amount) for r in listed.data] == [(first.id, REFUNDED)]
