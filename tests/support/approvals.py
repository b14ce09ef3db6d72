"""A PENDING approval written the way the refund tool writes one: an order, then one transaction that
reserves the amount on it, records the request and opens the approval."""

from __future__ import annotations

from typing import Any

from devstack.seed import order_item
from support_agent.ids import new_approval_id, new_conversation_id
from support_agent.refunds.requests import RefundRequest, RefundWriter
from support_agent.store.dynamo import to_item


def put_pending_approval(
    ddb: Any, env: dict[str, str], customer_id: int, order_id: int, amount_cents: int, now: str, reason: str
) -> str:
    """A fresh DELIVERED order of ``amount_cents`` with all of it reserved by a new PENDING approval."""
    ddb.put_item(
        TableName=env["CUSTOMER_DATA_TABLE"],
        Item=to_item(order_item(customer_id, order_id, amount_cents)),
    )
    approval_id = new_approval_id()
    conversation_id = new_conversation_id()
    writer = RefundWriter(ddb, env["CUSTOMER_DATA_TABLE"], env["APPROVALS_TABLE"], env["AUDIT_TABLE"])
    request = RefundRequest(
        customer_id=customer_id,
        order_id=order_id,
        total_cents=amount_cents,
        amount_cents=amount_cents,
        currency="USD",
        reason=reason,
        request_sk=f"REFUND#{conversation_id}#1#toolu_{order_id}",
        conversation_id=conversation_id,
        tool_use_id=f"toolu_{order_id}",
        actor=f"customer-{customer_id}",
        request_id=f"req_{order_id}",
        now=now,
    )
    writer.reserve(request, approval_id, {"status": "PENDING_APPROVAL", "approval_id": approval_id})
    return approval_id
