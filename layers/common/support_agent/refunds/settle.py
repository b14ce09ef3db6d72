"""One provider call for a ledger row's current attempt, and its outcome recorded: shared by every path.

The chat's direct refunds, a crashed call's repair, and `PaymentsFunction` (RefundFlow's refund step)
all settle through `RefundSettler.settle`, so each asks the provider the same way and reads its answer
by the same rule (docs/PAYMENTS.md):

* a refund object → SUCCEEDED (``succeeded``) or SETTLING (``pending``, ``requires_action``);
* a refusal → look it up by refund key: found → by its status; not found after a definitive refusal
  → FAILED; not found after a replayed failure → SETTLING (proves nothing);
* no answer (timeout, 5xx, 409 key in use, 429 after retries, unreachable) → SETTLING, ``unknown``:
  the same attempt key is repeated later, never a new one;
* every send is stamped on the row first (``attempt_sent_at``, `RefundLedger.mark_sent`), conditioned on the
  attempt still being current: the payment sweep begins attempt ``n + 1`` only once that stamp is old, so no
  request of attempt ``n`` can still be in flight when ``n + 1``'s is sent;
* an attempt begun more than 12 hours ago (a repair days later) is looked up before it is sent again:
  Stripe forgets a key after 24 hours, and the same key would then make a second refund.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from support_agent.messages import Deadline
from support_agent.refunds.ledger import RefundLedger
from support_agent.refunds.ledger_row import By, LedgerRace, LedgerRow, Outcome
from support_agent.refunds.provider.port import (
    OutcomeUnknown,
    PaymentError,
    PaymentProvider,
    ProviderRefund,
    ProviderRefused,
    ProviderUnavailable,
    RefundAttempt,
)

logger = logging.getLogger(__name__)
# Stripe keeps an idempotency key's first answer for 24 hours; an attempt older than half that is looked
# up by its refund key before it is sent again.
KEY_MEMORY = timedelta(hours=12)
# Another writer settled the row, or began a new attempt, between our read and our send's stamp: re-read and
# decide again, a bounded number of times (each lost race means the row moved on).
SEND_RACES = 3


@dataclass(frozen=True)
class Settled:
    row: LedgerRow  # as recorded (or as another writer left it)
    outcome: Outcome  # what this call established


def outcome_of(refund: ProviderRefund) -> Outcome:
    if refund.status == "succeeded":
        return Outcome("SUCCEEDED", refund.id, refund.status)
    return Outcome("SETTLING", refund.id, refund.status)


@dataclass(frozen=True)
class RefundSettler:
    provider: PaymentProvider
    ledger: RefundLedger
    now: Callable[[], str]

    def settle(
        self,
        row: LedgerRow,
        *,
        actor: str,
        request_id: str = "",
        deadline: Deadline | None = None,
        announce: bool = False,
    ) -> Settled:
        """Ask the provider for ``row``'s current attempt and record what it said; a settled row is returned as is.

        ``announce``: a direct refund settled here is announced in its conversation's feed (the payment sweep's;
        never the chat's own call, whose tool result says it). An approval's outcome always is (the ledger's)."""
        for _ in range(SEND_RACES):
            if row.settled:
                break
            try:
                outcome = self._ask(row, deadline)
            except LedgerRace:
                # Settled, or a new attempt begun, since ``row`` was read: never send a superseded attempt's key.
                current = self.ledger.get(row.customer_id, row.sk)
                assert current is not None
                row = current
                continue
            recorded = self.ledger.record(row, outcome, self.now(), By(actor, request_id, announce=announce))
            return Settled(recorded, outcome)
        return Settled(row, Outcome(row.status, row.refund_id, failure_code=row.failure_code, unknown=not row.settled))

    def apply(self, row: LedgerRow, refund: ProviderRefund, by: By) -> LedgerRow:
        """What the provider says of ``row``'s refund, learned without asking (a webhook, a sweep's read).

        Never backwards: an unsettled row takes the refund's status (``failed``/``canceled`` -> FAILED);
        a SUCCEEDED row moves only to FAILED, when this very refund failed late; anything else (a FAILED
        row, an earlier attempt's refund, a ``pending`` after ``succeeded``) changes nothing.
        ``by``'s ``extra_items`` go into the change's transaction (a webhook's dedupe item; `Duplicate` if it
        exists) and are not written when nothing changes; ``by.announce``: as for `settle`.
        """
        if refund.refund_key != row.refund_key:
            return row
        if row.status in ("REQUESTED", "SETTLING"):
            if refund.metadata.get("attempt", str(row.attempt)) != str(row.attempt):
                return row  # an earlier attempt's refund: the reconciliation's business, not this row's
            if refund.alive:
                outcome = outcome_of(refund)
            else:
                outcome = Outcome("FAILED", refund.id, refund.status, refund.failure_reason or refund.status)
            return self.ledger.record(row, outcome, self.now(), by)
        if row.status == "SUCCEEDED" and not refund.alive and refund.id == row.refund_id:
            return self.ledger.fail_late(row, refund.id, refund.failure_reason or refund.status, self.now(), by)
        return row

    def _ask(self, row: LedgerRow, deadline: Deadline | None) -> Outcome:
        if self._key_may_be_forgotten(row):
            # Stripe forgets an idempotency key after 24 hours: the same key again would make a second
            # refund if the first request made one. Look it up first; send again only if none exists.
            try:
                found = self.provider.find(row.refund_key, row.payment_intent, deadline=deadline)
            except PaymentError as exc:
                logger.warning("refund look-up failed", extra={"attempt_key": row.attempt_key, "kind": exc.kind})
                return Outcome("SETTLING", provider_status=exc.kind, unknown=True)
            if found is not None:
                return outcome_of(found)
        row = self.ledger.mark_sent(row, self.now())  # before every send: `RefundLedger.new_attempt` waits on it
        try:
            attempt = RefundAttempt(row.attempt_key, row.payment_intent, row.amount_cents, row.currency, row.metadata)
            refund = self.provider.refund(attempt, deadline=deadline)
        except ProviderRefused as exc:
            return self._look_up(row, exc, deadline)
        except (OutcomeUnknown, ProviderUnavailable) as exc:
            logger.warning("refund outcome unknown", extra={"attempt_key": row.attempt_key, "kind": exc.kind})
            return Outcome("SETTLING", provider_status=exc.kind, unknown=True)
        if refund.alive:
            return outcome_of(refund)
        # Made and already failed or canceled: no money moved; confirm no other live refund exists.
        return self._look_up(row, ProviderRefused(f"refund_{refund.status}", "refund " + refund.status), deadline)

    def _key_may_be_forgotten(self, row: LedgerRow) -> bool:
        """The row's attempt began long enough ago (half of Stripe's 24 h key memory) that a repeat of its
        key may run anew. A row never stored (just written by the caller) has no start time: its first ask."""
        started = row.extra.get("attempt_started_at")
        if not started:
            return False
        age = datetime.fromisoformat(self.now()) - datetime.fromisoformat(str(started))
        return age >= KEY_MEMORY

    def _look_up(self, row: LedgerRow, refused: ProviderRefused, deadline: Deadline | None) -> Outcome:
        try:
            found = self.provider.find(row.refund_key, row.payment_intent, deadline=deadline)
        except PaymentError as exc:
            logger.warning("refund look-up failed", extra={"attempt_key": row.attempt_key, "kind": exc.kind})
            return Outcome("SETTLING", provider_status=refused.code, failure_code=refused.code, unknown=True)
        if found is not None:
            return outcome_of(found)
        if refused.definitive:
            return Outcome("FAILED", provider_status="refused", failure_code=refused.code)
        return Outcome("SETTLING", provider_status=refused.code, failure_code=refused.code, unknown=True)
