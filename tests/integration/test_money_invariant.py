"""Property: whatever sequence of requests, decisions and payment-provider outcomes happens, per order
``available + reserved + refunded = total``, none negative, one refund row per approval, and a
refund above the threshold never completes without a lead's approval.

The declared actions are rules too: ``cancel_order`` called with anything (proposed, or refused), the order's
status moved by the warehouse, proposals confirmed (on time or late), declined and confirmed again. An order is
CANCELLED only by a proposal its customer confirmed, each cancellation refunds at most once, and a cancel's refund
above the threshold waits for a lead like any other.

Runs on the deployed template with RefundFlow executing in moto (its refund step bridged to
PaymentsFunction's handler), ``PAYMENT_PROVIDER=stripe`` against the simulated Stripe in-process. Provider
faults (a 500 or a timeout after the refund was made, a dropped answer, a 429, a connection refused) and
refunds left ``pending`` are rules too; after every step the ledger is compared with the provider's
refunds (tests/support/stripe.py `ledger_problems`: no refund key with two live refunds, every SUCCEEDED
row has its succeeded refund of the same amount, ``refunded`` is what the provider refunded).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from devstack.seed import put_order
from devstack.simulated_stripe import TEST_KEY, Fault
from devstack.stack import Stack
from support_agent import wiring
from support_agent.approvals.flow import execution_name, flow_input
from support_agent.auth import Principal
from support_agent.config import load_settings
from support_agent.errors import ServiceError
from support_agent.refunds.ledger_row import UNSETTLED, LedgerRow
from support_agent.store.approvals import StateConflict
from support_agent.store.dynamo import from_item, to_item
from support_agent.tools.registry import ToolContext
from support_agent.wiring import build_actions, build_lead_services, build_registry, build_settler, build_tool_source
from tests.integration.conftest import deployed_stack
from tests.reliability.figures import count
from tests.support.stripe import BASE, POST, InProcessStripe, duplicates, ledger_problems, provider_for


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


ORDER_IDS = itertools.count(50_000)
TOTAL = 12_000
THRESHOLD = 5_000


# Faults a step may meet; each resolves within the call's retries or the flow's (a 500 saved before the
# refund, an unknown outcome until the payment sweep, is tests/reliability/test_payment_crashes.py's).
FAULTS = [Fault.ERROR_AFTER, Fault.TIMEOUT_AFTER, Fault.DROP_AFTER, Fault.RATE_LIMIT, Fault.ERROR_UNSAVED, "connect"]


@pytest.fixture(scope="module")
def stripe_stack() -> Iterator[tuple[Stack, InProcessStripe]]:
    """The template with PaymentProvider ``stripe``; every Stripe call (the chat's, PaymentsFunction's through
    the bridge) goes to one simulated Stripe in this process."""
    transport = InProcessStripe()
    with deployed_stack({"PaymentProvider": "stripe", "StripeApiBase": BASE}) as stack:
        os.environ.update(STRIPE_API_KEY=TEST_KEY, STRIPE_MAX_RETRIES="1")  # one quick retry, as Stripe's SDK
        wiring.reset(payments_transport=transport)
        yield stack, transport
    wiring.reset()


def make_machine(stack: Stack, transport: InProcessStripe, tool_mode: str = "registry") -> type[RuleBasedStateMachine]:
    env = {**stack.function_env("ChatFunction"), **stack.function_env("ApprovalsFunction")}
    cfg = load_settings({**env, "APPROVAL_WAIT_SECONDS": "8", "STRIPE_API_KEY": TEST_KEY, "TOOL_MODE": tool_mode})
    ddb, sqs = boto3.client("dynamodb"), boto3.client("sqs")
    payments = provider_for(transport)
    # The loop's tool source: the registry, or (TOOL_MODE=mcp) the same tools over MCP in process.
    registry = build_tool_source(cfg, build_registry(cfg, ddb, sqs, payments), ddb)
    settler = build_settler(cfg, ddb, payments)
    lead = build_lead_services(cfg, ddb)
    desk = build_actions(cfg, ddb, sqs, payments).proposals  # the customer's Confirm and Decline (the routes')
    table = cfg.customer_data_table
    sfn = boto3.client("stepfunctions")
    stripe = transport.stripe

    class Money(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.order_id = next(ORDER_IDS)
            # Every other example starts before shipment, where cancel_order may be proposed (the warehouse rule
            # moves either kind on).
            status = "PROCESSING" if self.order_id % 2 == 0 else "DELIVERED"
            put_order(ddb, table, 7, self.order_id, TOTAL, status=status, payment_intent=f"pi_prop_{self.order_id}")
            stripe.add_payment_intent(f"pi_prop_{self.order_id}", TOTAL, "usd")
            self.approvals: list[str] = []
            self.approved_by_lead: set[str] = set()
            self.calls = itertools.count(1)
            self.sent: list[tuple[ToolContext, dict[str, Any]]] = []
            self.proposals: list[str] = []

        def order(self) -> dict[str, int]:
            item = ddb.get_item(
                TableName=table, Key=to_item({"customer_id": 7, "sk": f"ORDER#{self.order_id}"}), ConsistentRead=True
            )["Item"]
            return {
                k: int(item[k]["N"]) for k in ("total_cents", "available_cents", "reserved_cents", "refunded_cents")
            }

        @rule(amount=st.integers(min_value=-100, max_value=TOTAL + 2000))
        def request(self, amount: int) -> None:
            n = next(self.calls)
            ctx = ToolContext(
                Principal("customer-7", "customer", 7),
                7,
                f"conv_prop{self.order_id}",
                n,
                f"toolu_{n}",
                "req",
                _now(),  # the real clock: approve refuses approvals older than their TTL
            )
            args = {"order_id": self.order_id, "amount_cents": amount, "reason": "property"}
            out = registry.execute("request_refund", args, ctx)
            self.sent.append((ctx, args))
            if not out.is_error and out.result["status"] == "PENDING_APPROVAL":
                self.approvals.append(out.result["approval_id"])

        @rule(data=st.data())
        def request_again(self, data: st.DataObject) -> None:
            """A call made again with its key (a retried turn): the same effect, never a second one."""
            if not self.sent:
                return
            ctx, args = data.draw(st.sampled_from(self.sent))
            before = len(self.rows())
            out = registry.execute("request_refund", args, ctx)
            if not out.is_error and out.result["status"] == "PENDING_APPROVAL":
                assert out.result["approval_id"] in self.approvals, "a repeated call made a second approval"
            assert len(self.rows()) == before, "a repeated call wrote another refund row"

        def _ctx(self) -> ToolContext:
            n = next(self.calls)
            return ToolContext(Principal("customer-7", "customer", 7), 7, self.cid, n, f"toolu_{n}", "req", _now())

        @property
        def cid(self) -> str:
            return f"conv_prop{self.order_id}"

        @rule(
            args=st.sampled_from(["own", "own", "own", None, {"order_id": 1045}, {"order_id": -1, "reason": "x"}]),
            confirm=st.booleans(),
        )
        def cancel(self, args: Any, confirm: bool) -> None:
            """The model asks to cancel (this order, another id, garbage): proposed or refused, nothing executed;
            ``confirm``: the customer presses Confirm at once."""
            before = self.order()
            raw = {"order_id": self.order_id, "reason": "property"} if args == "own" else args
            out = registry.execute("cancel_order", raw, self._ctx())
            if not out.is_error:
                assert out.result["status"] == "PROPOSED", out.result
                self.proposals.append(out.result["proposal_id"])
            assert self.order() == before, "a cancel_order call moved money without a confirmation"
            if confirm and not out.is_error:
                self._decide(out.result["proposal_id"], "confirm", _now())

        @rule(status=st.sampled_from(["PROCESSING", "SHIPPED", "DELIVERED"]))
        def warehouse(self, status: str) -> None:
            """The order's status moves on its own (shipped, delivered, or back to processing), never once cancelled."""
            with contextlib.suppress(ddb.exceptions.ConditionalCheckFailedException):
                ddb.update_item(
                    TableName=table,
                    Key=to_item({"customer_id": 7, "sk": f"ORDER#{self.order_id}"}),
                    UpdateExpression="SET #st = :s",
                    ConditionExpression="#st <> :cancelled",
                    ExpressionAttributeNames={"#st": "status"},
                    ExpressionAttributeValues={":s": {"S": status}, ":cancelled": {"S": "CANCELLED"}},
                )

        @rule(data=st.data(), late=st.booleans(), verb=st.sampled_from(["confirm", "confirm", "decline"]))
        def decide(self, data: st.DataObject, late: bool, verb: str) -> None:
            """The customer confirms (on time, or after the proposal expired) or declines a proposal, once or again."""
            if not self.proposals:
                return
            pid = data.draw(st.sampled_from(self.proposals))
            self._decide(pid, verb, "2099-01-01T00:00:00.000Z" if late else _now())

        def _decide(self, pid: str, verb: str, now: str) -> None:
            try:
                decided = getattr(desk, verb)(Principal("customer-7", "customer", 7), self.cid, pid, now)
            except ServiceError:
                return
            refund = (decided.outcome or {}).get("refund") or {}
            if refund.get("status") == "PENDING_APPROVAL" and refund["approval_id"] not in self.approvals:
                self.approvals.append(refund["approval_id"])

        def _pick(self, data: st.DataObject) -> str | None:
            return data.draw(st.sampled_from(self.approvals)) if self.approvals else None

        @rule(data=st.data())
        def approve(self, data: st.DataObject) -> None:
            if (aid := self._pick(data)) is None:
                return
            try:
                decision = lead.decisions.approve(aid, "lead-1")
            except ServiceError:
                return
            self.approved_by_lead.add(aid)
            assert decision.approval.status in ("APPROVED", "SETTLING", "REFUNDED", "FAILED")

        @rule(data=st.data())
        def reject(self, data: st.DataObject) -> None:
            if (aid := self._pick(data)) is not None:
                with contextlib.suppress(ServiceError):
                    lead.decisions.reject(aid, "lead-1", "no")

        @rule(data=st.data())
        def expire(self, data: st.DataObject) -> None:
            if (aid := self._pick(data)) is not None:
                with contextlib.suppress(StateConflict):
                    lead.approvals.release(aid, "PENDING", "EXPIRED", "system:sweep", "approval_expired", _now())

        @rule(data=st.data())
        def replay(self, data: st.DataObject) -> None:
            """Start RefundFlow again for any approval, as a redelivery or a confused operator would."""
            if (aid := self._pick(data)) is None:
                return
            arn = sfn.start_execution(
                stateMachineArn=cfg.refund_flow_arn,
                name=f"{execution_name(aid)}-x{next(self.calls)}",
                input=json.dumps(flow_input(aid)),
            )["executionArn"]
            until = time.monotonic() + 15
            while sfn.describe_execution(executionArn=arn)["status"] == "RUNNING" and time.monotonic() < until:
                time.sleep(0.05)

        @rule(data=st.data())
        def retry_or_release(self, data: st.DataObject) -> None:
            if (aid := self._pick(data)) is None:
                return
            action = data.draw(st.sampled_from(["retry", "release"]))
            with contextlib.suppress(ServiceError):
                getattr(lead.decisions, action)(aid, "lead-1")

        @rule(fault=st.sampled_from(FAULTS), times=st.integers(1, 2))
        def provider_fault(self, fault: str, times: int) -> None:
            """The next requests to create a refund meet a fault (the refund made or not, as the fault says)."""
            if fault == "connect":
                transport.refuse_connections(times)
            else:
                stripe.inject(POST, fault, times, hold_seconds=0.01)

        @rule(pending=st.booleans())
        def provider_pace(self, pending: bool) -> None:
            """New refunds are ``pending`` (SETTLING until the provider settles them) or succeed at once."""
            stripe.new_refund_status = "pending" if pending else "succeeded"

        @rule(pick=st.integers(0, 7))
        def provider_settles(self, pick: int) -> None:
            """The provider finishes a pending refund (its webhook is the next issue: the ledger stays SETTLING)."""
            waiting = [r["id"] for r in stripe.refunds(f"pi_prop_{self.order_id}") if r["status"] == "pending"]
            if waiting:
                stripe.settle(waiting[pick % len(waiting)], "succeeded")

        @rule()
        def ask_again(self) -> None:
            """What the payment sweep does: ask again, with its attempt key, for each unsettled row."""
            for item in self.rows():
                if "refund_key" not in item:
                    continue  # an approval's request row: its refund row is REFUND#<approval id>
                row = LedgerRow.from_item(from_item(item))
                if row.status in UNSETTLED:
                    settler.settle(row, actor="system:property")

        def rows(self) -> list[dict[str, Any]]:
            return ddb.query(
                TableName=table,
                KeyConditionExpression="customer_id = :c AND begins_with(sk, :p)",
                ExpressionAttributeValues={":c": {"N": "7"}, ":p": {"S": "REFUND#"}},
                ConsistentRead=True,
            )["Items"]

        @invariant()
        def ledger_equals_provider(self) -> None:
            rows = [from_item(item) for item in self.rows()]
            order = {**self.order(), "order_id": self.order_id, "payment_intent": f"pi_prop_{self.order_id}"}
            problems = ledger_problems(rows, [order], stripe)
            assert not problems, problems

        def teardown(self) -> None:
            status = ddb.get_item(TableName=table, Key=to_item({"customer_id": 7, "sk": f"ORDER#{self.order_id}"}))
            count("3-payments-property", proposals=len(self.proposals))
            count("3-payments-property", orders_cancelled=int(status["Item"]["status"]["S"] == "CANCELLED"))

        @invariant()
        def cancelled_only_when_confirmed(self) -> None:
            item = ddb.get_item(
                TableName=table, Key=to_item({"customer_id": 7, "sk": f"ORDER#{self.order_id}"}), ConsistentRead=True
            )["Item"]
            if item["status"]["S"] != "CANCELLED":
                assert "cancelled_by" not in item
                return
            pid = item["cancelled_by"]["S"]
            proposal = ddb.get_item(
                TableName=table,
                Key=to_item({"customer_id": 7, "sk": f"PROPOSAL#{self.cid}#{pid}"}),
                ConsistentRead=True,
            )["Item"]
            assert proposal["status"]["S"] in ("CONFIRMING", "CONFIRMED"), proposal
            assert proposal["decided_by"]["S"] == "customer-7", "cancelled without the customer's confirmation"
            # One cancellation only, and at most one refund (request row) per cancellation.
            cancels = [
                r
                for r in self.rows()
                if r.get("action", {}).get("S") == "cancel_order" and r["order_id"]["N"] == str(self.order_id)
            ]
            assert len(cancels) <= 1, cancels

        @invariant()
        def money_adds_up(self) -> None:
            o = self.order()
            assert o["available_cents"] + o["reserved_cents"] + o["refunded_cents"] == o["total_cents"], o
            assert min(o.values()) >= 0, o
            approved_refunds = 0
            for aid in self.approvals:
                rows = ddb.query(
                    TableName=table,
                    KeyConditionExpression="customer_id = :c AND sk = :s",
                    ExpressionAttributeValues={":c": {"N": "7"}, ":s": {"S": f"REFUND#{aid}"}},
                )
                assert rows["Count"] <= 1
                if rows["Count"]:
                    assert aid in self.approved_by_lead, "refund above the threshold completed without a lead"
                    if rows["Items"][0]["status"]["S"] == "SUCCEEDED":
                        approved_refunds += int(rows["Items"][0]["amount_cents"]["N"])
            direct = ddb.query(
                TableName=table,
                KeyConditionExpression="customer_id = :c AND begins_with(sk, :p)",
                ExpressionAttributeValues={":c": {"N": "7"}, ":p": {"S": f"REFUND#conv_prop{self.order_id}#"}},
            )
            direct_rows = [from_item(i) for i in direct["Items"] if i["kind"]["S"] == "direct"]
            assert sum(int(r["amount_cents"]) for r in direct_rows if r["status"] != "FAILED") <= THRESHOLD
            direct_sum = sum(int(r["amount_cents"]) for r in direct_rows if r["status"] == "SUCCEEDED")
            assert o["refunded_cents"] == approved_refunds + direct_sum

    return Money


def _run(stack: tuple[Stack, InProcessStripe], examples: int, steps: int, tool_mode: str = "registry") -> None:
    machine = make_machine(*stack, tool_mode)
    machine.TestCase.settings = settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, suppress_health_check=list(HealthCheck)
    )
    machine.TestCase().runTest()
    transport = stack[1]
    count(
        "3-payments-property",
        faults_injected=sum(1 for r in transport.stripe.requests if r.fault is not None) + transport.connect_errors,
        refunds_made=len(transport.stripe.refunds()),
        duplicates=len(duplicates(transport.stripe)),
    )


@pytest.mark.parametrize("tool_mode", ["registry", "mcp"])
def test_money_invariant_over_any_sequence(stripe_stack: tuple[Stack, InProcessStripe], tool_mode: str) -> None:
    _run(stripe_stack, examples=20, steps=10, tool_mode=tool_mode)


@pytest.mark.slow
def test_money_invariant_over_any_sequence_long(stripe_stack: tuple[Stack, InProcessStripe]) -> None:
    _run(stripe_stack, examples=int(os.environ.get("MONEY_PROPERTY_EXAMPLES", "200")), steps=12)
