"""The money side: payment intents, their refunds, and the one rule — never refund more than is left.

A refund counts against its payment intent unless it ``failed`` or was ``canceled`` (a pending refund
already holds its amount, as at Stripe). Refunds are kept in creation order; lists are newest first.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from devstack.simulated_stripe.wire import StripeError

REFUND_STATUSES = ("pending", "requires_action", "succeeded", "failed", "canceled")
SETTLED_STATUSES = ("succeeded", "failed", "canceled")
NOT_COUNTED = ("failed", "canceled")


class Clock:
    """Simulated seconds since the epoch: real time plus what tests ``advance``."""

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self._now, self._offset = now, 0.0

    def now(self) -> int:
        return int(self._now() + self._offset)

    def advance(self, seconds: float) -> None:
        self._offset += seconds

    def reset(self) -> None:
        """Real time again: what tests advanced is undone."""
        self._offset = 0.0


@dataclass
class PaymentIntent:
    id: str
    amount: int
    currency: str
    charge: str


@dataclass(frozen=True)
class RefundRequest:
    """The parameters of ``POST /v1/refunds`` once their shape was checked."""

    payment_intent: str | None
    charge: str | None
    amount: int | None
    currency: str | None
    reason: str | None
    metadata: dict[str, str] = field(default_factory=dict)


def _dollars(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def _copy(refund: dict[str, Any]) -> dict[str, Any]:
    """A copy callers may change: the stored refund only changes through the ledger."""
    return {**refund, "metadata": dict(refund["metadata"])}


class Ledger:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.new_refund_status = "succeeded"  # "pending": new refunds wait for ``settle``
        self._intents: dict[str, PaymentIntent] = {}
        self._refunds: dict[str, dict[str, Any]] = {}  # insertion order = creation order
        self._ids = itertools.count(1)
        self._lock = threading.RLock()

    def reset(self) -> None:
        """Every refund forgotten (so every payment intent is whole again) and new ones ``succeeded``."""
        with self._lock:
            self._refunds.clear()
            self.new_refund_status = "succeeded"

    def add_payment_intent(self, intent_id: str, amount: int, currency: str = "usd") -> PaymentIntent:
        if not intent_id.startswith("pi_") or amount < 1:
            raise ValueError("a payment intent id starts with pi_ and its amount is at least 1")
        intent = PaymentIntent(intent_id, amount, currency.lower(), "ch_" + intent_id.removeprefix("pi_"))
        with self._lock:
            self._intents[intent_id] = intent
        return intent

    def payment_intent(self, intent_id: str) -> PaymentIntent | None:
        with self._lock:
            return self._intents.get(intent_id)

    def refunded(self, intent_id: str) -> int:
        """What counts against the payment intent: its refunds that did not fail or get canceled."""
        with self._lock:
            return sum(
                r["amount"]
                for r in self._refunds.values()
                if r["payment_intent"] == intent_id and r["status"] not in NOT_COUNTED
            )

    def create(self, request: RefundRequest, status: str | None = None) -> dict[str, Any]:
        """Make the refund (``status``: else ``new_refund_status``), or refuse as Stripe does
        (``resource_missing``, ``charge_already_refunded``, …)."""
        with self._lock:
            intent = self._resolve(request)
            if request.currency is not None and request.currency != intent.currency:
                raise StripeError(
                    400,
                    f"The currency {request.currency} does not match the charge's currency {intent.currency}.",
                    code="parameter_invalid",
                    param="currency",
                )
            left = intent.amount - self.refunded(intent.id)
            if left <= 0:
                raise StripeError(
                    400, f"Charge {intent.charge} has already been refunded.", code="charge_already_refunded"
                )
            amount = left if request.amount is None else request.amount
            if amount > left:
                raise StripeError(
                    400,
                    f"Refund amount ({_dollars(amount)}) is greater than unrefunded amount on charge "
                    f"({_dollars(left)})",
                    code="amount_too_large",
                    param="amount",
                )
            n = next(self._ids)
            refund: dict[str, Any] = {
                "id": f"re_sim_{n:08d}",
                "object": "refund",
                "amount": amount,
                "balance_transaction": f"txn_sim_{n:08d}",
                "charge": intent.charge,
                "created": self.clock.now(),
                "currency": intent.currency,
                "destination_details": None,
                "metadata": dict(request.metadata),
                "payment_intent": intent.id,
                "reason": request.reason,
                "receipt_number": None,
                "source_transfer_reversal": None,
                "status": status or self.new_refund_status,
                "transfer_reversal": None,
            }
            self._refunds[refund["id"]] = refund
            return _copy(refund)

    def _resolve(self, request: RefundRequest) -> PaymentIntent:
        if request.payment_intent is not None:
            intent = self._intents.get(request.payment_intent)
            if intent is None:
                raise StripeError(
                    404,
                    f"No such payment_intent: '{request.payment_intent}'",
                    code="resource_missing",
                    param="payment_intent",
                )
            if request.charge is not None and request.charge != intent.charge:
                raise StripeError(400, "The charge does not belong to the payment intent.", param="charge")
            return intent
        found = next((i for i in self._intents.values() if i.charge == request.charge), None)
        if found is None:
            raise StripeError(404, f"No such charge: '{request.charge}'", code="resource_missing", param="charge")
        return found

    def retrieve(self, refund_id: str) -> dict[str, Any]:
        with self._lock:
            refund = self._refunds.get(refund_id)
            if refund is None:
                raise StripeError(404, f"No such refund: '{refund_id}'", code="resource_missing", param="id")
            return _copy(refund)

    def newest_first(self) -> list[dict[str, Any]]:
        with self._lock:
            return [_copy(r) for r in reversed(self._refunds.values())]

    def settle(self, refund_id: str, status: str) -> dict[str, Any]:
        """A pending refund reaches its final status (what Stripe's processing would do later)."""
        if status not in SETTLED_STATUSES:
            raise ValueError(f"status must be one of {SETTLED_STATUSES}")
        with self._lock:
            refund = self._refunds.get(refund_id)
            if refund is None:
                raise KeyError(refund_id)
            if refund["status"] not in ("pending", "requires_action"):
                raise ValueError(f"refund {refund_id} is {refund['status']}, not pending")
            refund["status"] = status
            if status == "failed":
                refund["failure_reason"] = "unknown"
            return _copy(refund)

    def fail_late(self, refund_id: str, reason: str) -> dict[str, Any]:
        """A ``succeeded`` refund fails after all (Stripe: the card was closed, the bank returned it): its
        amount counts against the payment intent no more."""
        with self._lock:
            refund = self._refunds.get(refund_id)
            if refund is None:
                raise KeyError(refund_id)
            if refund["status"] != "succeeded":
                raise ValueError(f"refund {refund_id} is {refund['status']}, not succeeded")
            refund["status"] = "failed"
            refund["failure_reason"] = reason
            return _copy(refund)
