"""request_refund as a declared action: today's RefundDesk (refunds/decide.py) under the policy's rule.

The rule gives the statuses a refund may be made in (delivered or shipped by default), the refund window (none by
default) and the threshold above which a lead decides; with those defaults every answer is today's. Without
confirmation (the default) a call executes at once, as before; a policy that asks for confirmation makes it a
proposal, whose refund is keyed by the proposal's own call keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from support_agent.actions.declaration import Action, Call, Effect, Refused
from support_agent.clock import parse_iso
from support_agent.policy.model import AppliedPolicy
from support_agent.refunds.decide import RefundDesk, RefundRefused, RefundTerms, status_words, streams_of
from support_agent.store.customer_data import Order
from support_agent.store.proposals import ProposalItem

NAME = "request_refund"
DESCRIPTION = (
    "Request a refund on one of the signed-in customer's delivered or shipped orders, in cents, "
    "never more than the order's refundable amount (see lookup_order). Small refunds go to the "
    "payment provider at once (status REFUNDED with a refund_id, or REFUND_IN_PROGRESS while the "
    "provider completes it); larger ones wait for a support lead (status PENDING_APPROVAL with an "
    "approval_id). Only call it when the customer asked for a refund."
)
VOCABULARY = {
    "REFUNDED": "The refund was made to the original payment.",
    "REFUND_IN_PROGRESS": "The payment provider has the refund and will complete it shortly.",
    "PENDING_APPROVAL": "A support lead decides this refund; the customer will be told the outcome.",
    "FAILED": "The payment provider refused the refund; nothing was refunded.",
}


class RequestRefundInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: int = Field(..., ge=1, le=2_147_483_647, strict=True, description="The numeric order id.")
    amount_cents: int = Field(
        ..., ge=1, le=100_000_000, strict=True, description="Amount to refund in minor units (cents)."
    )
    reason: str = Field(..., min_length=1, max_length=500, description="Why the customer wants a refund.")


def outside_window(order: Order, applied: AppliedPolicy, now: datetime) -> str | None:
    if applied.policy.within_refund_window(order.placed_at, now):
        return None
    days = applied.policy.refund_window_days
    return f"order {order.order_id} was placed more than {days} days ago; it is past the refund window"


def refund_eligibility(order: Order, args: Any, applied: AppliedPolicy, now: datetime) -> str | None:
    """The rule's statuses, the refund window, and what is left to refund (the desk checks them again, writing)."""
    rule = applied.policy.rule(NAME)
    if order.status not in rule.statuses:
        words = status_words(rule.statuses)
        return f"order {order.order_id} is {order.status}; only {words} orders can be refunded"
    late = outside_window(order, applied, now)
    if late:
        return late
    if args.amount_cents > order.available_cents:
        return (
            f"order {order.order_id} has {order.available_cents} cents left to refund; {args.amount_cents} is too much"
        )
    return None


def money(cents: int, currency: str) -> str:
    return f"{cents / 100:.2f} {currency}"


def refund_action(desk: RefundDesk, input_model: type[RequestRefundInput] = RequestRefundInput) -> Action[Any]:
    def terms(applied: AppliedPolicy, now: str) -> RefundTerms:
        rule = applied.policy.rule(NAME)
        windowed = applied.policy.refund_window_days is not None  # no window (the default): nothing to compare
        return RefundTerms(
            statuses=rule.statuses,
            threshold_cents=int(rule.approval_threshold_cents or 0),
            policy_version=applied.version,
            refusal=(lambda order: outside_window(order, applied, parse_iso(now))) if windowed else None,
        )

    def execute_now(args: Any, call: Call, applied: AppliedPolicy) -> dict[str, Any]:
        try:
            return desk.request(call, args.order_id, args.amount_cents, args.reason, terms(applied, call.now))
        except RefundRefused as refused:
            raise Refused(str(refused)) from None

    def execute(item: ProposalItem, args: Any, call: Call) -> Effect:
        kept = item.terms or {}
        confirmed = RefundTerms(
            statuses=tuple(kept.get("statuses") or ("DELIVERED", "SHIPPED")),
            threshold_cents=int(kept.get("threshold_cents") or 0),
            policy_version=item.decided_policy_version,
        )
        try:
            answer = desk.request(call, args.order_id, args.amount_cents, args.reason, confirmed)
        except RefundRefused as refused:
            raise Refused(str(refused)) from None
        return Effect(answer, streams=streams_of(answer, call))

    def summary(order: Order, args: Any) -> str:
        return f"Refund {money(args.amount_cents, order.currency)} on order {order.order_id} ({args.reason})."

    def streams(answer: Mapping[str, Any], call: Call) -> Any:
        return streams_of(answer, call)

    return Action(
        name=NAME,
        description=DESCRIPTION,
        input_model=input_model,
        rule=NAME,
        eligible=refund_eligibility,
        summary=summary,
        execute=execute,
        audit_stream="refund#<refund key> (direct) or approval#<approval id> (a lead decides)",
        vocabulary=VOCABULARY,
        execute_now=execute_now,
        recorded=desk.recorded,
        streams=streams,
    )
