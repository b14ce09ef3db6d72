"""request_refund: the only tool that moves money, and the code (not the model) decides how.

The tool is its declaration: the input the model may give, what the model is told, and the call handed to
the refunds package (refunds/decide.py: a call's recorded answer found by its keys, eligibility, the threshold
rule, a direct refund or an approval request). A refusal comes back as the tool's error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from support_agent.refunds import OrderNotFound, RefundDesk, RefundRefused, RefundSettler, RefundWriter, streams_of
from support_agent.store.customer_data import CustomerDataStore
from support_agent.tools.orders import not_found
from support_agent.tools.registry import Tool, ToolContext, ToolError

DESCRIPTION = (
    "Request a refund on one of the signed-in customer's delivered or shipped orders, in cents, "
    "never more than the order's refundable amount (see lookup_order). Small refunds go to the "
    "payment provider at once (status REFUNDED with a refund_id, or REFUND_IN_PROGRESS while the "
    "provider completes it); larger ones wait for a support lead (status PENDING_APPROVAL with an "
    "approval_id). Only call it when the customer asked for a refund."
)


class RequestRefundInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: int = Field(..., ge=1, le=2_147_483_647, strict=True, description="The numeric order id.")
    amount_cents: int = Field(
        ..., ge=1, le=100_000_000, strict=True, description="Amount to refund in minor units (cents)."
    )
    reason: str = Field(..., min_length=1, max_length=500, description="Why the customer wants a refund.")


def refund_tools(
    store: CustomerDataStore,
    writer: RefundWriter,
    settler: RefundSettler,
    enqueue_approval: Callable[[str], None],
    threshold_cents: int,
) -> list[Tool[Any]]:
    desk = RefundDesk(store, writer, settler, enqueue_approval, threshold_cents)

    def request_refund(args: RequestRefundInput, ctx: ToolContext) -> dict[str, Any]:
        try:
            return desk.request(ctx, args.order_id, args.amount_cents, args.reason)
        except OrderNotFound as refused:
            raise not_found(refused.order_id) from None
        except RefundRefused as refused:
            raise ToolError(str(refused)) from None

    return [
        Tool(
            "request_refund",
            DESCRIPTION,
            RequestRefundInput,
            request_refund,
            recorded=desk.recorded,
            streams=streams_of,  # the approval, or the direct refund's key: what the answer says was written
        )
    ]
