"""A PENDING approval written the way the refund tool writes one: an order, then one transaction that
reserves the amount on it, records the request and opens the approval."""

from __future__ import annotations

from typing import Any

from devstack.seed import put_order
from support_agent.ids import new_approval_id
from support_agent.refunds.requests import RefundWriter
from tests.support.ledger import tool_request


def put_pending_approval(
    ddb: Any, env: dict[str, str], customer_id: int, order_id: int, amount_cents: int, now: str, reason: str
) -> str:
    """A fresh DELIVERED order of ``amount_cents`` with all of it reserved by a new PENDING approval."""
    put_order(ddb, env["CUSTOMER_DATA_TABLE"], customer_id, order_id, amount_cents)
    approval_id = new_approval_id()
    writer = RefundWriter(ddb, env["CUSTOMER_DATA_TABLE"], env["APPROVALS_TABLE"], env["AUDIT_TABLE"])
    request = tool_request(customer_id, order_id, amount_cents, now, reason=reason)
    writer.reserve(request, approval_id, {"status": "PENDING_APPROVAL", "approval_id": approval_id})
    return approval_id
