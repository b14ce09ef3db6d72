"""A refund tool call's request and the ledger row its direct refund writes first, as the tool builds them, for
tests of the money writes."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from support_agent.ids import new_conversation_id
from support_agent.refunds import keys as refund_keys
from support_agent.refunds.ledger_row import LedgerRow
from support_agent.refunds.requests import RefundRequest

# What a direct refund's first ledger row takes from its request, unchanged.
CARRIED = ("customer_id", "order_id", "amount_cents", "currency", "payment_intent", "conversation_id", "tool_use_id")


def tool_request(
    customer_id: int,
    order_id: int,
    amount_cents: int,
    now: str,
    *,
    total_cents: int | None = None,
    reason: str = "arrived broken",
    payment_intent: str = "",
    conversation_id: str | None = None,
    tool_use_id: str | None = None,
    request_id: str | None = None,
) -> RefundRequest:
    """The customer's request of ``amount_cents`` of an order (of ``total_cents``, by default that amount), made
    by the first call of a conversation (a new one by default): tool_use ``toolu_<order>``, request ``req_<order>``."""
    conversation_id = conversation_id or new_conversation_id()
    tool_use_id = tool_use_id or f"toolu_{order_id}"
    return RefundRequest(
        customer_id=customer_id,
        order_id=order_id,
        total_cents=total_cents or amount_cents,
        amount_cents=amount_cents,
        currency="USD",
        reason=reason,
        request_sk=refund_keys.request_sk(conversation_id, 1, tool_use_id),
        conversation_id=conversation_id,
        tool_use_id=tool_use_id,
        actor=f"customer-{customer_id}",
        request_id=request_id or f"req_{order_id}",
        now=now,
        payment_intent=payment_intent,
    )


def direct_row(r: RefundRequest, provider: str = "none") -> LedgerRow:
    """The REQUESTED row a direct refund of ``r`` writes first: the request's own fields, its call's refund key."""
    return LedgerRow(
        sk=r.request_sk,
        kind="direct",
        refund_key=refund_keys.direct_refund_key(r.conversation_id, 1, r.tool_use_id),
        status="REQUESTED",
        attempt=1,
        provider=provider,
        **{name: getattr(r, name) for name in CARRIED},
    )


def ledger_item(row: LedgerRow) -> dict[str, Any]:
    """``row`` as DynamoDB holds it."""
    item = {k: v for k, v in asdict(row).items() if k != "extra" and v != ""}
    return item
