"""Issue 15's sweep "done when", through `make dev`'s stack: a refund whose webhook never comes is REFUNDED after
the payment sweep.

A direct refund of 2000 on order 1043 that the simulated Stripe leaves ``pending``, with webhook delivery off,
reads ``REFUND_IN_PROGRESS`` in the conversation view. Stripe then settles it ``succeeded`` and no event is
sent. Once the refund is older than ``PaymentSweepGraceSeconds`` (30 s under ``make dev``), the deployed
``PaymentSweepFunction`` runs, invoked here through the devstack's own function pool with the event its
schedule sends, so the test does not wait for the next 30 s tick. The view then reads ``REFUNDED`` with the
refund's id, the order's money has moved once, and Stripe holds exactly one refund.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import boto3
import httpx
import pytest
from boto3.dynamodb.conditions import Key

from devstack.events import scheduled_event
from devstack.functions import FunctionPool
from devstack.local import REGION, LocalStack
from support_agent.refunds.sweep import SWEEP_ACTOR
from tests.e2e.conftest import reset_to_seed
from tests.e2e.test_payments_local import Stack, tool_results

SWEEP = "PaymentSweepFunction"
ORDER, AMOUNT, INTENT = 1043, 2000, "pi_demo_1043"


@pytest.fixture
def stack(seeded_stack: LocalStack) -> Iterator[Stack]:
    """The seeded stack; afterwards back to the seed, the simulated Stripe's settings included (webhooks
    delivered again, new refunds ``succeeded``), whatever the test left behind."""
    try:
        with httpx.Client(base_url=seeded_stack.url, timeout=90) as http:
            yield Stack(seeded_stack, http)
    finally:
        reset_to_seed(seeded_stack)


def _scheduled_pool(local: LocalStack, function: str) -> FunctionPool:
    """The worker pool the stack's schedule invokes `function` through: the deployed function, with its
    deployed environment."""
    schedules = local.stack.sam_template["Resources"][function]["Properties"].get("Events", {})
    assert any(e.get("Type") == "Schedule" for e in schedules.values()), f"{function} has no Schedule event"
    return local.pools[function]


def _view(stack: Stack, conversation_id: str) -> list[dict[str, Any]]:
    resp = stack.http.get(f"/api/conversations/{conversation_id}", headers=stack.customer(7))
    assert resp.status_code == 200, resp.text
    return [r for r in resp.json()["refunds"] if r["orderId"] == ORDER]


def _audit(stack: Stack, conversation_id: str) -> list[dict[str, Any]]:
    """The conversation's audit rows and those of the refund streams they name (a direct refund's ledger
    changes are audited on its own stream, ``refund#<refund key>``)."""
    session = boto3.Session(region_name=REGION, aws_access_key_id="local", aws_secret_access_key="local")
    table = session.resource("dynamodb", endpoint_url=stack.local.moto_url).Table(
        stack.local.stack.physical_ids["AuditTable"]
    )

    def stream(name: str) -> list[dict[str, Any]]:
        return list(table.query(KeyConditionExpression=Key("stream").eq(name), ConsistentRead=True)["Items"])

    rows = stream(conversation_id)
    for key in sorted({str(r["refund_key"]) for r in rows if r.get("refund_key")}):
        rows += stream(f"refund#{key}")
    return rows


def test_a_pending_refund_whose_webhook_never_comes_is_refunded_by_the_payment_sweep(stack: Stack) -> None:
    grace = int(stack.local.stack.function_env(SWEEP)["PAYMENT_SWEEP_GRACE_SECONDS"])
    assert grace == 30, "make dev deploys a 30 s grace (devstack/parameters.py)"
    sweep = _scheduled_pool(stack.local, SWEEP)

    stack.stripe.webhooks.deliver = False  # events are made and kept, none sent: the sweep's path
    stack.stripe.new_refund_status = "pending"
    turn = stack.chat(7, "Please refund $20 on order 1043.")
    made_at = time.monotonic()
    (answer,) = tool_results(turn, "request_refund")
    assert answer["status"] == "REFUND_IN_PROGRESS", answer
    conversation = turn["conversationId"]
    (made,) = stack.stripe.refunds(INTENT)
    assert (made["amount"], made["status"]) == (AMOUNT, "pending")
    (refund,) = _view(stack, conversation)
    assert (refund["status"], refund["approvalId"], refund["amountCents"]) == ("REFUND_IN_PROGRESS", None, AMOUNT)
    assert stack.money(7, ORDER) == (500, AMOUNT, 0)

    stack.stripe.settle(made["id"], "succeeded")  # Stripe made it; its events stay undelivered
    assert stack.stripe.webhooks.deliveries == []
    settled_events = [e for e in stack.stripe.webhooks.undelivered if e["data"]["object"]["status"] == "succeeded"]
    assert sorted(e["type"] for e in settled_events) == ["charge.refund.updated", "refund.updated"]

    # Within the grace the sweep leaves the row alone: nothing moves without a webhook.
    early = sweep.invoke(scheduled_event(SWEEP, REGION))
    assert (early["settled"], early["errors"]) == (0, 0), early
    assert [r["status"] for r in _view(stack, conversation)] == ["REFUND_IN_PROGRESS"]
    assert stack.money(7, ORDER) == (500, AMOUNT, 0)

    time.sleep(max(0.0, made_at + grace + 1.5 - time.monotonic()))
    result = sweep.invoke(scheduled_event(SWEEP, REGION))  # the event EventBridge's schedule sends
    assert result["errors"] == 0, result
    # The schedule's own tick (every 30 s) may have settled it a moment before: either run is the sweep.
    swept = [
        a
        for a in _audit(stack, conversation)
        if a["action"] == "payment_refund" and a["actor"] == SWEEP_ACTOR and a["outcome"] == "SUCCEEDED"
    ]
    assert len(swept) == 1, swept
    assert result["settled"] == 1 or not result["scanned"] or result["conflicts"] == 1, result

    (refund,) = _view(stack, conversation)
    assert (refund["status"], refund["refundId"]) == ("REFUNDED", made["id"])
    assert stack.money(7, ORDER) == (500, 0, AMOUNT)
    (held,) = stack.stripe.refunds(INTENT)  # exactly one refund at Stripe: the sweep asked, it did not resend
    assert (held["id"], held["amount"], held["status"]) == (made["id"], AMOUNT, "succeeded")
    assert stack.stripe.webhooks.deliveries == []  # no webhook reached the stack at any point

    # Another run finds nothing left to do.
    again = sweep.invoke(scheduled_event(SWEEP, REGION))
    assert (again["scanned"], again["settled"], again["errors"], again["oldest_age_seconds"]) == (0, 0, 0, 0), again
