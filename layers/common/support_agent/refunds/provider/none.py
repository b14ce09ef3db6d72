"""``PAYMENT_PROVIDER=none``: ledger-only refunds, today's behaviour. No call is made, no money moves.

What it answers, honestly:

* `refund` — a synthetic ``succeeded`` refund at once: the ledger row is the refund. Its id,
  ``ledger_<hash of the refund key>``, is the same for every attempt of one refund, so a repeated
  attempt (a repair, a replayed execution) is visibly the same refund, never a second one.
* `find` — None: there is no provider to ask and this adapter keeps no state (functions share none).
  It never refuses, so the "refused, look it up" path never reaches it; a caller that repeats
  `refund` with the same attempt key gets the same synthetic refund instead.
* `retrieve` — `ProviderRefused` ``resource_missing``: nothing is held anywhere to read back.
* `list_for_intent`, `list_created_since` — empty: there is nothing to reconcile the ledger with
  (reconciliation skips ``none``, rather than report every ledger row missing).
"""

from __future__ import annotations

import hashlib

from support_agent.messages import Deadline
from support_agent.refunds.provider.port import ProviderRefund, ProviderRefused, RefundAttempt


def ledger_refund_id(refund_key: str) -> str:
    """A stable local id for a refund no provider made: the same for every attempt of the refund."""
    return "ledger_" + hashlib.sha256(refund_key.encode()).hexdigest()[:24]


class LedgerOnly:
    name = "none"

    def refund(self, attempt: RefundAttempt, *, deadline: Deadline | None = None) -> ProviderRefund:
        meta = attempt.stored_metadata()  # validated as Stripe would, so `none` hides no bad call
        return ProviderRefund(
            id=ledger_refund_id(meta["refund_key"]),
            status="succeeded",
            amount=attempt.amount,
            currency=attempt.currency.lower(),
            payment_intent=attempt.payment_intent,
            metadata=meta,
        )

    def find(self, refund_key: str, payment_intent: str, *, deadline: Deadline | None = None) -> ProviderRefund | None:
        return None

    def retrieve(self, refund_id: str, *, deadline: Deadline | None = None) -> ProviderRefund:
        raise ProviderRefused("resource_missing", f"no provider holds refund {refund_id!r} (ledger-only payments)")

    def list_for_intent(self, payment_intent: str, *, deadline: Deadline | None = None) -> list[ProviderRefund]:
        return []

    def list_created_since(self, created_gte: int, *, deadline: Deadline | None = None) -> list[ProviderRefund]:
        return []
