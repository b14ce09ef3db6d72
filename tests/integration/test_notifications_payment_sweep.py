"""The payment sweep announces what it settles in the conversation's feed, once, run by its own handler.

template.yaml deployed with ``PaymentProvider=stripe`` and the simulated Stripe in-process, as in
test_payment_sweep.py (its stack, world and states are reused): PaymentSweepFunction's handler runs with its
deployed environment, so the feed holds what its wiring writes — ``refund.settled`` for a direct refund left in
progress, ``approval.decided`` for an approved one — and a second run, finding nothing unsettled, adds nothing.
"""

from __future__ import annotations

import os
from typing import Any

import boto3
import pytest

from devstack.simulated_stripe import TEST_KEY
from support_agent import wiring
from support_agent.refunds.ledger_row import LedgerRow
from support_agent.store.notifications import NotificationStore
from tests.integration.conftest import load_handler
from tests.integration.test_payment_sweep import PAST_GRACE, World, stripe_stack, world  # noqa: F401 (fixtures)


def run_function(w: World, times: int = 1) -> list[dict[str, Any]]:
    """PaymentSweepFunction's handler, ``times`` over, with its deployed environment (Stripe in-process)."""
    handler = load_handler(w.stack, "PaymentSweepFunction")
    saved = dict(os.environ)
    os.environ.update({**w.stack.function_env("PaymentSweepFunction"), "STRIPE_API_KEY": TEST_KEY})
    wiring.reset(payments_transport=w.transport)
    try:
        return [handler({"id": f"ev-note-{i}", "source": "aws.events"}, None) for i in range(times)]
    finally:
        os.environ.clear()
        os.environ.update(saved)
        wiring.reset(payments_transport=w.transport)


def feed(w: World, row: LedgerRow) -> list[tuple[int, str, dict[str, Any], str | None]]:
    notes = NotificationStore(
        boto3.client("dynamodb"), w.stack.function_env("PaymentSweepFunction")["CONVERSATIONS_TABLE"]
    )
    return [(n.n, n.type, n.data, n.turn_id) for n in notes.since(row.conversation_id, 0)]


def test_a_direct_refund_the_sweep_settles_is_announced_once(world: World) -> None:  # noqa: F811
    row = world.direct_requested(PAST_GRACE)  # the chat's process died before its provider call
    first, second = run_function(world, 2)
    assert (first["settled"], second["scanned"]) == (1, 0), (first, second)
    assert world.row(row).status == "SUCCEEDED"
    data = {"orderId": row.order_id, "amountCents": row.amount_cents, "status": "REFUNDED"}
    assert feed(world, row) == [(1, "refund.settled", data, None)]
    world.check(unknown_ok=False)


def test_a_direct_refund_the_provider_failed_is_announced_as_failed(world: World) -> None:  # noqa: F811
    row = world.first_call_meets(world.direct_requested(PAST_GRACE), status="pending")
    assert feed(world, row) == []  # the chat's own call: pending, its tool result says so
    world.stripe.settle(row.refund_id, "failed")
    (out,) = run_function(world)
    assert out["settled"] == 1, out
    data = {"orderId": row.order_id, "amountCents": row.amount_cents, "status": "FAILED"}
    assert feed(world, row) == [(1, "refund.settled", data, None)]
    world.check(unknown_ok=False)


@pytest.mark.parametrize(("outcome", "word"), [("succeeded", "REFUNDED"), ("failed", "FAILED")])
def test_an_approved_refund_the_sweep_settles_is_announced_as_decided(
    world: World,  # noqa: F811
    outcome: str,
    word: str,
) -> None:
    row = world.first_call_meets(world.approved_requested(PAST_GRACE), status="pending")
    assert world.approval(row).status == "SETTLING" and feed(world, row) == []
    world.stripe.settle(row.refund_id, outcome)
    first, second = run_function(world, 2)
    assert (first["settled"], second["settled"]) == (1, 0), (first, second)
    assert world.approval(row).status == word
    data = {"approvalId": row.approval_id, "orderId": row.order_id, "amountCents": row.amount_cents, "status": word}
    assert feed(world, row) == [(1, "approval.decided", data, None)]
    world.check(unknown_ok=False)
