"""The money writers announce their decisions in the conversation's feed (store/notifications.py), on moto.

Each decision writes exactly one notification — its type, its data in the customers' vocabulary, no turn —
numbered after the conversation's existing ones, in the decision's own transaction: when the decision's own
condition fails nothing is announced; when only the counter lost a race the whole transaction is retried
and both notifications land, numbered 1..n; a replayed decision announces nothing a second time.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from devstack.seed import put_order
from support_agent.refunds.keys import approved_refund_sk
from support_agent.refunds.ledger import RefundLedger
from support_agent.refunds.ledger_row import By, Duplicate, LedgerRow, Outcome
from support_agent.refunds.provider.none import LedgerOnly
from support_agent.refunds.provider.port import ProviderRefund, ProviderRefused
from support_agent.refunds.requests import RefundWriter
from support_agent.refunds.settle import RefundSettler
from support_agent.refunds.step import RefundStep
from support_agent.store.approvals import Approval, ApprovalStore, StateConflict
from support_agent.store.dynamo import put_new, to_item, to_values
from support_agent.store.notifications import Notification, NotificationStore
from tests.support.approvals import put_pending_approval
from tests.support.aws import create_tables
from tests.support.ledger import direct_row, tool_request

CUSTOMER = 7
TABLES = {
    "CONVERSATIONS_TABLE": "ConversationsTable",
    "CUSTOMER_DATA_TABLE": "CustomerDataTable",
    "APPROVALS_TABLE": "ApprovalsTable",
    "AUDIT_TABLE": "AuditTable",
}
_orders = itertools.count(60_001)


class Interposed:
    """The DynamoDB client, with ``before`` run ahead of each of the next ``times`` transactions that carry a
    notification: what another writer did between our read and our write."""

    def __init__(self, ddb: Any, before: Callable[[], None], times: int = 1) -> None:
        self._ddb = ddb
        self._before = before
        self.times = times
        self.transactions: list[list[dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ddb, name)

    def transact_write_items(self, **kwargs: Any) -> Any:
        items = list(kwargs["TransactItems"])
        self.transactions.append(items)
        if self.times and any(i.get("Put", {}).get("TableName") == TABLES["CONVERSATIONS_TABLE"] for i in items):
            self.times -= 1
            self._before()
        return self._ddb.transact_write_items(**kwargs)


class World:
    def __init__(self) -> None:
        self.ddb = boto3.client("dynamodb")
        create_tables(self.ddb)
        self.notes = NotificationStore(self.ddb, TABLES["CONVERSATIONS_TABLE"])

    def store(self, client: Any = None) -> ApprovalStore:
        return ApprovalStore(client or self.ddb, *self._tables())

    def ledger(self, client: Any = None) -> RefundLedger:
        c = TABLES
        return RefundLedger(
            client or self.ddb,
            c["CUSTOMER_DATA_TABLE"],
            c["APPROVALS_TABLE"],
            c["AUDIT_TABLE"],
            c["CONVERSATIONS_TABLE"],
        )

    @staticmethod
    def _tables() -> tuple[str, str, str, str]:
        c = TABLES
        return c["APPROVALS_TABLE"], c["CUSTOMER_DATA_TABLE"], c["AUDIT_TABLE"], c["CONVERSATIONS_TABLE"]

    def pending(self, amount: int = 9_000) -> Approval:
        approval_id = put_pending_approval(
            self.ddb, TABLES, CUSTOMER, next(_orders), amount, "2030-01-01T00:00:00Z", "x"
        )
        return self.approval(approval_id)

    def approval(self, approval_id: str) -> Approval:
        item = self.store().get(approval_id)
        assert item is not None
        return item

    def approved(self) -> Approval:
        approval = self.pending()
        return self.store().approve(approval.approval_id, "lead-1", "2030-01-01T00:01:00Z")

    def settling(self) -> LedgerRow:
        """APPROVED -> SETTLING with the REQUESTED row, as RefundFlow's step begins."""
        return self.ledger().begin_approved(self.approved(), "stripe", "2030-01-01T00:02:00Z", "refund-flow")

    def direct(self, amount: int = 2_000) -> LedgerRow:
        """A direct refund's REQUESTED row and reservation, as the refund tool writes it before its call."""
        order_id = next(_orders)
        put_order(self.ddb, TABLES["CUSTOMER_DATA_TABLE"], CUSTOMER, order_id, 4_000, payment_intent=f"pi_{order_id}")
        cid = f"conv_01JF3Q00000000000000{order_id:05d}"[:31]
        r = tool_request(
            CUSTOMER, order_id, amount, "2030-01-01T00:00:00Z", total_cents=4_000, reason="late",
            payment_intent=f"pi_{order_id}", conversation_id=cid, tool_use_id="toolu_1", request_id="req",
        )  # fmt: skip
        c = TABLES
        return RefundWriter(self.ddb, c["CUSTOMER_DATA_TABLE"], c["APPROVALS_TABLE"], c["AUDIT_TABLE"]).direct(
            r, 10**9, direct_row(r, provider="stripe")
        )

    def feed(self, conversation_id: str) -> list[tuple[int, str, dict[str, Any], str | None]]:
        return [(n.n, n.type, n.data, n.turn_id) for n in self.notes.since(conversation_id, 0)]

    def earlier(self, conversation_id: str, count: int = 1) -> None:
        """``count`` notifications the conversation already has (another writer's)."""
        for _ in range(count):
            self.notes.transact([], self.other(conversation_id))

    @staticmethod
    def other(conversation_id: str) -> Notification:
        return Notification(
            conversation_id=conversation_id,
            type="turn.failed",
            at="2030-01-01T00:00:00Z",
            data={"error": {"code": "x"}},
            turn_id="turn_x",
        )

    def set_status(self, approval_id: str, status: str) -> None:
        self.ddb.update_item(
            TableName=TABLES["APPROVALS_TABLE"],
            Key=to_item({"approval_id": approval_id}),
            UpdateExpression="SET #st = :s",
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues=to_values({":s": status}),
        )


@pytest.fixture
def w(aws: None) -> World:
    return World()


def decided(approval: Approval, status: str) -> dict[str, Any]:
    return {
        "approvalId": approval.approval_id,
        "orderId": approval.order_id,
        "amountCents": approval.amount_cents,
        "status": status,
    }


# ------------------------------------------------------------------ the lead's decisions and the approval sweep


@pytest.mark.parametrize(
    ("start", "to", "action", "word"),
    [
        ("PENDING", "REJECTED", "approval_rejected", "REJECTED"),
        ("PENDING", "EXPIRED", "approval_expired", "EXPIRED"),
        ("FAILED", "RELEASED", "approval_released", "RELEASED"),
    ],
)
def test_a_decision_that_frees_money_is_announced_once_after_the_existing_ones(
    w: World, start: str, to: str, action: str, word: str
) -> None:
    approval = w.pending()
    cid = approval.conversation_id
    w.set_status(approval.approval_id, start)
    w.earlier(cid, 2)
    w.store().release(approval.approval_id, start, to, "lead-1", action, "2030-01-02T00:00:00Z")
    feed = w.feed(cid)
    assert feed[2:] == [(3, "approval.decided", decided(approval, word), None)]
    assert [n.at for n in w.notes.since(cid, 2)] == ["2030-01-02T00:00:00Z"]
    # Asked again (a double click, the sweep and a lead at once): the state moved on, nothing more is announced.
    with pytest.raises(StateConflict):
        w.store().release(approval.approval_id, start, to, "lead-1", action, "2030-01-02T00:00:01Z")
    assert len(w.feed(cid)) == 3 and w.notes.count(cid) == 3


def test_approving_and_retrying_announce_nothing(w: World) -> None:
    approval = w.approved()
    w.set_status(approval.approval_id, "FAILED")
    w.store().mark_retry(approval.approval_id, "lead-1", "2030-01-02T00:00:00Z")
    assert w.feed(approval.conversation_id) == []


def test_a_decision_whose_own_condition_fails_announces_nothing(w: World) -> None:
    """Another lead approved it between our read and our write: the transaction is cancelled by the approval's
    condition, and the notification, in that transaction, is not written either."""
    approval = w.pending()
    aid = approval.approval_id
    racing = Interposed(w.ddb, lambda: w.set_status(aid, "APPROVED"))
    with pytest.raises(StateConflict):
        w.store(racing).release(aid, "PENDING", "REJECTED", "lead-1", "approval_rejected", "2030-01-02T00:00:00Z")
    assert len(racing.transactions) == 1  # not retried: the counter was not what cancelled it
    assert w.feed(approval.conversation_id) == [] and w.notes.count(approval.conversation_id) == 0
    assert w.approval(aid).status == "APPROVED"


def test_a_decision_that_loses_the_counter_race_is_written_again_with_the_next_number(w: World) -> None:
    approval = w.pending()
    cid = approval.conversation_id
    racing = Interposed(w.ddb, lambda: w.earlier(cid), times=2)
    after = w.store(racing).release(
        approval.approval_id, "PENDING", "REJECTED", "lead-1", "approval_rejected", "2030-01-02T00:00:00Z"
    )
    assert after.status == "REJECTED"
    assert len(racing.transactions) == 3  # lost twice to the counter, landed the third time
    assert [(n, t) for n, t, _, _ in w.feed(cid)] == [(1, "turn.failed"), (2, "turn.failed"), (3, "approval.decided")]
    order = w.ddb.get_item(
        TableName=TABLES["CUSTOMER_DATA_TABLE"],
        Key=to_item({"customer_id": CUSTOMER, "sk": f"ORDER#{approval.order_id}"}),
    )["Item"]
    assert order["reserved_cents"] == {"N": "0"}  # the reservation returned once


def test_an_approval_no_conversation_owns_is_decided_without_a_notification(w: World) -> None:
    approval = w.pending()
    w.ddb.update_item(
        TableName=TABLES["APPROVALS_TABLE"],
        Key=to_item({"approval_id": approval.approval_id}),
        UpdateExpression="REMOVE conversation_id",
    )
    racing = Interposed(w.ddb, lambda: None)
    w.store(racing).release(approval.approval_id, "PENDING", "REJECTED", "lead-1", "approval_rejected", "t")
    assert all(
        i.get("Put", {}).get("TableName") != TABLES["CONVERSATIONS_TABLE"] for t in racing.transactions for i in t
    )


# ------------------------------------------------------------------ RefundFlow's payment step


class Refusing(LedgerOnly):
    """A provider that refuses the refund for good and has none for its key."""

    name = "stripe"

    def refund(self, *args: Any, **kwargs: Any) -> ProviderRefund:
        raise ProviderRefused("charge_disputed", "refused")


def step(w: World, provider: Any, client: Any = None) -> RefundStep:
    c = TABLES
    approvals = ApprovalStore(client or w.ddb, c["APPROVALS_TABLE"], c["CUSTOMER_DATA_TABLE"], c["AUDIT_TABLE"])
    now = "2030-01-03T00:00:00Z"
    return RefundStep(approvals, RefundSettler(provider, w.ledger(client), lambda: now), provider.name, lambda: now)


def test_the_payment_step_announces_refunded_once_and_a_replay_nothing(w: World) -> None:
    approval = w.approved()
    cid = approval.conversation_id
    w.earlier(cid)
    assert step(w, LedgerOnly()).run(approval.approval_id, "apr-x")["status"] == "REFUNDED"
    assert w.feed(cid)[1:] == [(2, "approval.decided", decided(approval, "REFUNDED"), None)]
    # A replayed execution (and a lead's second approve) finds it REFUNDED: nothing is written, nothing announced.
    assert step(w, LedgerOnly()).run(approval.approval_id, "apr-x-replay")["replayed"] is True
    assert len(w.feed(cid)) == 2


def test_the_payment_step_announces_a_refusal_as_failed(w: World) -> None:
    approval = w.approved()
    assert step(w, Refusing()).run(approval.approval_id, "apr-x")["status"] == "FAILED"
    assert w.feed(approval.conversation_id) == [(1, "approval.decided", decided(approval, "FAILED"), None)]


def test_a_lost_reservation_fails_the_approval_and_is_announced(w: World) -> None:
    """The order no longer holds the amount: APPROVED -> FAILED before any provider call (`fail_unstarted`)."""
    approval = w.approved()
    w.ddb.update_item(
        TableName=TABLES["CUSTOMER_DATA_TABLE"],
        Key=to_item({"customer_id": CUSTOMER, "sk": f"ORDER#{approval.order_id}"}),
        UpdateExpression="SET reserved_cents = :z, available_cents = :t",
        ExpressionAttributeValues=to_values({":z": 0, ":t": approval.amount_cents}),
    )
    assert step(w, LedgerOnly()).run(approval.approval_id, "apr-x")["status"] == "FAILED"
    assert w.feed(approval.conversation_id) == [(1, "approval.decided", decided(approval, "FAILED"), None)]


def test_a_pending_answer_is_no_decision(w: World) -> None:
    row = w.settling()
    w.ledger().record(row, Outcome("SETTLING", "re_1", "pending"), "t", By("refund-flow"))
    assert w.feed(row.conversation_id) == []


def test_an_outcome_another_writer_recorded_first_is_announced_once(w: World) -> None:
    """The webhook recorded SUCCEEDED while RefundFlow's call was out: RefundFlow's own record is superseded
    (its call is audited), and the decision stays announced once — by the writer whose change landed."""
    row = w.settling()
    w.ledger().record(row, Outcome("SUCCEEDED", "re_1", "succeeded"), "t1", By("stripe-webhook", announce=True))
    after = w.ledger().record(row, Outcome("SUCCEEDED", "re_1", "succeeded"), "t2", By("refund-flow"))
    assert after.status == "SUCCEEDED"
    assert [(n, t, d["status"]) for n, t, d, _ in w.feed(row.conversation_id)] == [(1, "approval.decided", "REFUNDED")]


def test_a_late_failure_of_an_approved_refund_is_announced(w: World) -> None:
    row = w.ledger().record(w.settling(), Outcome("SUCCEEDED", "re_1", "succeeded"), "t1", By("refund-flow"))
    w.ledger().fail_late(row, "re_1", "lost_or_stolen_card", "t2", By("stripe-webhook", announce=True))
    feed = w.feed(row.conversation_id)
    assert [(n, d["status"]) for n, _, d, _ in feed] == [(1, "REFUNDED"), (2, "FAILED")]
    assert w.approval(row.approval_id).status == "FAILED"


# ------------------------------------------------------------------ direct refunds: only when the caller says so


def test_a_direct_refund_settled_by_the_chats_own_call_is_not_announced(w: World) -> None:
    row = w.direct()
    w.ledger().record(row, Outcome("SUCCEEDED", "re_1", "succeeded"), "t", By("customer-7"))
    assert w.ledger().get(CUSTOMER, row.sk).status == "SUCCEEDED"  # type: ignore[union-attr]
    assert w.feed(row.conversation_id) == []


@pytest.mark.parametrize(("outcome", "word"), [("SUCCEEDED", "REFUNDED"), ("FAILED", "FAILED")])
def test_a_direct_refund_settled_later_is_announced_when_asked(w: World, outcome: str, word: str) -> None:
    row = w.direct()
    w.earlier(row.conversation_id)
    w.ledger().record(row, Outcome(outcome, "re_1", outcome.lower()), "t", By("payment-sweep", announce=True))  # type: ignore[arg-type]
    data = {"orderId": row.order_id, "amountCents": row.amount_cents, "status": word}
    assert w.feed(row.conversation_id)[1:] == [(2, "refund.settled", data, None)]
    # Recorded again (the sweep run twice, a second event): the row is settled, nothing more is announced.
    w.ledger().record(row, Outcome(outcome, "re_1", outcome.lower()), "t", By("payment-sweep", announce=True))  # type: ignore[arg-type]
    assert len(w.feed(row.conversation_id)) == 2


def test_a_direct_refunds_late_failure_is_announced_when_asked(w: World) -> None:
    row = w.ledger().record(w.direct(), Outcome("SUCCEEDED", "re_1", "succeeded"), "t1", By("customer-7"))
    w.ledger().fail_late(row, "re_1", "expired_or_canceled_card", "t2", By("stripe-webhook", announce=True))
    data = {"orderId": row.order_id, "amountCents": row.amount_cents, "status": "FAILED"}
    assert w.feed(row.conversation_id) == [(1, "refund.settled", data, None)]


def test_a_redelivered_change_is_a_duplicate_and_announces_nothing(w: World) -> None:
    """The webhook's dedupe item exists already (the change was applied): `Duplicate`, nothing written."""
    row = w.direct()
    dedupe = put_new(TABLES["CUSTOMER_DATA_TABLE"], {"customer_id": CUSTOMER, "sk": "WEBHOOK#re_1#succeeded"}, "sk")
    w.ledger().record(
        row, Outcome("SUCCEEDED", "re_1", "succeeded"), "t", By("stripe-webhook", "evt_1", [dedupe], announce=True)
    )
    with pytest.raises(Duplicate):
        w.ledger().record(
            row, Outcome("SUCCEEDED", "re_1", "succeeded"), "t", By("stripe-webhook", "evt_1", [dedupe], announce=True)
        )
    assert [n for n, *_ in w.feed(row.conversation_id)] == [1]


def test_a_counter_race_is_retried_and_never_read_as_a_duplicate(w: World) -> None:
    """Another notification took the number: written again with the next one (the dedupe item once, with it)."""
    row = w.direct()
    dedupe = put_new(TABLES["CUSTOMER_DATA_TABLE"], {"customer_id": CUSTOMER, "sk": "WEBHOOK#re_1#succeeded"}, "sk")
    racing = Interposed(w.ddb, lambda: w.earlier(row.conversation_id))
    after = w.ledger(racing).record(
        row, Outcome("SUCCEEDED", "re_1", "succeeded"), "t", By("stripe-webhook", "evt_1", [dedupe], announce=True)
    )
    assert after.status == "SUCCEEDED"
    assert [(n, t) for n, t, _, _ in w.feed(row.conversation_id)] == [(1, "turn.failed"), (2, "refund.settled")]


def test_superseded_while_the_counter_moved_is_not_a_duplicate(w: World) -> None:
    """Another writer settled the row and another notification took the number, both before our transaction:
    the counter's failed condition is not the caller's dedupe item, so this is a superseded write (the row as
    it is comes back, the call audited), not `Duplicate` — and the one settlement stays announced once."""
    row = w.direct()
    dedupe = put_new(TABLES["CUSTOMER_DATA_TABLE"], {"customer_id": CUSTOMER, "sk": "WEBHOOK#re_1#failed"}, "sk")

    def meanwhile() -> None:
        w.ledger().record(row, Outcome("SUCCEEDED", "re_1", "succeeded"), "t0", By("payment-sweep", announce=True))

    racing = Interposed(w.ddb, meanwhile)
    after = w.ledger(racing).record(
        row, Outcome("FAILED", "re_1", "failed", "x"), "t1", By("stripe-webhook", "evt_1", [dedupe], announce=True)
    )
    assert after.status == "SUCCEEDED"
    assert [(t, d["status"]) for _, t, d, _ in w.feed(row.conversation_id)] == [("refund.settled", "REFUNDED")]


def test_without_a_conversations_table_nothing_is_announced(w: World) -> None:
    c = TABLES
    ledger = RefundLedger(w.ddb, c["CUSTOMER_DATA_TABLE"], c["APPROVALS_TABLE"], c["AUDIT_TABLE"])
    row = w.settling()
    ledger.record(row, Outcome("SUCCEEDED", "re_1", "succeeded"), "t", By("refund-flow", announce=True))
    assert w.feed(row.conversation_id) == []
    assert w.ledger().get(CUSTOMER, approved_refund_sk(row.approval_id)).status == "SUCCEEDED"  # type: ignore[union-attr]
