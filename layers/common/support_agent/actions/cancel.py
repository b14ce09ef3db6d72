"""cancel_order: an order not yet shipped, cancelled, and what was paid refunded through the refund path, once.

Only in the statuses the policy's ``cancel_order`` rule allows (PROCESSING by default), never while a refund of
the order waits for a lead. Confirmed, it runs in two steps keyed by the proposal, each conditional, so a crash
at any point and a confirm again resumes where it stopped:

1. the order -> CANCELLED (conditioned on its status still allowing it and on its money being as read), naming
   the proposal (``cancelled_by``), and the proposal's ``step`` and ``refund_cents`` (what was paid and not yet
   refunded: an order with partial refunds refunds the rest), in one transaction with its audit row;
2. that amount refunded by the RefundDesk (the same ledger, provider and lead threshold as a refund), with the
   proposal's own call keys: one request row and one refund key for the cancellation, found again on a resume.
   The refund path accepts a CANCELLED order only for the proposal that cancelled it. Over the cancel rule's
   threshold the refund waits for a lead (PENDING_APPROVAL, the approval's ``action`` "cancel_order"); a rejection
   leaves the order CANCELLED, the refund REJECTED, and opens a hand-off (approvals/decisions.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from support_agent.actions.declaration import Action, Call, Effect, Refused, not_found
from support_agent.actions.refund import money
from support_agent.policy.model import AppliedPolicy
from support_agent.refunds.decide import RefundDesk, RefundRefused, RefundTerms, status_words, streams_of
from support_agent.store.audit import Streams
from support_agent.store.customer_data import CustomerDataStore, Order, order_key, status_in
from support_agent.store.dynamo import to_values
from support_agent.store.proposals import ItemRefused, ProposalItem, ProposalStore

NAME = "cancel_order"
CANCELLED = "CANCELLED"
DESCRIPTION = (
    "Cancel one of the signed-in customer's orders that has not shipped yet (see lookup_order), refunding what "
    "was paid. Nothing happens when you call it: it answers PROPOSED with what will happen and until when, and "
    "the customer confirms or declines with the buttons shown; never tell the customer it is done before they "
    "confirm. An order that cannot be cancelled is refused with the reason. Only call it when the customer asked "
    "to cancel."
)
VOCABULARY = {
    "CANCELLED": "The order is cancelled; its refund is as the refund's status says.",
    "REFUSED": "The order could not be cancelled; nothing was done.",
}


class CancelOrderInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: int = Field(..., ge=1, le=2_147_483_647, strict=True, description="The numeric order id.")
    reason: str = Field(..., min_length=1, max_length=500, description="Why the customer wants to cancel it.")


def cancel_eligibility(order: Order, args: Any, applied: AppliedPolicy, now: datetime) -> str | None:
    rule = applied.policy.rule(NAME)
    if order.status not in rule.statuses:
        words = status_words(rule.statuses)
        return f"order {order.order_id} is {order.status}; only {words} orders can be cancelled"
    if order.reserved_cents:
        return (
            f"order {order.order_id} has a refund waiting for a support lead; it can be cancelled once that is decided"
        )
    return None


@dataclass(frozen=True)
class Cancellation:
    """The confirmed cancellation's steps (module docstring)."""

    proposals: ProposalStore
    customer_data: CustomerDataStore
    desk: RefundDesk

    def eligible(self, order: Order, args: Any, applied: AppliedPolicy, now: datetime) -> str | None:
        why = cancel_eligibility(order, args, applied, now)
        at_provider = self.desk.settler.provider.name != "none"
        if why is None and order.available_cents and at_provider and not order.payment_intent:
            return f"order {order.order_id} has no card payment on file to refund; offer the customer a support lead"
        return why

    def execute(self, item: ProposalItem, args: Any, call: Call) -> Effect:
        order = self.customer_data.get_order(item.customer_id, item.order_id)
        if order is None:
            raise not_found(item.order_id)
        if item.step != "order_cancelled":
            item = self._cancel(item, order, call)
        amount = int(item.refund_cents or 0)
        outcome: dict[str, Any] = {"status": CANCELLED, "order_id": item.order_id}
        if amount <= 0:
            return Effect({**outcome, "refund": None, "message": "The order is cancelled; nothing was left to refund."})
        terms = RefundTerms(
            statuses=(CANCELLED,),
            threshold_cents=int((item.terms or {}).get("threshold_cents") or 0),
            policy_version=item.decided_policy_version,
            cancelled_by=item.proposal_id,
            action=NAME,
        )
        try:
            answer = self.desk.request(call, item.order_id, amount, "order cancelled", terms)
        except RefundRefused as refused:  # the order is cancelled: the refund's refusal is its outcome
            refund = {"status": "NOT_REFUNDED", "amount_cents": amount, "error": str(refused)}
            return Effect({**outcome, "refund": refund, "message": "The order is cancelled; the refund was not made."})
        shown = {
            k: answer[k] for k in ("status", "amount_cents", "currency", "refund_id", "approval_id") if k in answer
        }
        words = VOCABULARY_REFUND.get(str(answer.get("status")), "")
        return Effect(
            {**outcome, "refund": shown, "message": f"The order is cancelled. {words}"}, streams=_streams(answer, call)
        )

    def _cancel(self, item: ProposalItem, order: Order, call: Call) -> ProposalItem:
        """Step 1: the order CANCELLED and the amount to refund, with the proposal's step, in one transaction."""
        allowed, names = status_in(item.statuses)
        update = {
            "Update": {
                "TableName": self.customer_data.table,
                "Key": order_key(item.customer_id, item.order_id),
                "UpdateExpression": "SET #st = :cancelled, cancelled_by = :pid, cancelled_at = :now",
                "ConditionExpression": f"{allowed} AND reserved_cents = :zero"
                " AND available_cents = :available AND attribute_not_exists(cancelled_by)",
                "ExpressionAttributeNames": {"#st": "status"},
                "ExpressionAttributeValues": to_values(
                    {
                        **names,
                        ":cancelled": CANCELLED,
                        ":pid": item.proposal_id,
                        ":now": call.now,
                        ":zero": 0,
                        ":available": order.available_cents,
                    }
                ),
            }
        }
        output = {"order_id": order.order_id, "from_status": order.status, "refund_cents": order.available_cents}
        row = item.row(
            "order_cancelled",
            call.principal.sub,
            CANCELLED,
            call.now,
            output,
            policy_version=item.decided_policy_version,
        )
        sets = {"step": "order_cancelled", "refund_cents": order.available_cents, "updated_at": call.now}
        try:
            return self.proposals.move(item, sets, [row], extra=[update])
        except ItemRefused:
            now = self.customer_data.get_order(item.customer_id, item.order_id)
            status = now.status if now is not None else "gone"
            raise Refused(f"order {item.order_id} is {status} now; it can no longer be cancelled") from None


VOCABULARY_REFUND = {
    "REFUNDED": "The refund was made to the original payment.",
    "REFUND_IN_PROGRESS": "The refund is on its way to the original payment.",
    "PENDING_APPROVAL": "A support lead reviews the refund; the customer will be told the outcome.",
    "FAILED": "The payment provider refused the refund; nothing was refunded (offer a support teammate).",
}


def _streams(answer: dict[str, Any], call: Call) -> Streams:
    return streams_of(answer, call)


def cancel_action(cancellation: Cancellation) -> Action[Any]:
    def summary(order: Order, args: Any) -> str:
        refund = (
            f"refund {money(order.available_cents, order.currency)} to the original payment"
            if order.available_cents
            else "nothing is left to refund"
        )
        return f"Cancel order {order.order_id} and {refund}."

    return Action(
        name=NAME,
        description=DESCRIPTION,
        input_model=CancelOrderInput,
        rule=NAME,
        eligible=cancellation.eligible,
        summary=summary,
        execute=cancellation.execute,
        audit_stream="proposal#<proposal id>; its refund's refund#<key> or approval#<id>",
        vocabulary=VOCABULARY,
    )
