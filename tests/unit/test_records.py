"""Typed records (store/records.py): one declaration reads an item, writes one and names an update's attributes."""

from __future__ import annotations

from typing import Any

import pytest

from support_agent.api import responses
from support_agent.handoffs.brief import brief
from support_agent.refunds.ledger_row import LedgerRow
from support_agent.store.approvals import Approval
from support_agent.store.audit import AuditRecord
from support_agent.store.customer_data import Order
from support_agent.store.handoffs import Handoff
from support_agent.store.notifications import Notification
from support_agent.store.records import BadItem
from support_agent.store.turns import Turn
from tests.support.approval_items import handoff_item

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
    ticket = Handoff.from_item(handoff_item())
    assert (ticket.handoff_id, responses.Handoff.of(ticket, brief=brief(ticket, [], [])).closedBy) == ("hof_1", None)
    order = Order.from_item(
        {"customer_id": 7, "sk": "ORDER#1", "order_id": 1, "status": "DELIVERED", "total_cents": 5, "currency": "USD"}
    )
    assert (order.available_cents, order.items) == (0, [])
    row = AuditRecord("conv_1", "tool_call", "customer-7", "ok", None, "t", input={"a": 1})
    stored = row.item()
    assert stored["input"] == '{"a":1}' and "customer_id" not in stored
    read = AuditRecord.from_item({**stored, "n": 3, "v": 1})
    assert (read.input, read.customer_id, read.n, read.extra) == ({"a": 1}, None, 3, {"v": 1})


def test_a_turn_is_stored_under_its_own_attribute_names_and_its_answer_compressed() -> None:
    turn = Turn(
        turn_id="turn_01J0000000000000000000000",
        conversation_id="conv_1",
        customer_id=7,
        status="completed",
        fingerprint="f",
        created_at="t",
        running_until=60,
        response_status=200,
        response={"reply": "hello", "iterations": 1},
        message="where is my order?",
        carried={"iterations": 2},
    )
    item = turn.item()
    assert (item["conversation"], item["message_text"], item["reply_status"]) == ("conv_1", "where is my order?", 200)
    assert isinstance(item["reply_body"], bytes) and isinstance(item["carried"], bytes)  # zlib-compressed JSON
    assert not {"conversation_id", "message", "response", "restarts", "announced", "idempotency_key"} & set(item)
    key = {"conversation_id": "turn#conv_1", "seq": 1}  # the key is no field: read, kept apart, not written back
    read = Turn.from_item({**key, **item})
    assert read == turn and read.extra == key
    erased = Turn.from_item({k: v for k, v in item.items() if k not in ("message_text", "reply_body", "carried")})
    assert (erased.message, erased.response, erased.carried) == (None, None, None)
    with pytest.raises(BadItem, match="status"):
        Turn.from_item({**item, "status": "paused"})


def test_a_projection_names_stored_attributes_through_placeholders() -> None:
    expression, names = Turn.projection("status", "message", "response")
    assert expression == "#p0, #p1, #p2"
    assert names == {"#p0": "status", "#p1": "message_text", "#p2": "reply_body"}
    with pytest.raises(ValueError, match="reply"):
        Turn.projection("reply")  # the stored name is no field's name
    _, attributes, _ = Turn.assign({"message": "x"})
    assert attributes == {"#f0": "message_text"}


def test_a_notification_is_numbered_by_its_key_and_its_data_is_json() -> None:
    note = Notification(
        conversation_id="conv_1",
        type="approval.decided",
        at="t",
        data={"approvalId": "apr_1", "status": "REFUNDED"},
        turn_id=None,
        n=3,
    )
    item = note.item()
    assert (item["conversation"], item["seq"]) == ("conv_1", 3)
    assert item["data"] == '{"approvalId":"apr_1","status":"REFUNDED"}'
    assert Notification.from_item({**item, "conversation_id": "note#conv_1"}) == note
    erased = Notification.from_item({k: v for k, v in item.items() if k != "data"})
    assert erased.data == {} and erased.n == 3


def test_every_lead_body_is_its_record_field_by_field() -> None:
    """``of`` names each model field's record attribute; a field no record has fails here, not in a lead's hands."""
    ticket = Handoff.from_item(handoff_item(status="CLOSED", closed_by="lead-1", closed_at="u", closed_as="closed"))
    assert responses.Handoff.of(ticket, brief=brief(ticket, [], [])).model_dump() == {
        "handoffId": "hof_1",
        "status": "CLOSED",
        "customerId": 7,
        "conversationId": None,
        "reason": "",  # the record's default
        "createdAt": "t",
        "assignee": None,
        "assigneeName": None,
        "assignedAt": None,
        "closedBy": "lead-1",
        "closedAt": "u",
        "closedAs": "closed",
        "brief": {"customerId": 7, "reason": "", "orders": [], "invoices": [], "refunds": [], "lastMessages": []},
    }
    row = AuditRecord("conv_1", "tool_call", "customer-7", "ok", 7, "t", tool="lookup_order", refund_key="apr_1")
    body = responses.AuditRecord.of(row)
    assert (body.eventId, body.refundKey, body.customerId, body.tool) == (row.event_id, "apr_1", 7, "lookup_order")

    class Report:  # an erasure report's shape, one attribute short
        customer_id, conversations, messages, skipped, complete = 7, 1, 2, [], True

    with pytest.raises(AttributeError, match="audit_event_id"):
        responses.ErasureResult.of(Report())
