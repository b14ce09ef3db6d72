"""Typed records (store/records.py): one declaration reads an item, writes one and names an update's attributes."""

from __future__ import annotations

from typing import Any

import pytest

from support_agent.api import responses
from support_agent.store.approvals import Approval
from support_agent.store.audit import AuditRecord
from support_agent.store.customer_data import Order
from support_agent.store.handoffs import Handoff
from support_agent.store.ledger import LedgerRow
from support_agent.store.records import BadItem

PENDING: dict[str, Any] = {
    "approval_id": "apr_1",
    "entity": "APPROVAL",
    "status": "PENDING",
    "customer_id": 7,
    "order_id": 1042,
    "amount_cents": 18_900,
    "currency": "USD",
    "reason": "damaged",
    "conversation_id": "conv_1",
    "tool_use_id": "toolu_1",
    "request_sk": "REFUND#conv_1#1#toolu_1",
    "requested_by": "customer-7",
    "created_at": "2030-01-01T00:00:00Z",
    "audit_n": 1,
    "audit_hash": "h1",
    "audit_event": "01J",
}


def test_an_item_read_and_written_back_is_the_same_item() -> None:
    approval = Approval.from_item(PENDING)
    assert approval.item() == PENDING and approval.extra == {}
    assert (approval.retries, approval.decided_by, approval.head.n) == (0, None, 1)  # absent: the defaults


def test_an_attribute_no_field_declares_is_kept_apart_and_never_written() -> None:
    approval = Approval.from_item({**PENDING, "legacy_flag": True})
    assert approval.extra == {"legacy_flag": True} and "legacy_flag" not in approval.item()


@pytest.mark.parametrize(
    ("item", "why"),
    [
        ({k: v for k, v in PENDING.items() if k != "amount_cents"}, "amount_cents is missing"),
        ({**PENDING, "status": "MAYBE"}, "status"),  # not one of ApprovalStatus
        ({**PENDING, "order_id": "x"}, "order_id"),
    ],
)
def test_an_item_that_is_not_a_record_of_its_kind_is_refused(item: dict[str, Any], why: str) -> None:
    with pytest.raises(BadItem, match=why):
        Approval.from_item(item)


def test_an_update_names_only_declared_fields() -> None:
    sets, names, values = Approval.assign({"decided_by": "lead-1", "decided_at": "t"})
    assert sets == ["#f0 = :f0", "#f1 = :f1"]
    assert (names, values) == ({"#f0": "decided_by", "#f1": "decided_at"}, {":f0": "lead-1", ":f1": "t"})
    with pytest.raises(ValueError, match="decided_bye"):
        Approval.assign({"decided_bye": "lead-1"})


def test_optional_defaults_are_not_stored() -> None:
    row = LedgerRow(
        customer_id=7,
        sk="REFUND#apr_1",
        kind="approved",
        refund_key="apr_1",
        order_id=1042,
        amount_cents=100,
        currency="USD",
        payment_intent="pi_1",
        status="REQUESTED",
        attempt=1,
        provider="stripe",
        approval_id="apr_1",
    )
    assert not {"conversation_id", "tool_use_id", "refund_id", "failure_code"} & set(row.item())
    assert LedgerRow.from_item(row.item()) == row


def test_the_leads_view_is_the_response_model_built_from_the_record() -> None:
    settled = Approval.from_item(
        {**PENDING, "status": "FAILED", "refund_provider": "stripe", "refund_status": "FAILED", "failure_error": "x"}
    )
    view = responses.Approval.of(settled).model_dump()
    assert (view["approvalId"], view["amountCents"], view["status"]) == ("apr_1", 18_900, "FAILED")
    assert view["refund"] == {
        "provider": "stripe",
        "refundId": None,
        "status": "FAILED",
        "failureReason": "x",
        "failedLateAt": None,
    }
    assert responses.Approval.of(Approval.from_item(PENDING)).refund is None


def test_hand_offs_orders_and_audit_rows_read_their_items() -> None:
    ticket = Handoff.from_item(
        {"approval_id": "hof_1", "entity": "HANDOFF", "status": "OPEN", "customer_id": 7, "created_at": "t"}
    )
    assert (ticket.handoff_id, responses.Handoff.of(ticket).closedBy) == ("hof_1", None)
    order = Order.from_item(
        {"customer_id": 7, "sk": "ORDER#1", "order_id": 1, "status": "DELIVERED", "total_cents": 5, "currency": "USD"}
    )
    assert (order.available_cents, order.items) == (0, [])
    row = AuditRecord("conv_1", "tool_call", "customer-7", "ok", None, "t", input={"a": 1})
    stored = row.item()
    assert stored["input"] == '{"a":1}' and "customer_id" not in stored
    read = AuditRecord.from_item({**stored, "n": 3, "v": 1})
    assert (read.input, read.customer_id, read.n, read.extra) == ({"a": 1}, None, 3, {"v": 1})
