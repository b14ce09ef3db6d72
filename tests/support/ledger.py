"""Ledger rows for unit tests of the money writes."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from support_agent.refunds.ledger_row import LedgerRow
from support_agent.refunds.requests import RefundRequest


def direct_row(r: RefundRequest, provider: str = "none") -> LedgerRow:
    """The REQUESTED row a direct refund of ``r`` writes first."""
    return LedgerRow(
        customer_id=r.customer_id,
        sk=r.request_sk,
        kind="direct",
        refund_key=f"{r.conversation_id}:1:{r.tool_use_id}",
        order_id=r.order_id,
        amount_cents=r.amount_cents,
        currency=r.currency,
        payment_intent=r.payment_intent,
        status="REQUESTED",
        attempt=1,
        provider=provider,
        conversation_id=r.conversation_id,
        tool_use_id=r.tool_use_id,
    )


def ledger_item(row: LedgerRow) -> dict[str, Any]:
    """``row`` as DynamoDB holds it."""
    item = {k: v for k, v in asdict(row).items() if k != "extra" and v != ""}
    return item
