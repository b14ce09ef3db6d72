"""Money decisions announced in the conversation's feed, on the deployed template, through the functions' handlers.

The lead API (ApprovalsFunction: reject, release; approve starts RefundFlow, whose PaymentsFunction records
REFUNDED or FAILED), ApprovalSweepFunction (expiry) and PaymentsWebhookFunction (Stripe's events, signed, through
the route) each run with the environment the template gives them, so what the feed holds is what their wiring
writes: one notification per decision (``approval.decided`` or ``refund.settled``, no turn), numbered in order;
nothing for a decision repeated, replayed or redelivered; nothing for a direct refund the chat's own tool call
settled (its tool result says so).
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from support_agent.approvals.notifier import iso
from support_agent.store.approvals import ApprovalStore
from support_agent.store.notifications import NotificationStore
from tests.integration.conftest import Api
from tests.integration.test_lead_api import break_reservation, put_order, raise_approval, wait_status
from tests.integration.test_webhooks import World, _kept, _outcome
from tests.support.approvals import put_pending_approval

CUSTOMER = 8
_orders = itertools.count(88_001)

Feed = list[tuple[int, str, dict[str, Any], str | None]]


def feed(api: Api, conversation_id: str) -> Feed:
    notes = NotificationStore(boto3.client("dynamodb"), api.stack.function_env("ChatFunction")["CONVERSATIONS_TABLE"])
    return [(n.n, n.type, n.data, n.turn_id) for n in notes.since(conversation_id, 0)]


def decided(approval_id: str, order_id: int, amount: int, status: str) -> dict[str, Any]:
    return {"approvalId": approval_id, "orderId": order_id, "amountCents": amount, "status": status}


def lead(api: Api, approval_id: str, action: str) -> tuple[int, Any]:
    status, body, _ = api.call("POST", f"/api/approvals/{approval_id}/{action}", {}, token=api.lead())
    return status, body


def approval_for(api: Api, amount: int) -> tuple[str, str, int]:
    """A PENDING approval raised through the chat (its conversation's), on a fresh order of its own."""
    order_id = next(_orders)
    put_order(api, CUSTOMER, order_id, amount)
    approval_id, conversation_id = raise_approval(api, order_id, amount, customer=CUSTOMER)
    return approval_id, conversation_id, order_id


# ------------------------------------------------------------------ the lead's decisions


def test_a_rejection_is_announced_once(api: Api) -> None:
    approval_id, cid, order_id = approval_for(api, 7_400)
    assert feed(api, cid) == []  # raising it is the turn's own news
    assert lead(api, approval_id, "reject")[0] == 200
    assert feed(api, cid) == [(1, "approval.decided", decided(approval_id, order_id, 7_400, "REJECTED"), None)]
    assert lead(api, approval_id, "reject")[0] == lead(api, approval_id, "reject")[0] == 200  # idempotent repeats
    assert lead(api, approval_id, "approve")[0] == 409
    assert len(feed(api, cid)) == 1


def test_an_approval_refunded_by_refund_flow_is_announced_once(api: Api) -> None:
    approval_id, cid, order_id = approval_for(api, 9_100)
    assert lead(api, approval_id, "approve")[0] in (200, 202)
    assert wait_status(api, approval_id, "REFUNDED")["status"] == "REFUNDED"
    assert feed(api, cid) == [(1, "approval.decided", decided(approval_id, order_id, 9_100, "REFUNDED"), None)]
    # Approved again: the current state answered, no execution, nothing announced.
    assert lead(api, approval_id, "approve")[0] == 200
    assert len(feed(api, cid)) == 1


def test_a_failed_refund_then_its_release_are_announced_in_order(api: Api) -> None:
    """RefundFlow fails it (the order lost its reservation), the lead releases it once it holds again."""
    approval_id, cid, order_id = approval_for(api, 6_300)
    break_reservation(api, CUSTOMER, order_id, 6_300)
    lead(api, approval_id, "approve")
    assert wait_status(api, approval_id, "FAILED", 20)["status"] == "FAILED"
    boto3.client("dynamodb").update_item(
        TableName=api.stack.function_env("ChatFunction")["CUSTOMER_DATA_TABLE"],
        Key={"customer_id": {"N": str(CUSTOMER)}, "sk": {"S": f"ORDER#{order_id}"}},
        UpdateExpression="SET reserved_cents = :r, available_cents = :z",
        ExpressionAttributeValues={":z": {"N": "0"}, ":r": {"N": "6300"}},
    )
    assert lead(api, approval_id, "release")[0] == 200
    assert lead(api, approval_id, "release")[0] == 200  # an idempotent repeat
    assert feed(api, cid) == [
        (1, "approval.decided", decided(approval_id, order_id, 6_300, "FAILED"), None),
        (2, "approval.decided", decided(approval_id, order_id, 6_300, "RELEASED"), None),
    ]


# ------------------------------------------------------------------ the approval sweep


def test_the_sweep_announces_an_expiry_once_however_often_it_runs(api: Api) -> None:
    env = api.stack.function_env("ApprovalsFunction")
    old = iso(datetime.now(UTC) - timedelta(hours=int(env["APPROVAL_TTL_HOURS"]) + 1))
    order_id = next(_orders)
    approval_id = put_pending_approval(boto3.client("dynamodb"), env, CUSTOMER, order_id, 5_500, old, "late")
    approval = ApprovalStore(boto3.client("dynamodb"), env["APPROVALS_TABLE"]).get(approval_id)
    assert approval is not None and approval.conversation_id is not None
    cid = approval.conversation_id
    api.use_function("ApprovalSweepFunction")
    for run in range(2):
        out = api.handlers["ApprovalSweepFunction"]({"id": f"ev-{run}", "source": "aws.events"}, None)
        assert out["errors"] == 0, out
    assert wait_status(api, approval_id, "EXPIRED")["status"] == "EXPIRED"
    assert feed(api, cid) == [(1, "approval.decided", decided(approval_id, order_id, 5_500, "EXPIRED"), None)]


# ------------------------------------------------------------------ Stripe's webhooks


@pytest.fixture
def world(api: Api) -> World:
    return World(api)


def test_a_direct_refund_settled_by_its_webhook_is_announced_once(world: World) -> None:
    row = world.direct(pending=True)  # the chat's call: the provider said pending, the tool said so
    assert world.deliver() == ["unchanged", "duplicate"]
    assert feed(world.api, row.conversation_id) == []  # still in progress: nothing settled
    world.sender.deliver = False
    world.stripe.settle(row.refund_id, "succeeded")
    events = _kept(world)
    assert [_outcome(world, e) for e in events] == ["applied", "unchanged"]
    data = {"orderId": row.order_id, "amountCents": row.amount_cents, "status": "REFUNDED"}
    assert feed(world.api, row.conversation_id) == [(1, "refund.settled", data, None)]
    # Stripe delivers both again: nothing applied, nothing announced twice.
    assert set(_outcome(world, e) for e in events) <= {"duplicate", "unchanged"}
    assert len(feed(world.api, row.conversation_id)) == 1


def test_a_direct_refund_the_chats_call_settled_is_not_announced(world: World) -> None:
    row = world.direct()  # succeeded within the tool call: the tool's result (the turn's event) says it
    assert set(world.deliver()) <= {"unchanged", "duplicate"}
    assert feed(world.api, row.conversation_id) == []


def test_a_late_failure_is_announced_for_both_kinds(world: World) -> None:
    direct, approved = world.direct(), world.approved()
    world.deliver()
    assert feed(world.api, direct.conversation_id) == []
    assert [t for _, t, _, _ in feed(world.api, approved.conversation_id)] == ["approval.decided"]  # REFUNDED
    world.sender.deliver = False
    for row in (direct, approved):  # one at a time: the ledger is compared with Stripe after each delivery
        world.stripe.fail_late(row.refund_id, "lost_or_stolen_card")
        events = _kept(world)
        outcomes = [_outcome(world, e) for e in events + events]  # each delivered twice
        assert outcomes.count("applied") == 1, outcomes
    money = {"orderId": direct.order_id, "amountCents": direct.amount_cents, "status": "FAILED"}
    assert feed(world.api, direct.conversation_id) == [(1, "refund.settled", money, None)]
    refunded, failed = feed(world.api, approved.conversation_id)
    assert (refunded[2]["status"], failed[:2], failed[2]) == (
        "REFUNDED",
        (2, "approval.decided"),
        decided(approved.approval_id, approved.order_id, approved.amount_cents, "FAILED"),
    )


def test_a_pending_approved_refund_that_fails_is_announced_once(world: World) -> None:
    row = world.approved(pending=True)
    world.deliver()
    assert feed(world.api, row.conversation_id) == []  # SETTLING: no decision yet
    world.stripe.settle(row.refund_id, "failed")
    assert world.deliver() == ["applied", "unchanged", "unchanged"]
    assert feed(world.api, row.conversation_id) == [
        (1, "approval.decided", decided(row.approval_id, row.order_id, row.amount_cents, "FAILED"), None)
    ]
