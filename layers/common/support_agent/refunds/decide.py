"""A refund request, decided by the code (never the model): refused, refunded at once, or held for a lead.

A call is idempotent by its keys (the chat's ``(conversation_id, seq, tool_use_id)``, an MCP call's ``("mcp",
customer id, hashed key)``: refunds/keys.py): if it already ran (say, before a crash) the recorded result is
returned and nothing is written again. The refund row is found by that key alone, so a call whose stored input
was erased, or no longer validates, still finds it.

What a new call gets:

* refused (`RefundRefused`): the order is not the customer's, not in a status the policy allows refunds in (its
  ``request_refund`` rule: delivered or shipped by default; a cancellation's refund, only its own CANCELLED
  order), outside the rule's other terms (`RefundTerms.refusal`: the refund window), has less left to refund than
  asked, or (with a payment provider) no card payment to refund;
* a direct refund, when the call is not held and the order's ``refunded + reserved + amount`` stays within the
  threshold: its ledger row is written REQUESTED with the reservation (requests.py), then the provider is asked
  (settle.py), then the outcome recorded. A call found REQUESTED or SETTLING (a crash between those steps, or
  an answer still unknown) is asked again with the same attempt key: the provider answers the first attempt's
  outcome, never a second refund;
* else an approval request: a PENDING approval with the reservation, and the approval queued for a lead.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from support_agent import observability as obs
from support_agent.auth import Principal
from support_agent.ids import new_approval_id
from support_agent.messages import Deadline
from support_agent.refunds.keys import direct_refund_key, request_sk
from support_agent.refunds.ledger_row import UNSETTLED, LedgerRow
from support_agent.refunds.requests import HeldExists, RefundRace, RefundRequest, RefundWriter
from support_agent.refunds.settle import RefundSettler
from support_agent.store.audit import Streams
from support_agent.store.customer_data import CustomerDataStore, Order

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
SIZE_MESSAGE = "Refunds of this size need a support lead's approval; the customer will be told the outcome."
HELD_MESSAGE = (
    "Refund requests made without an idempotency key wait for a support lead's approval; "
    "the customer will be told the outcome."
)


class RefundRefused(Exception):
    """A refusal the caller can act on (the tool answers it as an error the model reads); nothing was written."""


class OrderNotFound(RefundRefused):
    """No such order for this customer (or another customer's: the same answer)."""

    def __init__(self, order_id: int) -> None:
        super().__init__(f"order {order_id} was not found for this customer")
        self.order_id = order_id


class RefundCall(Protocol):
    """The call a request comes with (a tool's `ToolContext` is one): who asks, its keys, and its limits."""

    @property
    def principal(self) -> Principal: ...
    @property
    def customer_id(self) -> int: ...
    @property
    def conversation_id(self) -> str: ...  # the keys' scope: a conversation id, or "mcp"
    @property
    def seq(self) -> int: ...
    @property
    def tool_use_id(self) -> str: ...
    @property
    def request_id(self) -> str: ...
    @property
    def now(self) -> str: ...
    @property
    def deadline(self) -> Deadline | None: ...
    @property
    def held(self) -> bool: ...  # any amount waits for a lead (an MCP call without an idempotency key)
    @property
    def fence(self) -> dict[str, Any] | None: ...  # a chat turn's lease check, in every money write
    @property
    def owner_conversation_id(self) -> str: ...  # the conversation told of decisions; "" for none


@dataclass(frozen=True)
class RefundTerms:
    """What the support policy says of one refund (actions/refund.py builds them from its rule; a cancellation's
    refund from the cancel rule, actions/cancel.py): the statuses it may be made in, the most refunded on one
    order without a lead, the version decided under, and any further refusal (the window), in the customers' words.
    ``cancelled_by``: a cancellation's refund, only on the order that proposal cancelled."""

    statuses: tuple[str, ...] = ("DELIVERED", "SHIPPED")
    threshold_cents: int = 5000
    policy_version: int | None = None
    refusal: Callable[[Order], str | None] | None = None
    cancelled_by: str = ""
    action: str = "request_refund"


def status_words(statuses: tuple[str, ...]) -> str:
    """("DELIVERED", "SHIPPED") -> "delivered or shipped": the statuses as the customer reads them."""
    words = [s.lower() for s in statuses]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def direct_answer(row: LedgerRow) -> dict[str, Any]:
    """The answer for a direct refund, from its ledger row (the customers' vocabulary)."""
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


def streams_of(answer: Mapping[str, Any], call: RefundCall) -> Streams:
    """The audit streams a request's answer (new or recorded) says it wrote, for the call's own row: an approval's
    (its id is its refund key too), or a direct refund's key (an answer naming its order); none for a refusal."""
    approval_id = answer.get("approval_id")
    if isinstance(approval_id, str):
        return Streams(approval_id=approval_id, refund_key=approval_id)
    if "order_id" in answer:
        return Streams(refund_key=direct_refund_key(call.conversation_id, call.seq, call.tool_use_id))
    return Streams()


@dataclass(frozen=True)
class RefundDesk:
    """Where a refund request is decided: ``threshold_cents`` is the most refunded (and reserved) on one order
    without a lead; ``enqueue_approval`` tells the leads of a new approval (the approval sweep re-sends any
    that was never told)."""

    store: CustomerDataStore
    writer: RefundWriter
    settler: RefundSettler
    enqueue_approval: Callable[[str], None]
    threshold_cents: int

    def request(
        self, call: RefundCall, order_id: int, amount_cents: int, reason: str, terms: RefundTerms | None = None
    ) -> dict[str, Any]:
        """The call's answer: recorded before, or decided now (module docstring); `RefundRefused` when refused.
        ``terms``: the policy's (default: today's statuses and this desk's threshold)."""
        terms = terms if terms is not None else RefundTerms(threshold_cents=self.threshold_cents)
        for _ in range(MAX_ATTEMPTS):
            prior = self.recorded(call)
            if prior is not None:
                return prior
            try:
                return self._attempt(call, order_id, amount_cents, reason, terms)
            except RefundRace:
                continue  # the order changed under us, or this call was recorded meanwhile: decide again
        raise RefundRefused(f"order {order_id} is changing right now; try the refund again in a moment")

    def recorded(self, call: RefundCall) -> dict[str, Any] | None:
        """What the call recorded if it ran before, found by its keys alone (an unsettled refund asked again)."""
        item = self.store.get(call.customer_id, request_sk(call.conversation_id, call.seq, call.tool_use_id))
        if item is None:
            return None
        version = {"policy_version": item["policy_version"]} if item.get("policy_version") is not None else {}
        if item.get("kind") != "direct" or "refund_key" not in item:
            # an approval request (or a ledger-only row from before)
            return {**json.loads(item["result"]), **version}
        row = LedgerRow.from_item(item)
        return {**(self._settle(row, call) if row.status in UNSETTLED else direct_answer(row)), **version}

    def _attempt(
        self, call: RefundCall, order_id: int, amount_cents: int, reason: str, terms: RefundTerms
    ) -> dict[str, Any]:
        stale: str | None = None
        if call.held:  # an identical request still pending answers this one, before the order (it reserved) is read
            pending, stale = self.writer.held(call.customer_id, order_id, amount_cents)
            if pending is not None:
                return pending
        order = self._refundable(call, order_id, amount_cents, terms)
        request = RefundRequest(
            customer_id=call.customer_id,
            order_id=order_id,
            total_cents=order.total_cents,
            amount_cents=amount_cents,
            currency=order.currency,
            reason=reason,
            request_sk=request_sk(call.conversation_id, call.seq, call.tool_use_id),
            conversation_id=call.owner_conversation_id,
            tool_use_id=call.tool_use_id,
            actor=call.principal.sub,
            request_id=call.request_id,
            now=call.now,
            payment_intent=order.payment_intent,
            fence=call.fence,
            statuses=terms.statuses,
            cancelled_by=terms.cancelled_by,
            policy_version=terms.policy_version,
            action=terms.action,
        )
        committed = order.refunded_cents + order.reserved_cents
        if not call.held and committed + amount_cents <= terms.threshold_cents:
            return self._direct(call, request, terms.threshold_cents)
        return self._for_approval(call, request, stale)

    def _refundable(self, call: RefundCall, order_id: int, amount_cents: int, terms: RefundTerms) -> Order:
        """The order, once it may be refunded ``amount_cents``; `RefundRefused` says why not."""
        order = self.store.get_order(call.customer_id, order_id)
        if order is None:
            raise OrderNotFound(order_id)
        if order.status not in terms.statuses or (terms.cancelled_by and order.cancelled_by != terms.cancelled_by):
            words = status_words(terms.statuses)
            raise RefundRefused(f"order {order_id} is {order.status}; only {words} orders can be refunded")
        why = terms.refusal(order) if terms.refusal is not None else None
        if why:
            raise RefundRefused(why)
        available = order.available_cents
        if amount_cents > available:
            raise RefundRefused(f"order {order_id} has {available} cents left to refund; {amount_cents} is too much")
        if self.settler.provider.name != "none" and not order.payment_intent:
            raise RefundRefused(
                f"order {order_id} has no card payment on file to refund; offer the customer a support lead"
            )
        return order

    def _direct(self, call: RefundCall, request: RefundRequest, threshold_cents: int) -> dict[str, Any]:
        """Within the threshold: the REQUESTED row with its reservation, then the provider asked."""
        row = LedgerRow(
            customer_id=call.customer_id,
            sk=request.request_sk,
            kind="direct",
            refund_key=direct_refund_key(call.conversation_id, call.seq, call.tool_use_id),
            order_id=request.order_id,
            amount_cents=request.amount_cents,
            currency=request.currency,
            payment_intent=request.payment_intent,
            status="REQUESTED",
            attempt=1,
            provider=self.settler.provider.name,
            conversation_id=call.owner_conversation_id,
            tool_use_id=call.tool_use_id,
            policy_version=request.policy_version,
        )
        return self._settle(self.writer.direct(request, threshold_cents, row), call)

    def _for_approval(self, call: RefundCall, request: RefundRequest, stale: str | None) -> dict[str, Any]:
        """Beyond the threshold, or held: a PENDING approval with its reservation, queued for a lead."""
        approval_id = new_approval_id()
        result = {
            "status": "PENDING_APPROVAL",
            "approval_id": approval_id,
            "order_id": request.order_id,
            "amount_cents": request.amount_cents,
            "currency": request.currency,
            "message": HELD_MESSAGE if call.held else SIZE_MESSAGE,
        }
        try:
            self.writer.reserve(request, approval_id, result, held=call.held, replaces=stale)
        except HeldExists as exists:  # a concurrent identical held request won: its approval is the answer
            return exists.result
        obs.emit(obs.APPROVALS_CREATED)
        try:
            self.enqueue_approval(approval_id)
        except Exception:  # the sweep re-enqueues approvals that were never notified
            logger.exception("approval enqueue failed", extra={"approval_id": approval_id})
        return result

    def _settle(self, row: LedgerRow, call: RefundCall) -> dict[str, Any]:
        settled = self.settler.settle(row, actor=call.principal.sub, request_id=call.request_id, deadline=call.deadline)
        if settled.row.status == "SUCCEEDED" and row.status != "SUCCEEDED":
            obs.emit(obs.REFUNDS_COMPLETED)
        return direct_answer(settled.row)
