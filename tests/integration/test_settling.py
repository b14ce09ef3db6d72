"""SETTLING on the deployed template: the lead's decisions, filters and views, and what the customer reads.

An approval is put in SETTLING the way RefundFlow's refund step does it: approved by a lead, then
`RefundLedger.begin_approved` (APPROVED -> SETTLING with the REQUESTED ledger row, one transaction).
Outcomes are recorded with `RefundLedger.record`, as the settler does after a provider call, so these
tests need neither Step Functions nor a provider: they are about what the API does with the states.
"""

from __future__ import annotations

import itertools
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from devstack.seed import put_order
from support_agent import observability as obs
from support_agent.approvals.sweep import ApprovalSweeper, SweepResult
from support_agent.clock import iso, utc_now
from support_agent.ids import new_approval_id
from support_agent.refunds.keys import approved_refund_sk
from support_agent.refunds.ledger import RefundLedger
from support_agent.refunds.ledger_row import By, LedgerRow, Outcome
from support_agent.store.approvals import Approval, ApprovalStore
from support_agent.store.audit import AuditStore
from support_agent.store.dynamo import to_item
from tests.integration.conftest import Api
from tests.support.approvals import put_pending_approval
from tests.support.aws import serialised_moto
from tests.support.openapi import assert_documented
from tests.support.scripted import answer, tool_use, tools

LEAD_CUSTOMER = 74  # the lead tests' own customer: nothing else in this module touches its orders
_orders = itertools.count(74_001)


class Money:
    """The tables of the deployed stack, through the code's own stores."""

    def __init__(self, api: Api) -> None:
        self.env = api.stack.function_env("ApprovalsFunction")
        self.ddb = boto3.client("dynamodb")
        self.store = ApprovalStore(
            self.ddb, self.env["APPROVALS_TABLE"], self.env["CUSTOMER_DATA_TABLE"], self.env["AUDIT_TABLE"]
        )
        self.ledger = RefundLedger(
            self.ddb, self.env["CUSTOMER_DATA_TABLE"], self.env["APPROVALS_TABLE"], self.env["AUDIT_TABLE"]
        )

    @staticmethod
    def now() -> str:
        return utc_now()

    def pending(self, created_at: str | None = None) -> str:
        return put_pending_approval(
            self.ddb, self.env, LEAD_CUSTOMER, next(_orders), 18_900, created_at or self.now(), "arrived broken"
        )

    def approved(self, created_at: str | None = None, approved_at: str | None = None) -> str:
        approval_id = self.pending(created_at)
        self.store.approve(approval_id, "lead-1", approved_at or self.now())
        return approval_id

    def settling(self, provider: str = "stripe", created_at: str | None = None, approved_at: str | None = None) -> str:
        """A PENDING approval approved by lead-1, then moved to SETTLING by the refund step's first write."""
        approval_id = self.approved(created_at, approved_at)
        self.ledger.begin_approved(self.approval(approval_id), provider, approved_at or self.now(), "refund-flow")
        return approval_id

    def approval(self, approval_id: str) -> Approval:
        item = self.store.get(approval_id)
        assert item is not None
        return item

    def row(self, approval_id: str) -> LedgerRow:
        row = self.ledger.get(LEAD_CUSTOMER, approved_refund_sk(approval_id))
        assert row is not None
        return row

    def order(self, approval_id: str) -> tuple[int, int, int]:
        """(available, reserved, refunded) of the approval's order."""
        key = {"customer_id": LEAD_CUSTOMER, "sk": f"ORDER#{self.approval(approval_id).order_id}"}
        item = self.ddb.get_item(TableName=self.env["CUSTOMER_DATA_TABLE"], Key=to_item(key), ConsistentRead=True)
        return tuple(int(item["Item"][f"{k}_cents"]["N"]) for k in ("available", "reserved", "refunded"))  # type: ignore[return-value]

    def trail(self, approval_id: str) -> list[str]:
        """The approval's stream and the refund key's it names (the ledger's rows), oldest first."""
        streams = AuditStore(self.ddb, self.env["AUDIT_TABLE"]).streams_of(f"approval#{approval_id}")
        rows = sorted((r for rows in streams.values() for r in rows), key=lambda r: (r["created_at"], r["event_id"]))
        return [r["action"] for r in rows]

    def executions(self, approval_id: str) -> list[str]:
        listed = boto3.client("stepfunctions").list_executions(
            stateMachineArn=self.env["REFUND_FLOW_ARN"], maxResults=1000
        )["executions"]
        return [e["name"] for e in listed if e["name"].startswith(approval_id)]


@pytest.fixture
def money(api: Api) -> Money:
    return Money(api)


def decide(api: Api, approval_id: str, verb: str) -> tuple[int, Any]:
    path = f"/api/approvals/{approval_id}/{verb}"
    status, body, headers = api.call("POST", path, token=api.lead())
    assert_documented("POST", path, status, body, headers)
    return status, body


def stripe_refund(status: str, refund_id: str | None = None, failure: str | None = None) -> dict[str, Any]:
    """An approval's refund as the lead API shows it, made through Stripe (never failed late here)."""
    return {
        "provider": "stripe",
        "refundId": refund_id,
        "status": status,
        "failureReason": failure,
        "failedLateAt": None,
    }


# ------------------------------------------------------------------ decisions during SETTLING


def test_approving_again_while_settling_waits_then_answers_202_and_starts_nothing(api: Api, money: Money) -> None:
    api.overrides = {"APPROVAL_WAIT_SECONDS": "0.4"}
    approval_id = money.settling()
    before = (money.row(approval_id), money.trail(approval_id), money.order(approval_id))

    started = time.monotonic()
    status, body = decide(api, approval_id, "approve")
    waited = time.monotonic() - started

    assert (status, body["status"]) == (202, "SETTLING"), body
    assert waited >= 0.4, "it answers after waiting for the refund, as during APPROVED"
    assert body["refund"] == stripe_refund("REQUESTED")
    assert money.executions(approval_id) == []  # no RefundFlow execution was started
    assert (money.row(approval_id), money.trail(approval_id), money.order(approval_id)) == before
    assert before[0].attempt == 1 and before[1] == ["refund_requested", "approval_approved", "refund_started"]


def test_approving_while_settling_answers_200_when_the_refund_settles_during_the_wait(api: Api, money: Money) -> None:
    api.overrides = {"APPROVAL_WAIT_SECONDS": "10"}
    approval_id = money.settling()
    row = money.row(approval_id)

    def provider_answers() -> None:
        time.sleep(0.3)
        money.ledger.record(row, Outcome("SUCCEEDED", "re_settled_1", "succeeded"), money.now(), By("refund-flow"))

    answering = threading.Thread(target=provider_answers)
    with serialised_moto():
        answering.start()
        status, body = decide(api, approval_id, "approve")
        answering.join(10)

    assert (status, body["status"]) == (200, "REFUNDED"), body
    assert body["refund"] == stripe_refund("SUCCEEDED", "re_settled_1")
    assert money.executions(approval_id) == []
    assert money.order(approval_id) == (0, 0, 18_900)


PAST = {"retry": "retried", "release": "released", "reject": "rejected"}


@pytest.mark.parametrize("verb", sorted(PAST))
def test_a_settling_approval_cannot_be_retried_released_or_rejected(api: Api, money: Money, verb: str) -> None:
    approval_id = money.settling()
    before = (money.row(approval_id), money.trail(approval_id))

    status, body = decide(api, approval_id, verb)

    assert (status, body["error"]["code"]) == (409, "conflict"), body
    message = body["error"]["message"]
    assert "SETTLING" in message and "payment provider" in message, message
    assert f"cannot be {PAST[verb]}" in message, message
    assert money.approval(approval_id).status == "SETTLING"
    assert money.order(approval_id) == (0, 18_900, 0)  # still reserved: nothing was given back
    assert (money.row(approval_id), money.trail(approval_id)) == before
    assert money.executions(approval_id) == []


def test_the_retry_refusal_differs_from_a_plain_wrong_state(api: Api, money: Money) -> None:
    """A PENDING approval is refused for being not FAILED; only SETTLING gets the provider explanation."""
    approval_id = money.pending()
    status, body = decide(api, approval_id, "retry")
    assert (status, body["error"]["message"]) == (409, "approval is PENDING; only a FAILED refund can be retried")


# ------------------------------------------------------------------ lists and views


def test_the_status_filter_knows_settling(api: Api, money: Money) -> None:
    settling = money.settling()
    pending = money.pending()

    listed: dict[str, list[str]] = {}
    for status in ("SETTLING", "APPROVED", "PENDING"):
        path = f"/api/approvals?status={status}"
        code, body, _ = api.call("GET", path, token=api.lead())
        assert_documented("GET", path, code, body)
        assert code == 200 and {a["status"] for a in body["approvals"]} <= {status}, body
        listed[status] = [a["approvalId"] for a in body["approvals"]]
    assert settling in listed["SETTLING"] and settling not in listed["APPROVED"] + listed["PENDING"]
    assert pending in listed["PENDING"] and pending not in listed["SETTLING"]

    code, body, _ = api.call("GET", "/api/approvals?status=SETTLED", token=api.lead())
    assert (code, body["error"]["code"]) == (400, "bad_request")


def test_the_approval_view_carries_the_providers_refund(api: Api, money: Money) -> None:
    def view(approval_id: str) -> dict[str, Any]:
        path = f"/api/approvals/{approval_id}"
        code, body, _ = api.call("GET", path, token=api.lead())
        assert_documented("GET", path, code, body)
        assert code == 200, body
        return body

    pending = money.pending()
    assert view(pending)["refund"] is None  # RefundFlow has not started one

    approval_id = money.settling(provider="stripe")
    assert view(approval_id)["refund"] == stripe_refund("REQUESTED")

    row = money.ledger.record(
        money.row(approval_id), Outcome("SETTLING", "re_pending_1", "pending"), money.now(), By("refund-flow")
    )
    shown = view(approval_id)
    assert (shown["status"], shown["refund"]) == (
        "SETTLING",
        stripe_refund("SETTLING", "re_pending_1"),
    )

    money.ledger.record(row, Outcome("SUCCEEDED", "re_pending_1", "succeeded"), money.now(), By("refund-flow"))
    shown = view(approval_id)
    assert (shown["status"], shown["refund"]) == (
        "REFUNDED",
        stripe_refund("SUCCEEDED", "re_pending_1"),
    )
    _, listing, _ = api.call("GET", "/api/approvals?status=REFUNDED", token=api.lead())
    (listed,) = [a for a in listing["approvals"] if a["approvalId"] == approval_id]
    assert listed["refund"] == shown["refund"]


def test_a_refused_refund_shows_failed_with_no_refund_id(api: Api, money: Money) -> None:
    approval_id = money.settling(provider="stripe")
    money.ledger.record(
        money.row(approval_id),
        Outcome("FAILED", provider_status="refused", failure_code="charge_already_refunded"),
        money.now(),
        By("refund-flow"),
    )
    code, body, _ = api.call("GET", f"/api/approvals/{approval_id}", token=api.lead())
    assert (code, body["status"]) == (200, "FAILED")
    assert body["refund"] == stripe_refund("FAILED", failure="charge_already_refunded")
    assert money.order(approval_id) == (0, 18_900, 0)  # kept for the lead to retry or release


# ------------------------------------------------------------------ the customer's vocabulary


class Conversation:
    """Customer 7's conversation with refund rows of every kind written under it, as the code writes them."""

    CUSTOMER = 7

    def __init__(self, api: Api, money: Money) -> None:
        self.api, self.money = api, money
        api.model.script = [answer("Hello Dana")]
        status, body, _ = api.call("POST", "/api/chat", {"message": "hi"})
        assert status == 200, body
        self.id: str = body["conversationId"]
        self.seq = itertools.count(1)
        self.table = money.env["CUSTOMER_DATA_TABLE"]

    def _sk(self) -> str:
        return f"REFUND#{self.id}#{next(self.seq):03d}#toolu_{next(_orders)}"

    def approval_request(self, approval_status: str, refund_id: str | None = None) -> str:
        """The request row the refund tool writes (kind approval) and its approval, now in ``approval_status``."""
        approval_id = new_approval_id()
        order_id = next(_orders)
        common = {"customer_id": self.CUSTOMER, "order_id": order_id, "amount_cents": 9_000, "currency": "USD"}
        self.money.ddb.put_item(
            TableName=self.table,
            Item=to_item(
                {
                    **common,
                    "sk": self._sk(),
                    "kind": "approval",
                    "status": "PENDING_APPROVAL",
                    "approval_id": approval_id,
                    "conversation_id": self.id,
                    "result": "{}",
                }
            ),
        )
        approval = {
            **common,
            "approval_id": approval_id,
            "entity": "APPROVAL",
            "status": approval_status,
            "conversation_id": self.id,
            "created_at": self.money.now(),
        }
        if refund_id:
            approval.update(refund_provider="stripe", refund_id=refund_id, refund_status="SUCCEEDED")
        self.money.ddb.put_item(TableName=self.money.env["APPROVALS_TABLE"], Item=to_item(approval))
        return approval_id

    def direct(self, status: str, refund_id: str | None = None, *, ledger: bool = True) -> None:
        """A direct refund's row: a ledger row (kind direct, ledger status), or one from before the ledger."""
        item: dict[str, Any] = {
            "customer_id": self.CUSTOMER,
            "sk": self._sk(),
            "kind": "direct",
            "order_id": next(_orders),
            "amount_cents": 2_000,
            "currency": "USD",
            "status": status,
            "conversation_id": self.id,
        }
        if ledger:
            item.update(refund_key=f"{self.id}:1:toolu_x", attempt=1, provider="stripe", payment_intent="pi_x")
        if refund_id:
            item["refund_id"] = refund_id
        self.money.ddb.put_item(TableName=self.table, Item=to_item(item))

    def refunds(self) -> list[dict[str, Any]]:
        path = f"/api/conversations/{self.id}"
        status, view, _ = self.api.call("GET", path)
        assert_documented("GET", path, status, view)
        assert status == 200, view
        return list(view["refunds"])


def test_the_conversation_view_speaks_the_customers_vocabulary(api: Api, money: Money) -> None:
    conv = Conversation(api, money)
    expected: list[tuple[str | None, str | None, str]] = []  # (approvalId, refundId, status), in row order
    for approval_status, refund_id, word in [
        ("PENDING", None, "PENDING_APPROVAL"),
        ("APPROVED", None, "REFUND_IN_PROGRESS"),
        ("SETTLING", "re_apr_settling", "REFUND_IN_PROGRESS"),
        ("REFUNDED", "re_apr_done", "REFUNDED"),
        ("FAILED", None, "FAILED"),
        ("REJECTED", None, "REJECTED"),
        ("EXPIRED", None, "EXPIRED"),
        ("RELEASED", None, "RELEASED"),
    ]:
        expected.append((conv.approval_request(approval_status, refund_id), refund_id, word))
    for ledger_status, refund_id, word in [
        ("REQUESTED", None, "REFUND_IN_PROGRESS"),
        ("SETTLING", "re_direct_pending", "REFUND_IN_PROGRESS"),
        ("SUCCEEDED", "re_direct_ok", "REFUNDED"),
        ("FAILED", None, "FAILED"),
    ]:
        conv.direct(ledger_status, refund_id)
        expected.append((None, refund_id, word))
    conv.direct("REFUNDED", ledger=False)  # a ledger-only row written before refunds moved money
    expected.append((None, None, "REFUNDED"))

    got = [(r["approvalId"], r["refundId"], r["status"]) for r in conv.refunds()]

    assert got == expected


def test_a_direct_refund_through_the_chat_is_listed_with_its_refund_id(api: Api, money: Money) -> None:
    order_id = next(_orders)
    put_order(money.ddb, money.env["CUSTOMER_DATA_TABLE"], 7, order_id, 2_000, payment_intent=f"pi_demo_{order_id}")
    api.model.script = [
        tools(tool_use("request_refund", {"order_id": order_id, "amount_cents": 2_000, "reason": "late"})),
        answer("Refunded."),
    ]
    status, turn, _ = api.call("POST", "/api/chat", {"message": f"refund {order_id}"})
    assert status == 200, turn
    result = turn["trace"][0]["toolCalls"][0]["result"]
    assert result["status"] == "REFUNDED" and result["refund_id"], result

    path = f"/api/conversations/{turn['conversationId']}"
    _, view, _ = api.call("GET", path)
    assert view["refunds"] == [
        {
            "approvalId": None,
            "refundId": result["refund_id"],
            "orderId": order_id,
            "amountCents": 2_000,
            "currency": "USD",
            "status": "REFUNDED",
        }
    ]


# ------------------------------------------------------------------ the approval sweep leaves SETTLING alone


def test_the_approval_sweep_neither_restarts_nor_ages_a_settling_approval(api: Api, money: Money) -> None:
    """SETTLING belongs to the payment sweep: the approval sweep starts no flow for it, and the "APPROVED too
    long" alarm's metric does not count it (the flow did start; the provider has the refund)."""
    sweep_env = api.stack.function_env("ApprovalSweepFunction")
    table = sweep_env["APPROVALS_TABLE"]
    for page in money.ddb.get_paginator("scan").paginate(TableName=table, ProjectionExpression="approval_id"):
        for item in page["Items"]:  # the sweep reads the whole index: only this test's approvals
            money.ddb.delete_item(TableName=table, Key=item)
    now = datetime.now(UTC)
    settling = money.settling(created_at=iso(now - timedelta(hours=3)), approved_at=iso(now - timedelta(hours=2)))
    before = (money.row(settling), money.trail(settling))

    def sweep(sfn: Any) -> SweepResult:
        obs.metrics.clear_metrics()
        return ApprovalSweeper(
            money.store,
            money.ddb,
            boto3.client("sqs"),
            sweep_env["APPROVAL_QUEUE_URL"],
            168,
            300,
            clock=lambda: now,
            sfn=sfn,
            state_machine_arn=sweep_env["REFUND_FLOW_ARN"],
        ).run()

    try:
        result = sweep(boto3.client("stepfunctions"))
        assert (result.flows_started, result.errors) == (0, 0)
        assert obs.metrics.metric_set[obs.OLDEST_APPROVED_APPROVAL_AGE]["Value"] == [0]
        assert money.executions(settling) == []
        assert money.approval(settling).status == "SETTLING"
        assert (money.row(settling), money.trail(settling)) == before

        # An APPROVED one next to it is measured (without starting it: no Step Functions here); SETTLING still not.
        money.approved(created_at=iso(now - timedelta(hours=1)), approved_at=iso(now - timedelta(minutes=30)))
        sweep(None)
        assert obs.metrics.metric_set[obs.OLDEST_APPROVED_APPROVAL_AGE]["Value"] == [30 * 60]
    finally:
        obs.metrics.clear_metrics()
