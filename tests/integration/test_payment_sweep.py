"""The payment sweep on the deployed template: every unsettled state a refund can be left in is settled by asking.

template.yaml deployed into moto with ``PaymentProvider=stripe``; the simulated Stripe in-process
(tests/support/stripe.py) behind the real Stripe adapter. Each state is made the way the code makes it:
a direct refund's REQUESTED row with its reservation (`RefundWriter.direct`), an approved one's
(`RefundLedger.begin_approved` after a lead's approval), then — for SETTLING — one provider call through
`RefundSettler.settle` meeting the simulated Stripe's faults or a ``pending`` refund. Rows are written with
a past ``now`` (their attempt began then): the sweep runs on the real clock, no fake time.

After every step: per order ``available + reserved + refunded = total``, and the ledger equals the
provider (tests/support/stripe.py `ledger_problems`: no refund key with two live refunds, a SUCCEEDED row
holds exactly its succeeded refund, ``refunded`` is what the provider refunded).
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from devstack.seed import put_order
from devstack.simulated_stripe import TEST_KEY, Fault
from devstack.stack import Stack, load_template, translate
from support_agent import observability as obs
from support_agent import wiring
from support_agent.clock import iso
from support_agent.config import Settings, load_settings
from support_agent.ids import new_approval_id
from support_agent.messages import Deadline
from support_agent.refunds.ledger import RefundLedger
from support_agent.refunds.ledger_row import UNSETTLED_INDEX, LedgerRow
from support_agent.refunds.requests import RefundRequest, RefundWriter
from support_agent.refunds.sweep import SWEEP_ACTOR, PaymentSweeper, PaymentSweepIncomplete
from support_agent.store.approvals import Approval, ApprovalStore
from support_agent.store.audit import AuditStore
from support_agent.store.dynamo import from_item, to_item
from support_agent.wiring import build_settler
from tests.integration.conftest import Api, deployed_stack, load_handler
from tests.reliability.test_least_privilege_runtime import Recorder, as_function, check_pairs, credentials_for
from tests.support.ledger import direct_row, tool_request
from tests.support.scripted import ScriptedModel
from tests.support.stripe import BASE, POST, InProcessStripe, ledger_problems, provider_for, refunds_by_key

CUSTOMER = 771  # this module's own customer: nothing else touches its orders
AMOUNT = 2_500
PAST_GRACE = 400  # seconds: past the default grace (300), younger than the new-attempt age (900)
OLD = 1_000  # seconds: older than PAYMENT_NEW_ATTEMPT_AFTER_SECONDS (900)
_orders = itertools.count(77_001)


@pytest.fixture(scope="module")
def stripe_stack() -> Iterator[tuple[Stack, InProcessStripe]]:
    transport = InProcessStripe()
    with deployed_stack({"PaymentProvider": "stripe", "StripeApiBase": BASE}) as stack:
        os.environ.update(STRIPE_API_KEY=TEST_KEY)
        wiring.reset(payments_transport=transport)
        yield stack, transport
    wiring.reset()


def _ago(seconds: float) -> str:
    return iso(datetime.now(UTC) - timedelta(seconds=seconds))


@dataclass
class World:
    """The deployed tables through the code's own stores, and the simulated Stripe behind them."""

    stack: Stack
    transport: InProcessStripe

    def __post_init__(self) -> None:
        self.cfg: Settings = load_settings(
            {**self.stack.function_env("PaymentSweepFunction"), "STRIPE_API_KEY": TEST_KEY}
        )
        self.ddb = boto3.client("dynamodb")
        self.table = self.cfg.customer_data_table
        self.ledger = RefundLedger(self.ddb, self.table, self.cfg.approvals_table, self.cfg.audit_table)
        self.approvals = ApprovalStore(self.ddb, self.cfg.approvals_table, self.table, self.cfg.audit_table)
        # The refund's first call, as the chat or RefundFlow makes it: no retry, so one fault decides it.
        self.first_call = build_settler(self.cfg, self.ddb, provider_for(self.transport, max_retries=0))
        self.order_ids: list[int] = []

    @property
    def stripe(self) -> Any:
        return self.transport.stripe

    def sweeper(self, limit: int | None = None, grace: int | None = None) -> PaymentSweeper:
        """The sweep as PaymentSweepFunction builds it (its deployed settings), on the real clock."""
        provider = provider_for(self.transport)
        settler = build_settler(self.cfg, self.ddb, provider)
        return PaymentSweeper(
            settler.ledger,
            settler,
            provider,
            grace_seconds=self.cfg.payment_sweep_grace_seconds if grace is None else grace,
            new_attempt_after_seconds=self.cfg.payment_new_attempt_after_seconds,
            limit=limit or self.cfg.payment_sweep_limit,
        )

    # -- making each state ---------------------------------------------------------------------------------------

    def _order(self, amount: int) -> tuple[int, str]:
        """An order of ``amount`` in total, all of it available."""
        order_id = next(_orders)
        intent = f"pi_sweep_{order_id}"
        put_order(self.ddb, self.table, CUSTOMER, order_id, amount, payment_intent=intent)
        self.stripe.add_payment_intent(intent, amount, "usd")
        self.order_ids.append(order_id)
        return order_id, intent

    def _request(
        self, order_id: int, intent: str, amount: int, started: str, total: int | None = None
    ) -> RefundRequest:
        return tool_request(CUSTOMER, order_id, amount, started, total_cents=total, payment_intent=intent)

    def direct_requested(self, age: float, amount: int = AMOUNT, total: int | None = None) -> LedgerRow:
        """A direct refund's REQUESTED row and reservation; the process died before the provider call.
        ``total``: the order's (default ``amount``); a partial refund leaves room for a second one."""
        order_id, intent = self._order(total or amount)
        r = self._request(order_id, intent, amount, _ago(age), total)
        row = direct_row(r, provider="stripe")
        RefundWriter(self.ddb, self.table, self.cfg.approvals_table, self.cfg.audit_table).direct(r, 10**9, row)
        return self.row(row)

    def approved_requested(self, age: float, amount: int = 18_900) -> LedgerRow:
        """A lead approved it; RefundFlow's step wrote APPROVED -> SETTLING with the REQUESTED row, then died."""
        order_id, intent = self._order(amount)
        r = self._request(order_id, intent, amount, _ago(age + 60))
        approval_id = new_approval_id()
        RefundWriter(self.ddb, self.table, self.cfg.approvals_table, self.cfg.audit_table).reserve(
            r, approval_id, {"status": "PENDING_APPROVAL", "approval_id": approval_id}
        )
        self.approvals.approve(approval_id, "lead-1", _ago(age + 30))
        approval = self.approvals.get(approval_id)
        assert approval is not None
        return self.ledger.begin_approved(approval, "stripe", _ago(age), "refund-flow")

    def requested(self, kind: str, age: float) -> LedgerRow:
        return self.direct_requested(age) if kind == "direct" else self.approved_requested(age)

    def first_call_meets(
        self, row: LedgerRow, fault: Fault | None = None, status: str = "succeeded", ago: float = 0
    ) -> LedgerRow:
        """The refund's first provider call, meeting ``fault`` (or a refund ``status`` the provider gives it),
        made ``ago`` seconds ago (its send stamped then)."""
        if fault is not None:
            self.stripe.inject(POST, fault, hold_seconds=0.01)
        self.stripe.new_refund_status = status
        settler = replace(self.first_call, now=lambda: _ago(ago)) if ago else self.first_call
        try:
            return settler.settle(row, actor="refund-flow").row
        finally:
            self.stripe.new_refund_status = "succeeded"

    # -- reading ----------------------------------------------------------------------------------------------------

    def row(self, row: LedgerRow) -> LedgerRow:
        current = self.ledger.get(row.customer_id, row.sk)
        assert current is not None
        return current

    def order(self, row: LedgerRow) -> tuple[int, int, int]:
        """(available, reserved, refunded)."""
        item = self.ddb.get_item(
            TableName=self.table, Key=to_item({"customer_id": CUSTOMER, "sk": f"ORDER#{row.order_id}"})
        )["Item"]
        return tuple(int(item[f"{k}_cents"]["N"]) for k in ("available", "reserved", "refunded"))  # type: ignore[return-value]

    def approval(self, row: LedgerRow) -> Approval:
        item = self.approvals.get(row.approval_id)
        assert item is not None
        return item

    def trail(self, row: LedgerRow) -> list[dict[str, Any]]:
        """The refund key's stream and those it names (the approval's), oldest first."""
        streams = AuditStore(self.ddb, self.cfg.audit_table).streams_of(f"refund#{row.refund_key}")
        return sorted((r for rows in streams.values() for r in rows), key=lambda r: (r["created_at"], r["event_id"]))

    def provider_refunds(self, row: LedgerRow) -> list[dict[str, Any]]:
        return refunds_by_key(self.stripe).get(row.refund_key, [])

    def posts_for(self, row: LedgerRow) -> list[str]:
        """The Idempotency-Key of every refund request made for ``row``'s refund key, in order."""
        return [
            r.headers.get("idempotency-key", "")
            for r in self.stripe.requests
            if f"{r.method} {r.path}" == POST and r.params.get("metadata", {}).get("refund_key") == row.refund_key
        ]

    def check(self, *, unknown_ok: bool = True) -> None:
        """The money invariant and ledger = provider, over every row and order of this module."""
        items = self.ddb.query(
            TableName=self.table,
            KeyConditionExpression="customer_id = :c",
            ExpressionAttributeValues=to_item({":c": CUSTOMER}),
            ConsistentRead=True,
        )["Items"]
        rows = [from_item(i) for i in items if str(from_item(i)["sk"]).startswith("REFUND#")]
        orders = [from_item(i) for i in items if str(from_item(i)["sk"]).startswith("ORDER#")]
        problems = ledger_problems(rows, orders, self.stripe, unknown_ok=unknown_ok)
        assert not problems, problems


@pytest.fixture
def world(stripe_stack: tuple[Stack, InProcessStripe]) -> World:
    """The module's stack with an empty ``unsettled`` index: rows an earlier test left unsettled on purpose
    are taken out of it (test hygiene only: the sweep of this test sees this test's rows)."""
    w = World(*stripe_stack)
    kwargs: dict[str, Any] = {
        "TableName": w.table,
        "IndexName": UNSETTLED_INDEX,
        "KeyConditionExpression": "unsettled = :u",
        "ExpressionAttributeValues": to_item({":u": "UNSETTLED"}),
    }
    while True:
        out = w.ddb.query(**kwargs)
        for item in out["Items"]:
            key = {"customer_id": item["customer_id"], "sk": item["sk"]}
            w.ddb.update_item(TableName=w.table, Key=key, UpdateExpression="REMOVE unsettled")
        if "LastEvaluatedKey" not in out:
            break
        kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]
    w.stripe.faults.clear()
    obs.metrics.clear_metrics()  # what earlier runs emitted without a handler to flush it
    return w


def actions(trail: list[dict[str, Any]]) -> list[str]:
    return [r["action"] for r in trail]


# ------------------------------------------------------------------ REQUESTED: the call never happened


@pytest.mark.parametrize("kind", ["direct", "approved"])
def test_a_requested_row_whose_call_never_happened_is_settled_with_attempt_1(world: World, kind: str) -> None:
    row = world.requested(kind, PAST_GRACE)
    assert world.posts_for(row) == [] and world.order(row) == (0, row.amount_cents, 0)
    world.check()

    result = world.sweeper().run()

    after = world.row(row)
    assert (after.status, after.attempt) == ("SUCCEEDED", 1)
    assert world.posts_for(row) == [f"{row.refund_key}#1"]  # found nothing, then sent attempt 1's own key
    (refund,) = world.provider_refunds(row)
    assert (refund["id"], refund["status"], refund["metadata"]["attempt"]) == (after.refund_id, "succeeded", "1")
    assert world.order(row) == (0, 0, row.amount_cents)
    if kind == "approved":
        assert world.approval(row).status == "REFUNDED"
    (audit,) = [r for r in world.trail(row) if r["action"] == "payment_refund"]
    assert (audit["actor"], audit["outcome"]) == (SWEEP_ACTOR, "SUCCEEDED")
    assert (result.scanned, result.settled, result.resent, result.errors, result.new_attempts) == (1, 1, 1, 0, 0)
    world.check(unknown_ok=False)


# ------------------------------------------------------------------ SETTLING, pending at the provider


def test_a_pending_refund_is_left_alone_until_the_provider_settles_it_then_refunded(world: World) -> None:
    row = world.first_call_meets(world.approved_requested(PAST_GRACE), status="pending")
    assert (row.status, row.refund_id[:3]) == ("SETTLING", "re_")
    assert world.approval(row).status == "SETTLING"
    trail_before = actions(world.trail(row))
    world.check()

    still = world.sweeper().run()
    assert (still.scanned, still.pending, still.settled) == (1, 1, 0)
    assert world.row(row) == row and actions(world.trail(row)) == trail_before  # a look, no write
    world.check()

    world.stripe.settle(row.refund_id, "succeeded")  # no webhook comes
    done = world.sweeper().run()

    after = world.row(row)
    assert (done.settled, after.status, after.refund_id) == (1, "SUCCEEDED", row.refund_id)
    assert world.approval(row).status == "REFUNDED"
    assert world.order(row) == (0, 0, row.amount_cents)
    assert world.posts_for(row) == [f"{row.refund_key}#1"]  # retrieved, never sent again
    assert actions(world.trail(row))[len(trail_before) :] == ["payment_refund"]
    world.check(unknown_ok=False)


@pytest.mark.parametrize("kind", ["direct", "approved"])
def test_a_pending_refund_the_provider_fails_is_failed(world: World, kind: str) -> None:
    row = world.first_call_meets(world.requested(kind, PAST_GRACE), status="pending")
    world.stripe.settle(row.refund_id, "failed")
    world.check()

    result = world.sweeper().run()

    after = world.row(row)
    assert (result.settled, after.status, after.refund_id) == (1, "FAILED", row.refund_id)
    assert after.failure_code == "unknown"  # the simulated Stripe's failure_reason
    if kind == "direct":
        assert world.order(row) == (row.amount_cents, 0, 0)  # the money is available again
    else:
        assert world.order(row) == (0, row.amount_cents, 0)  # kept reserved for the lead to retry or release
        approval = world.approval(row)
        assert (approval.status, approval.failure_error) == ("FAILED", "unknown")
    world.check(unknown_ok=False)


# ------------------------------------------------------------------ SETTLING, outcome unknown


def test_an_unknown_outcome_whose_refund_exists_is_found_and_succeeded(world: World) -> None:
    # The refund is made, then a 500 (saved by Stripe): the first call cannot tell.
    row = world.first_call_meets(world.direct_requested(PAST_GRACE), Fault.ERROR_AFTER)
    assert (row.status, row.refund_id) == ("SETTLING", "")
    (made,) = world.provider_refunds(row)
    world.check()

    result = world.sweeper().run()

    after = world.row(row)
    assert (result.settled, after.status, after.refund_id, after.attempt) == (1, "SUCCEEDED", made["id"], 1)
    assert world.posts_for(row) == [f"{row.refund_key}#1"]  # found by its key: nothing sent again
    assert world.order(row) == (0, 0, row.amount_cents)
    world.check(unknown_ok=False)


def test_not_found_and_younger_than_the_threshold_resends_the_same_key(world: World) -> None:
    # A 500 saved before any refund was made: the first call cannot tell, and nothing exists.
    row = world.first_call_meets(world.direct_requested(PAST_GRACE), Fault.ERROR_BEFORE)
    assert (row.status, world.provider_refunds(row)) == ("SETTLING", [])

    result = world.sweeper().run()

    after = world.row(row)
    assert (result.resent, result.new_attempts, result.settled) == (1, 0, 0)
    assert (after.status, after.attempt) == ("SETTLING", 1)  # Stripe replays the saved 500: still unknown
    assert world.posts_for(row) == [f"{row.refund_key}#1"] * 2  # the same key, never a new one
    assert world.provider_refunds(row) == []
    assert "refund_new_attempt" not in actions(world.trail(row))
    world.check()


def test_not_found_and_older_starts_attempt_2_and_makes_exactly_one_refund(world: World) -> None:
    row = world.first_call_meets(world.direct_requested(OLD), Fault.ERROR_BEFORE, ago=OLD - 10)
    assert (row.status, row.attempt) == ("SETTLING", 1)

    result = world.sweeper().run()

    after = world.row(row)
    assert (result.new_attempts, result.settled, result.errors) == (1, 1, 0)
    assert (after.status, after.attempt) == ("SUCCEEDED", 2)
    assert world.posts_for(row) == [f"{row.refund_key}#1", f"{row.refund_key}#2"]
    (refund,) = world.provider_refunds(row)
    assert (refund["id"], refund["metadata"]["attempt"], refund["amount"]) == (after.refund_id, "2", AMOUNT)
    trail = world.trail(row)
    new = next(r for r in trail if r["action"] == "refund_new_attempt")
    assert new["actor"] == SWEEP_ACTOR and json.loads(new["output"])["attempt_key"] == f"{row.refund_key}#2"
    world.check(unknown_ok=False)

    again = world.sweeper().run()  # settled: out of the index, nothing more is asked
    assert again.scanned == 0 and len(world.provider_refunds(row)) == 1
    assert len(world.posts_for(row)) == 2


def test_a_repair_resending_an_old_attempt_while_the_sweep_runs_makes_one_refund(world: World) -> None:
    """Second review, finding 1: attempt 1 began long ago and never reached Stripe; a chat repair sends its key
    again just as the sweep runs, and Stripe takes 2 s. The sweep judged "old" by when the attempt began, found
    nothing (Stripe was still executing the repair's request) and sent attempt 2: two refunds of 2500 for one
    request. Every send now stamps ``attempt_sent_at`` first, and a new attempt waits for that stamp to age."""
    row = world.direct_requested(OLD, amount=AMOUNT, total=4 * AMOUNT)  # partial: Stripe would take a second one
    world.stripe.inject(POST, Fault.SLOW, hold_seconds=2.0)
    repair = threading.Thread(target=lambda: world.first_call.settle(row, actor=f"customer-{CUSTOMER}"))
    repair.start()
    until = time.monotonic() + 5
    while world.stripe.faults.pending(POST) and time.monotonic() < until:  # the repair's request is at Stripe
        time.sleep(0.01)
    try:
        result = world.sweeper().run()
    finally:
        repair.join(10)

    after = world.row(row)
    assert result.new_attempts == 0, result
    assert {k.rsplit("#", 1)[1] for k in world.posts_for(row)} == {"1"}, world.posts_for(row)
    assert len(world.provider_refunds(row)) == 1, world.provider_refunds(row)
    assert (after.status, after.attempt) == ("SUCCEEDED", 1)
    assert world.order(row) == (3 * AMOUNT, 0, AMOUNT)
    world.check(unknown_ok=False)


def test_a_new_attempt_loses_to_a_send_stamped_after_the_sweep_read_the_row(world: World) -> None:
    """The other order of the same race: the sweep read the row (its last send long ago) and found nothing; a
    send of attempt 1 is stamped before the sweep writes attempt 2. The new attempt is conditioned on the stamp
    it read: it loses, and attempt 1 goes on alone."""
    row = world.direct_requested(OLD, amount=AMOUNT, total=4 * AMOUNT)
    sweeper = world.sweeper()
    real_find = sweeper.provider.find

    def find_then_a_send_is_stamped(*args: Any, **kwargs: Any) -> Any:
        found = real_find(*args, **kwargs)
        world.ledger.mark_sent(world.row(row), iso(datetime.now(UTC)))  # a repair about to send attempt 1
        return found

    sweeper.provider.find = find_then_a_send_is_stamped  # type: ignore[method-assign]
    result = sweeper.run()

    after = world.row(row)
    assert (result.new_attempts, result.conflicts) == (0, 1), result
    assert after.attempt == 1 and world.posts_for(row) == []
    world.check()


def test_a_sender_holding_a_superseded_attempt_sends_the_current_one(world: World) -> None:
    """A repair read the row at attempt 1; the sweep began attempt 2 before the repair sent. The repair's send
    stamp is conditioned on its attempt being current: it fails, the repair re-reads and sends attempt 2's key
    (the sweep's: the provider answers it once), never attempt 1's."""
    stale = world.first_call_meets(world.direct_requested(OLD), Fault.ERROR_BEFORE, ago=OLD - 10)
    world.stripe.inject(POST, Fault.ERROR_UNSAVED, 3, hold_seconds=0.01)  # the sweep's sends of attempt 2: no answer
    assert world.sweeper().run().new_attempts == 1
    assert world.row(stale).attempt == 2

    after = world.first_call.settle(stale, actor=f"customer-{CUSTOMER}").row

    assert (after.status, after.attempt) == ("SUCCEEDED", 2)
    keys = world.posts_for(stale)
    assert keys[0] == f"{stale.refund_key}#1" and set(keys[1:]) == {f"{stale.refund_key}#2"}, keys
    assert len(world.provider_refunds(stale)) == 1
    world.check(unknown_ok=False)


# ------------------------------------------------------------------ bounds


def test_a_row_within_the_grace_is_untouched(world: World) -> None:
    young = world.direct_requested(60)
    before = (world.row(young), actions(world.trail(young)), world.order(young))

    result = world.sweeper().run()

    assert result.scanned == 0
    assert (world.row(young), actions(world.trail(young)), world.order(young)) == before
    assert world.posts_for(young) == []
    assert 60 <= result.oldest_age_seconds <= 90  # it is still the oldest unsettled row: the metric says so
    assert obs.metrics.metric_set[obs.OLDEST_UNSETTLED_REFUND_AGE]["Value"] == [result.oldest_age_seconds]
    world.check()


def test_the_limit_is_respected_and_rows_without_a_refund_id_go_first(world: World) -> None:
    pending = world.first_call_meets(world.direct_requested(PAST_GRACE + 200), status="pending")  # the oldest
    crashed = [world.direct_requested(PAST_GRACE + 100 - i) for i in range(2)]

    first = world.sweeper(limit=2).run()

    assert (first.scanned, first.settled, first.truncated) == (2, 2, True)
    assert [world.row(r).status for r in crashed] == ["SUCCEEDED", "SUCCEEDED"]
    assert world.row(pending) == pending  # not asked: the limit went to the rows nobody else will settle
    world.check()

    world.stripe.settle(pending.refund_id, "succeeded")
    second = world.sweeper(limit=2).run()
    assert (second.scanned, second.settled, second.truncated) == (1, 1, False)
    assert world.row(pending).status == "SUCCEEDED"
    world.check(unknown_ok=False)


def test_no_row_is_started_past_the_deadline(world: World) -> None:
    row = world.direct_requested(PAST_GRACE)

    result = world.sweeper().run(Deadline.after(1.0))  # less than a row needs

    assert (result.scanned, result.truncated) == (0, True)
    assert world.row(row).status == "REQUESTED" and world.posts_for(row) == []


def test_one_failing_row_does_not_stop_the_run(world: World) -> None:
    good = world.direct_requested(PAST_GRACE)
    bad = world.direct_requested(PAST_GRACE + 50)  # the oldest: swept first
    # A row no code writes: its refund key cannot make an attempt key ('#' is the separator).
    world.ddb.update_item(
        TableName=world.table,
        Key=to_item({"customer_id": CUSTOMER, "sk": bad.sk}),
        UpdateExpression="SET refund_key = :k",
        ExpressionAttributeValues=to_item({":k": "corrupt#key"}),
    )

    with pytest.raises(PaymentSweepIncomplete) as failed:
        world.sweeper().run()

    result = failed.value.result
    assert (result.scanned, result.errors, result.settled) == (2, 1, 1)
    assert world.row(good).status == "SUCCEEDED"
    assert world.row(bad).status == "REQUESTED"


# ------------------------------------------------------------------ the function and its metric


def _emf(out: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{") and '"_aws"' in line]
    return [m for m in lines if obs.OLDEST_UNSETTLED_REFUND_AGE in m]


def test_the_function_settles_and_reports_the_oldest_unsettled_age(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    env = world.stack.function_env("PaymentSweepFunction")
    assert env["PAYMENT_SWEEP_GRACE_SECONDS"] == "300" and env["PAYMENT_PROVIDER"] == "stripe"
    handler = load_handler(world.stack, "PaymentSweepFunction")
    saved = dict(os.environ)
    os.environ.update({**env, "STRIPE_API_KEY": TEST_KEY})
    wiring.reset(payments_transport=world.transport)
    try:
        capsys.readouterr()
        assert handler({"id": "ev-empty", "source": "aws.events"}, None)["oldest_age_seconds"] == 0
        (empty,) = _emf(capsys.readouterr().out)
        assert empty[obs.OLDEST_UNSETTLED_REFUND_AGE] == [0]  # one value per run

        stale = world.direct_requested(PAST_GRACE)
        waiting = world.direct_requested(120)  # within the grace: stays, and is then the oldest
        out = handler({"id": "ev-1", "source": "aws.events"}, None)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        wiring.reset(payments_transport=world.transport)

    assert (out["scanned"], out["settled"], out["errors"]) == (1, 1, 0)
    assert world.row(stale).status == "SUCCEEDED" and world.row(waiting).status == "REQUESTED"
    (metric,) = _emf(capsys.readouterr().out)
    assert metric[obs.OLDEST_UNSETTLED_REFUND_AGE] == [out["oldest_age_seconds"]]
    assert 120 <= out["oldest_age_seconds"] <= 150  # the row within the grace, not the one settled
    (definition,) = metric["_aws"]["CloudWatchMetrics"]
    assert {"Name": obs.OLDEST_UNSETTLED_REFUND_AGE, "Unit": "Seconds"} in definition["Metrics"]
    world.check()


def test_the_function_under_its_own_role(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """With moto enforcing IAM on the deployed role's actions, the sweep settles a direct and an approved
    refund, and every AWS call it made is one its role grants, resource by resource (no Scan, no Query on
    the table, no PutItem on CustomerData); everything granted was used (tests/reliability/...runtime)."""
    direct, approved = world.direct_requested(PAST_GRACE), world.approved_requested(PAST_GRACE)
    api = Api(world.stack, ScriptedModel(), overrides={"STRIPE_API_KEY": TEST_KEY})
    recorder = Recorder(world.stack)
    creds = credentials_for(world.stack, "PaymentSweepFunction")
    saved = dict(os.environ)
    try:
        with as_function(api, "PaymentSweepFunction", creds, recorder, monkeypatch):
            wiring.reset(payments_transport=world.transport)  # Stripe in-process; AWS through the recorded session
            out = api.handlers["PaymentSweepFunction"]({"id": "ev-iam", "source": "aws.events"}, None)
            used = set(recorder.pairs)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        wiring.reset(payments_transport=world.transport)
    assert (out["settled"], out["errors"]) == (2, 0), out
    assert world.row(direct).status == world.row(approved).status == "SUCCEEDED"
    assert ("dynamodb:Query", "CustomerDataTable/index/unsettled") in used
    check_pairs(world.stack, "PaymentSweepFunction", used)
    world.check(unknown_ok=False)


def test_the_schedule_and_the_alarm_leave_the_sweep_time_to_settle() -> None:
    """Every 5 minutes; the alarm's default fires only past the grace, the new-attempt age and a run."""
    cfn = translate(load_template())
    sam = load_template()
    fn = sam["Resources"]["PaymentSweepFunction"]["Properties"]
    assert fn["Events"]["Sweep"]["Type"] == "Schedule"
    assert fn["Events"]["Sweep"]["Properties"]["Schedule"] == "rate(5 minutes)"
    assert fn["Environment"]["Variables"]["PAYMENT_SWEEP_GRACE_SECONDS"] == {"Ref": "PaymentSweepGraceSeconds"}
    rules = [
        r["Properties"]
        for r in cfn["Resources"].values()
        if r["Type"] == "AWS::Events::Rule"
        and any(t["Arn"] == {"Fn::GetAtt": ["PaymentSweepFunction", "Arn"]} for t in r["Properties"]["Targets"])
    ]
    assert [r["ScheduleExpression"] for r in rules] == ["rate(5 minutes)"]
    grace = sam["Parameters"]["PaymentSweepGraceSeconds"]["Default"]
    threshold = sam["Parameters"]["UnsettledRefundAlarmSeconds"]["Default"]
    assert threshold > grace + load_settings({}).payment_new_attempt_after_seconds + 2 * 300
    group = cfn["Resources"]["PaymentSweepFunctionLogGroup"]["Properties"]
    assert group["LogGroupName"] == {"Fn::Sub": "/aws/lambda/${PaymentSweepFunction}"}


def test_a_new_attempt_never_comes_sooner_than_600_seconds() -> None:
    with pytest.raises(ValueError):
        load_settings({"PAYMENT_NEW_ATTEMPT_AFTER_SECONDS": "599"})
    assert load_settings({}).payment_new_attempt_after_seconds == 900
    with pytest.raises(ValueError, match="600"):
        PaymentSweeper(None, None, None, grace_seconds=0, new_attempt_after_seconds=10, limit=1)  # type: ignore[arg-type]
