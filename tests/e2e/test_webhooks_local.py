"""Issue 15's webhook "done when", through `make dev`'s stack: the simulated Stripe's signed events over HTTP.

A direct refund the simulated Stripe leaves ``pending`` reads ``REFUND_IN_PROGRESS`` in the conversation view;
when Stripe settles it, its events reach ``POST /webhooks/stripe`` through the local gateway, and the view
reads ``REFUNDED``. The same events unsigned, stale or forged change nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devstack.local import LocalStack
from devstack.simulated_stripe import LOCAL_SECRET, SimulatedStripe
from tests.e2e.test_payments_local import Stack, tool_results


@pytest.fixture
def stack(seeded_stack: LocalStack) -> Iterator[Stack]:
    with httpx.Client(base_url=seeded_stack.url, timeout=90) as http:
        yield Stack(seeded_stack, http)


def _refunds(stack: Stack, conversation_id: str, order_id: int) -> list[str]:
    view = stack.http.get(f"/api/conversations/{conversation_id}", headers=stack.customer(7)).json()
    return [r["status"] for r in view["refunds"] if r["orderId"] == order_id]


def _settled(stripe: SimulatedStripe, timeout: float = 30.0) -> list[Any]:
    assert stripe.webhooks.wait(timeout), "webhooks still queued"
    return list(stripe.webhooks.deliveries)


def test_make_dev_gives_the_webhook_function_the_secret_the_simulated_stripe_signs_with(stack: Stack) -> None:
    assert stack.stripe.webhooks.configured and stack.stripe.webhooks.secret == LOCAL_SECRET
    assert stack.local.stack.function_env("PaymentsWebhookFunction")["STRIPE_WEBHOOK_SECRET_ARN"] == ""
    # Unsigned, straight to the gateway: refused in the error contract.
    resp = stack.http.post("/webhooks/stripe", content=b"{}", headers={"Content-Type": "application/json"})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "bad_request", resp.text


def test_a_pending_direct_refund_is_refunded_by_its_signed_webhook_and_not_by_forged_ones(stack: Stack) -> None:
    stack.stripe.new_refund_status = "pending"
    turn = stack.chat(7, "Please refund $20 on order 1043.")
    (answer,) = tool_results(turn, "request_refund")
    assert answer["status"] == "REFUND_IN_PROGRESS", answer
    (made,) = stack.stripe.refunds("pi_demo_1043")
    conversation = turn["conversationId"]
    _settled(stack.stripe)  # the creation's `pending`, delivered after the API answer: nothing to change
    assert _refunds(stack, conversation, 1043) == ["REFUND_IN_PROGRESS"]
    assert stack.money(7, 1043) == (500, 2000, 0)

    stack.stripe.webhooks.deliver = False  # keep the settlement's events, to send them badly first
    stack.stripe.settle(made["id"], "succeeded")
    events = list(stack.stripe.webhooks.undelivered)
    assert [e["type"] for e in events] == ["refund.updated", "charge.refund.updated"]
    for signing in ("unsigned", "stale", "forged"):
        stack.stripe.webhooks.signing = signing  # type: ignore[assignment]
        assert {stack.stripe.webhooks.send(e).status for e in events} == {400}, signing
        assert _refunds(stack, conversation, 1043) == ["REFUND_IN_PROGRESS"], signing
        assert stack.money(7, 1043) == (500, 2000, 0), signing

    stack.stripe.webhooks.signing = "valid"
    assert [stack.stripe.webhooks.send(e).status for e in events] == [200, 200]
    assert _refunds(stack, conversation, 1043) == ["REFUNDED"]
    assert stack.money(7, 1043) == (500, 0, 2000)


def test_the_simulated_stripe_delivers_on_its_own_duplicated_and_reordered(stack: Stack) -> None:
    """No test hand here: the sender's thread delivers each change's events, twice, newest first."""
    stack.stripe.new_refund_status = "pending"
    stack.stripe.webhooks.duplicate = stack.stripe.webhooks.reorder = True
    turn = stack.chat(7, "Please refund $20 on order 1043.")
    (made,) = stack.stripe.refunds("pi_demo_1043")
    stack.stripe.settle(made["id"], "succeeded")
    deadline = time.monotonic() + 30
    while _refunds(stack, turn["conversationId"], 1043) != ["REFUNDED"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _refunds(stack, turn["conversationId"], 1043) == ["REFUNDED"]
    delivered = _settled(stack.stripe)
    assert {d.status for d in delivered} == {200}
    settled = [d.event_type for d in delivered if d.refund_status == "succeeded"]
    assert settled == ["charge.refund.updated", "refund.updated"] * 2
    assert stack.money(7, 1043) == (500, 0, 2000)
