"""request_refund: the only tool that moves money, and the code (not the model) decides how.

A call is idempotent by ``(conversation_id, seq, tool_use_id)``: if it already ran (say, before a
crash) the recorded result is returned and nothing is written again. The refund row is found by
that key alone, so a call whose stored input was erased, or no longer validates, still finds it.

A direct refund is its ledger row (store/ledger.py): written REQUESTED with the reservation, then the
provider is asked (payments/settle.py), then the outcome recorded. A call found REQUESTED or SETTLING
(a crash between those steps, or an answer still unknown) is asked again with the same attempt key:
the provider answers the first attempt's outcome, never a second refund.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from support_agent import observability as obs
from support_agent.ids import new_approval_id
from support_agent.payments.settle import RefundSettler
from support_agent.refunds.keys import direct_refund_key, request_sk
from support_agent.store.customer_data import REFUNDABLE_STATUSES, CustomerDataStore
from support_agent.store.ledger import UNSETTLED, LedgerRow
from support_agent.store.refunds import HeldExists, RefundRace, RefundRequest, RefundWriter
from support_agent.tools.orders import not_found
from support_agent.tools.registry import Tool, ToolContext, ToolError

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
SIZE_MESSAGE = "Refunds of this size need a support lead's approval; the customer will be told the outcome."
HELD_MESSAGE = (
    "Refund requests made without an idempotency key wait for a support lead's approval; "
    "the customer will be told the outcome."
)


class RequestRefundInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: int = Field(..., ge=1, le=2_147_483_647, strict=True, description="The numeric order id.")
    amount_cents: int = Field(
        ..., ge=1, le=100_000_000, strict=True, description="Amount to refund in minor units (cents)."
    )
    reason: str = Field(..., min_length=1, max_length=500, description="Why the customer wants a refund.")


def direct_answer(row: LedgerRow) -> dict[str, Any]:
    """The tool's answer for a direct refund, from its ledger row (the customers' vocabulary)."""
    money = {"order_id": row.order_id, "amount_cents": row.amount_cents, "currency": row.currency}
    if row.status == "SUCCEEDED":
        return {"status": "REFUNDED", "refund_id": row.refund_id, **money}
    if row.status == "FAILED":
        return {
            "status": "FAILED",
            **money,
            "error": f"the payment provider refused this refund ({row.failure_code or 'refused'}); "
            "nothing was refunded and the amount is available again",
        }
    return {
        "status": "REFUND_IN_PROGRESS",
        **money,
        "message": "The refund has been sent to the payment provider and will complete shortly.",
    }


def refund_tools(
    store: CustomerDataStore,
    writer: RefundWriter,
    settler: RefundSettler,
    enqueue_approval: Callable[[str], None],
    threshold_cents: int,
) -> list[Tool[Any]]:
    provider = settler.provider.name

    def settle(row: LedgerRow, ctx: ToolContext) -> dict[str, Any]:
        settled = settler.settle(row, actor=ctx.principal.sub, request_id=ctx.request_id, deadline=ctx.deadline)
        if settled.row.status == "SUCCEEDED" and row.status != "SUCCEEDED":
            obs.emit(obs.REFUNDS_COMPLETED)
        return direct_answer(settled.row)

    def recorded(ctx: ToolContext) -> dict[str, Any] | None:
        item = store.get(ctx.customer_id, request_sk(ctx.conversation_id, ctx.seq, ctx.tool_use_id))
        if item is None:
            return None
        if item.get("kind") != "direct" or "refund_key" not in item:
            return dict(json.loads(item["result"]))  # an approval request (or a ledger-only row from before)
        row = LedgerRow.from_item(item)
        return settle(row, ctx) if row.status in UNSETTLED else direct_answer(row)

    def attempt(args: RequestRefundInput, ctx: ToolContext) -> dict[str, Any]:
        stale: str | None = None
        if ctx.held:  # an identical request still pending answers this one, before the order (it reserved) is read
            pending, stale = writer.held(ctx.customer_id, args.order_id, args.amount_cents)
            if pending is not None:
                return pending
        order = store.get_order(ctx.customer_id, args.order_id)
        if order is None:
            raise not_found(args.order_id)
        if order.status not in REFUNDABLE_STATUSES:
            raise ToolError(
                f"order {args.order_id} is {order.status}; only delivered or shipped orders can be refunded"
            )
        available = order.available_cents
        if args.amount_cents > available:
            raise ToolError(
                f"order {args.order_id} has {available} cents left to refund; {args.amount_cents} is too much"
            )
        intent = order.payment_intent
        if provider != "none" and not intent:
            raise ToolError(
                f"order {args.order_id} has no card payment on file to refund; offer the customer a support lead"
            )
        request = RefundRequest(
            customer_id=ctx.customer_id,
            order_id=args.order_id,
            total_cents=order.total_cents,
            amount_cents=args.amount_cents,
            currency=order.currency,
            reason=args.reason,
            request_sk=request_sk(ctx.conversation_id, ctx.seq, ctx.tool_use_id),
            conversation_id=ctx.owner_conversation_id,
            tool_use_id=ctx.tool_use_id,
            actor=ctx.principal.sub,
            request_id=ctx.request_id,
            now=ctx.now,
            payment_intent=intent,
            fence=ctx.fence,
        )
        committed = order.refunded_cents + order.reserved_cents
        money = {"order_id": args.order_id, "amount_cents": args.amount_cents, "currency": order.currency}
        if not ctx.held and committed + args.amount_cents <= threshold_cents:
            row = LedgerRow(
                customer_id=ctx.customer_id,
                sk=request.request_sk,
                kind="direct",
                refund_key=direct_refund_key(ctx.conversation_id, ctx.seq, ctx.tool_use_id),
                order_id=args.order_id,
                amount_cents=args.amount_cents,
                currency=order.currency,
                payment_intent=intent,
                status="REQUESTED",
                attempt=1,
                provider=provider,
                conversation_id=ctx.owner_conversation_id,
                tool_use_id=ctx.tool_use_id,
            )
            return settle(writer.direct(request, threshold_cents, row), ctx)
        approval_id = new_approval_id()
        result = {
            "status": "PENDING_APPROVAL",
            "approval_id": approval_id,
            **money,
            "message": HELD_MESSAGE if ctx.held else SIZE_MESSAGE,
        }
        try:
            writer.reserve(request, approval_id, result, held=ctx.held, replaces=stale)
        except HeldExists as exists:  # a concurrent identical held request won: its approval is the answer
            return exists.result
        obs.emit(obs.APPROVALS_CREATED)
        try:
            enqueue_approval(approval_id)
        except Exception:  # the sweep re-enqueues approvals that were never notified
            logger.exception("approval enqueue failed", extra={"approval_id": approval_id})
        return result

    def request_refund(args: RequestRefundInput, ctx: ToolContext) -> dict[str, Any]:
        for _ in range(MAX_ATTEMPTS):
            prior = recorded(ctx)
            if prior is not None:
                return prior
            try:
                return attempt(args, ctx)
            except RefundRace:
                continue  # the order changed under us, or this call was recorded meanwhile: decide again
        raise ToolError(f"order {args.order_id} is changing right now; try the refund again in a moment")

    return [
        Tool(
            "request_refund",
            "Request a refund on one of the signed-in customer's delivered or shipped orders, in cents, "
            "never more than the order's refundable amount (see lookup_order). Small refunds go to the "
            "payment provider at once (status REFUNDED with a refund_id, or REFUND_IN_PROGRESS while the "
            "provider completes it); larger ones wait for a support lead (status PENDING_APPROVAL with an "
            "approval_id). Only call it when the customer asked for a refund.",
            RequestRefundInput,
            request_refund,
            recorded=recorded,
        )
    ]
