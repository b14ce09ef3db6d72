"""Reconciliation on the deployed template: the ledger (moto, created by the code's own refund paths) against
the simulated Stripe in-process, with ``PAYMENT_PROVIDER=stripe``.

Refunds are made the way production makes them: direct ones through the refund tool, approved ones by a
lead's approval running RefundFlow (its refund step is PaymentsFunction's handler, bridged in-process). A
clean ledger reports nothing; each kind of difference, planted as it happens in life (a refund made in
Stripe's dashboard, a row edited by hand, a refund the provider lacks, a status that disagrees, two live
refunds for one key), is found exactly once with its kind; what lies outside the window is not read.
Each test starts from no ledger row and no provider refund.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from devstack.seed import put_order
from devstack.simulated_stripe import TEST_KEY
from devstack.stack import Stack
from support_agent import observability as obs
from support_agent import wiring
from support_agent.auth import Principal
from support_agent.clock import iso
from support_agent.config import load_settings
from support_agent.ids import new_conversation_id
from support_agent.refunds.keys import attempt_key
from support_agent.refunds.ledger import RefundLedger
from support_agent.refunds.ledger_row import LEDGER_INDEX, LEDGER_INDEX_KEY, LedgerRow
from support_agent.refunds.provider.port import RefundAttempt
from support_agent.refunds.reconcile import Difference, Reconciler, ReconcileReport
from support_agent.store.dynamo import from_item, to_item
from support_agent.tools.registry import ToolContext
from support_agent.wiring import build_lead_services, build_registry
from tests.integration.conftest import deployed_stack, load_handler
from tests.support.stripe import BASE, InProcessStripe, provider_for

ORDER_IDS = itertools.count(61_000)
CUSTOMER = 7
DAY = timedelta(days=1)


@pytest.fixture(scope="module")
def stripe_stack() -> Iterator[tuple[Stack, InProcessStripe]]:
    transport = InProcessStripe()
    with deployed_stack({"PaymentProvider": "stripe", "StripeApiBase": BASE}) as stack:
        os.environ.update(STRIPE_API_KEY=TEST_KEY, STRIPE_MAX_RETRIES="1")
        wiring.reset(payments_transport=transport)
        yield stack, transport
    wiring.reset()


@dataclass
class World:
    stack: Stack
    transport: InProcessStripe

    def __post_init__(self) -> None:
        env = {**self.stack.function_env("ChatFunction"), **self.stack.function_env("ApprovalsFunction")}
        self.cfg = load_settings({**env, "APPROVAL_WAIT_SECONDS": "8", "STRIPE_API_KEY": TEST_KEY})
        self.ddb = boto3.client("dynamodb")
        self.table = self.cfg.customer_data_table
        self.payments = provider_for(self.transport)
        self.registry = build_registry(self.cfg, self.ddb, boto3.client("sqs"), self.payments)
        self.lead = build_lead_services(self.cfg, self.ddb)
        self.ledger = RefundLedger(self.ddb, self.table, self.cfg.approvals_table, self.cfg.audit_table)
        self.calls = itertools.count(1)

    @property
    def stripe(self) -> Any:
        return self.transport.stripe

    def order(self, total: int = 12_000, paid: int | None = None) -> tuple[int, str]:
        """A delivered order of ``total`` paid by its own payment intent (of ``paid``, default the total)."""
        order_id = next(ORDER_IDS)
        intent = f"pi_rec_{order_id}"
        put_order(self.ddb, self.table, CUSTOMER, order_id, total, payment_intent=intent)
        self.stripe.add_payment_intent(intent, total if paid is None else paid, "usd")
        return order_id, intent

    def request(self, order_id: int, amount: int) -> dict[str, Any]:
        n = next(self.calls)
        ctx = ToolContext(
            Principal(f"customer-{CUSTOMER}", "customer", CUSTOMER),
            CUSTOMER,
            new_conversation_id(),  # a real id: a key of any other form is none of ours (refunds/keys.py)
            n,
            f"toolu_rec{n}",
            "req",
            iso(datetime.now(UTC)),
        )
        out = self.registry.execute(
            "request_refund", {"order_id": order_id, "amount_cents": amount, "reason": "reconcile"}, ctx
        )
        return dict(out.result) if isinstance(out.result, dict) else {"error": out.result}

    def direct(self, order_id: int, amount: int = 2_000) -> LedgerRow:
        """A direct refund through the refund tool (≤ the threshold): its ledger row."""
        self.request(order_id, amount)
        return self.rows()[-1]

    def approved(self, order_id: int, amount: int = 9_000) -> LedgerRow:
        """A refund above the threshold, approved by a lead: RefundFlow makes it."""
        result = self.request(order_id, amount)
        assert result["status"] == "PENDING_APPROVAL", result
        decision = self.lead.decisions.approve(result["approval_id"], "lead-1")
        assert decision.approval.status == "REFUNDED", decision.approval
        (row,) = [r for r in self.rows() if r.approval_id == result["approval_id"]]
        return row

    def rows(self) -> list[LedgerRow]:
        return self.ledger.created_since("2000-01-01T00:00:00.000Z")

    def edit(self, row: LedgerRow, **values: Any) -> None:
        """A ledger row changed by hand (what reconciliation exists to notice)."""
        names = {f"#{k}": k for k in values}
        self.ddb.update_item(
            TableName=self.table,
            Key=to_item({"customer_id": row.customer_id, "sk": row.sk}),
            UpdateExpression="SET " + ", ".join(f"#{k} = :{k}" for k in values),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=to_item({f":{k}": v for k, v in values.items()}),
        )

    def reconcile(self, at: datetime | None = None, window_days: int = 7) -> ReconcileReport:
        moment = at or datetime.now(UTC)
        reconciler = Reconciler(self.ledger, self.payments, window_days=window_days, clock=lambda: moment)
        return reconciler.run()

    def clear(self) -> None:
        """No ledger row, no provider refund: each test compares only what it made."""
        out = self.ddb.query(
            TableName=self.table,
            IndexName=LEDGER_INDEX,
            KeyConditionExpression="ledger = :l",
            ExpressionAttributeValues={":l": {"S": LEDGER_INDEX_KEY}},
        )
        for item in out["Items"]:
            self.ddb.delete_item(TableName=self.table, Key={"customer_id": item["customer_id"], "sk": item["sk"]})
        self.stripe.reset()


@pytest.fixture
def world(stripe_stack: tuple[Stack, InProcessStripe]) -> Iterator[World]:
    wiring.reset(payments_transport=stripe_stack[1])  # tests/conftest.py resets the wiring after each test
    w = World(*stripe_stack)
    w.clear()
    yield w
    w.clear()


def kinds(report: ReconcileReport) -> list[str]:
    return [d.kind for d in report.differences]


def only(report: ReconcileReport, kind: str) -> Difference:
    assert kinds(report) == [kind], [d.as_dict() for d in report.differences]
    return report.differences[0]


# ------------------------------------------------------------------ a clean ledger


def test_a_clean_ledger_after_direct_and_approved_refunds_has_no_difference(world: World) -> None:
    first, _ = world.order()
    second, _ = world.order()
    refused, _ = world.order(total=3_000, paid=1_000)  # Stripe refuses more than was paid: FAILED row
    succeeded = world.direct(first, 2_000)
    approved = world.approved(second, 9_000)
    world.stripe.new_refund_status = "pending"
    in_flight = world.direct(first, 1_500)  # SETTLING while the provider keeps it pending
    world.stripe.new_refund_status = "succeeded"
    failed = world.direct(refused, 2_000)
    assert [succeeded.status, approved.status, in_flight.status, failed.status] == [
        "SUCCEEDED",
        "SUCCEEDED",
        "SETTLING",
        "FAILED",
    ]
    rows_before = [r.extra for r in world.rows()]
    sent_before = len(world.stripe.requests)
    obs.metrics.clear_metrics()

    report = world.reconcile()

    assert report.differences == [], [d.as_dict() for d in report.differences]
    assert (report.provider, report.rows, report.provider_refunds) == ("stripe", 4, 3)
    assert report.counts == dict.fromkeys(report.counts, 0) and len(report.counts) == 5
    assert obs.metrics.metric_set[obs.RECONCILIATION_DIFFERENCES]["Value"] == [0]
    obs.metrics.clear_metrics()
    # It only reads: GETs at the provider, and no ledger row changed.
    assert {r.method for r in world.stripe.requests[sent_before:]} == {"GET"}
    assert [r.extra for r in world.rows()] == rows_before


def test_a_settling_row_whose_refund_the_provider_finished_is_in_flight_then_a_difference(world: World) -> None:
    order_id, _ = world.order()
    world.stripe.new_refund_status = "pending"
    row = world.direct(order_id, 2_000)
    assert row.status == "SETTLING"
    world.stripe.settle(row.refund_id, "succeeded")  # its webhook has not come yet, nor the sweep

    assert world.reconcile().differences == []  # just now: in flight
    later = world.reconcile(at=datetime.now(UTC) + timedelta(hours=2))
    difference = only(later, "status_mismatch")
    assert (difference.refund_key, difference.ledger_status, difference.provider_status) == (
        row.refund_key,
        "SETTLING",
        "succeeded",
    )


# ------------------------------------------------------------------ each kind, planted


def test_a_refund_made_in_the_dashboard_is_an_unknown_provider_refund(world: World) -> None:
    order_id, intent = world.order()
    world.direct(order_id, 2_000)
    made = world.stripe.refund_outside(intent, 700)

    difference = only(world.reconcile(), "unknown_provider_refund")
    assert difference.refund_ids == (made["id"],)
    assert (difference.refund_key, difference.payment_intent, difference.provider_amount) == ("", intent, 700)
    assert "no refund key" in difference.line()


def test_a_refund_on_an_intent_we_never_touched_is_found_too(world: World) -> None:
    """Only ``created[gte]`` lists it: no ledger row names its payment intent."""
    _, intent = world.order()
    made = world.stripe.refund_outside(intent, 300)
    report = world.reconcile()
    assert only(report, "unknown_provider_refund").refund_ids == (made["id"],)
    assert report.rows == 0


def test_a_row_edited_to_another_amount_is_an_amount_mismatch(world: World) -> None:
    order_id, _ = world.order()
    row = world.direct(order_id, 2_000)
    world.edit(row, amount_cents=2_500)

    difference = only(world.reconcile(), "amount_mismatch")
    assert (difference.refund_key, difference.refund_ids) == (row.refund_key, (row.refund_id,))
    assert (difference.ledger_amount, difference.provider_amount) == (2_500, 2_000)


def test_a_succeeded_row_whose_refund_the_provider_lacks_is_missing_at_provider(world: World) -> None:
    order_id, intent = world.order()
    made = world.direct(order_id, 2_000)
    # A second refund row the ledger says was made, which the provider never made.
    ghost = dict(from_item(_item(world, made)))
    ghost.update(
        sk=made.sk + "x",
        refund_key=made.refund_key + "x",
        tool_use_id=made.tool_use_id + "x",
        refund_id="re_sim_never_made",
    )
    world.ddb.put_item(TableName=world.table, Item=to_item(ghost))

    difference = only(world.reconcile(), "missing_at_provider")
    assert (difference.refund_key, difference.refund_ids) == (made.refund_key + "x", ("re_sim_never_made",))
    assert (difference.ledger_status, difference.payment_intent) == ("SUCCEEDED", intent)


@pytest.mark.parametrize(
    ("ledger", "provider"),
    [("SUCCEEDED", "pending"), ("SUCCEEDED", "failed"), ("FAILED", "succeeded")],
)
def test_a_status_disagreement_is_a_status_mismatch(world: World, ledger: str, provider: str) -> None:
    order_id, _ = world.order()
    world.stripe.new_refund_status = "pending" if provider != "succeeded" else "succeeded"
    row = world.direct(order_id, 2_000)
    if provider == "failed":
        world.stripe.settle(row.refund_id, "failed")
    world.edit(row, status=ledger)

    difference = only(world.reconcile(), "status_mismatch")
    assert (difference.refund_key, difference.ledger_status, difference.provider_status) == (
        row.refund_key,
        ledger,
        provider,
    )


def test_two_live_refunds_for_one_key_are_a_duplicate_refund(world: World) -> None:
    order_id, intent = world.order()
    row = world.direct(order_id, 2_000)
    # A second attempt key for the same refund, sent although the first refund exists (the bug the key prevents).
    second = world.payments.refund(RefundAttempt(attempt_key(row.refund_key, 2), intent, 2_000, "usd", row.metadata))

    difference = only(world.reconcile(), "duplicate_refund")
    assert difference.refund_key == row.refund_key
    assert set(difference.refund_ids) == {row.refund_id, second.id}


def test_every_kind_at_once_each_found_exactly_once(world: World) -> None:
    orders = [world.order() for _ in range(5)]
    world.approved(orders[0][0], 9_000)  # clean
    unknown = world.stripe.refund_outside(orders[1][1], 500)
    amount = world.direct(orders[2][0], 2_000)
    world.edit(amount, amount_cents=1_999)
    status = world.direct(orders[3][0], 2_000)
    world.edit(status, status="FAILED")
    duplicated = world.direct(orders[4][0], 1_000)
    world.payments.refund(
        RefundAttempt(attempt_key(duplicated.refund_key, 2), orders[4][1], 1_000, "usd", duplicated.metadata)
    )

    report = world.reconcile()
    found = sorted((d.kind, d.refund_key or d.refund_ids[0]) for d in report.differences)
    assert found == sorted(
        [
            ("unknown_provider_refund", unknown["id"]),
            ("amount_mismatch", amount.refund_key),
            ("status_mismatch", status.refund_key),
            ("duplicate_refund", duplicated.refund_key),
        ]
    )
    assert report.counts["missing_at_provider"] == 0 and sum(report.counts.values()) == 4


# ------------------------------------------------------------------ the window


def test_what_lies_outside_the_window_is_ignored(world: World) -> None:
    order_id, intent = world.order()
    world.stripe.clock.advance(-10 * 86_400)  # the provider's refunds of ten days ago
    row = world.direct(order_id, 2_000)
    world.stripe.refund_outside(intent, 500)
    world.stripe.clock.reset()
    world.edit(row, amount_cents=2_100, created_at=iso(datetime.now(UTC) - 10 * DAY))

    assert world.reconcile().differences == []  # 7 days: neither the row nor the refunds
    wider = world.reconcile(window_days=14)
    assert sorted(kinds(wider)) == ["amount_mismatch", "unknown_provider_refund"]


def test_a_new_refund_for_a_row_created_before_the_window_is_matched_by_its_key(world: World) -> None:
    """A lead's retry or the sweep's new attempt days later: the refund is recent, its row is not."""
    order_id, _ = world.order()
    row = world.direct(order_id, 2_000)
    world.edit(row, created_at=iso(datetime.now(UTC) - 20 * DAY))

    report = world.reconcile()
    assert report.differences == [] and report.rows == 1


# ------------------------------------------------------------------ the function


def test_the_scheduled_function_reports_and_emits_its_metric(
    world: World, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    order_id, intent = world.order()
    world.direct(order_id, 2_000)
    made = world.stripe.refund_outside(intent, 400)
    env = world.stack.function_env("ReconcileFunction")
    assert (env["PAYMENT_PROVIDER"], env["RECONCILE_WINDOW_DAYS"], env["POWERTOOLS_SERVICE_NAME"]) == (
        "stripe",
        "7",
        "reconcile",
    )
    saved = dict(os.environ)
    os.environ.update(env)
    wiring.reset(payments_transport=world.transport)
    obs.metrics.clear_metrics()
    capsys.readouterr()
    try:
        handler = load_handler(world.stack, "ReconcileFunction")
        out = handler({"id": "evt-reconcile-1", "source": "aws.events", "detail-type": "Scheduled Event"}, None)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert out["difference_count"] == 1 and out["counts"]["unknown_provider_refund"] == 1
    assert out["differences"][0]["refund_ids"] == [made["id"]]
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    (emf,) = [line for line in lines if "_aws" in line and obs.RECONCILIATION_DIFFERENCES in line]
    assert emf[obs.RECONCILIATION_DIFFERENCES] in (1, [1], 1.0, [1.0])
    # One structured log line per difference (Powertools' JSON handler writes the record's `reconciliation`).
    (logged,) = [r for r in caplog.records if r.getMessage() == "reconciliation difference"]
    assert logged.levelname == "WARNING"
    assert logged.reconciliation["kind"] == "unknown_provider_refund"  # type: ignore[attr-defined]
    assert logged.reconciliation["refund_ids"] == [made["id"]]  # type: ignore[attr-defined]


def test_ledger_only_payments_are_not_reconciled(world: World) -> None:
    from support_agent.refunds.provider.none import LedgerOnly

    order_id, _ = world.order()
    world.direct(order_id, 2_000)
    report = Reconciler(world.ledger, LedgerOnly()).run()
    assert (report.provider, report.differences, report.rows) == ("none", [], 0)
    assert "ledger-only" in report.skipped


def _item(world: World, row: LedgerRow) -> dict[str, Any]:
    out = world.ddb.get_item(TableName=world.table, Key=to_item({"customer_id": row.customer_id, "sk": row.sk}))
    return dict(out["Item"])
