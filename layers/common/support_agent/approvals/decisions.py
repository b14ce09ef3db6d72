"""A lead's decisions on an approval, and starting RefundFlow for the approved ones.

The database conditions are the guard: approving twice, approving what was rejected, approving
one older than the TTL (even before the sweep expired it), or ten leads clicking at once each
either win the conditional transition or see the state that did. Starting the execution is
idempotent by its name (the approval id, ``<id>-r<n>`` for a retry).

If ``StartExecution`` fails once the approval is APPROVED, the decision stands (it is recorded,
with its audit row) and the answer is 202 with the APPROVED approval, as for a flow still running:
the sweep starts the flow after its grace period, and an alarm watches APPROVED approvals that stay
so. A 503 would tell the lead to decide again for a decision already made.

SETTLING (the payment provider has the refund and has not confirmed it) belongs to RefundFlow and the
payment sweep: a second approve only waits for it, as during APPROVED, and starts nothing; retry and
release refuse it (409), since either could ask the provider for a second refund or free money that
is about to leave.

A cancellation's refund (an approval whose ``action`` is ``cancel_order``: actions/cancel.py) rejected leaves the
order CANCELLED and the refund REJECTED, and opens a hand-off for a person to settle with the customer (once per
approval, however often the rejection is repeated).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from support_agent import observability as obs
from support_agent.approvals.flow import start_flow
from support_agent.errors import Conflict, NotFound
from support_agent.ids import APPROVAL_ID
from support_agent.store.approvals import Approval, ApprovalStore, ReservationMissing, StateConflict
from support_agent.store.handoffs import HandoffStore

logger = logging.getLogger(__name__)

FINAL = ("REFUNDED", "FAILED")
SETTLING = "SETTLING"


def _settling_refusal(verb: str) -> Conflict:
    return Conflict(
        f"approval is {SETTLING}: the payment provider has this refund and has not confirmed it yet, so it cannot "
        f"be {verb}; wait until it is REFUNDED or FAILED"
    )


@dataclass(frozen=True)
class Decision:
    approval: Approval
    done: bool  # False while RefundFlow still runs (202)


@dataclass(frozen=True)
class ApprovalDecisions:
    """``now`` gives the ISO-8601 time of decisions; ``ttl`` (APPROVAL_TTL_HOURS) bounds approve."""

    store: ApprovalStore
    sfn: Any
    state_machine_arn: str
    wait_seconds: float
    now: Callable[[], str]
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    ttl: timedelta | None = None
    handoffs: HandoffStore | None = None  # where a rejected cancellation's hand-off is opened (none: not opened)

    def get(self, approval_id: str) -> Approval:
        """The approval (the store answers None for the table's hand-offs too): NotFound when there is none."""
        approval = self.store.get(approval_id) if APPROVAL_ID.match(approval_id) else None
        if approval is None:
            raise NotFound("approval not found")
        obs.logger.append_keys(approval_id=approval_id)  # every decision starts here: the correlation id
        return approval

    def _start_and_await(self, approval_id: str, retry: int = 0) -> Decision:
        """Start the attempt (a repeat is a no-op) and wait for it; 202 with the approval if the start fails."""
        try:
            start_flow(self.sfn, self.state_machine_arn, approval_id, retry)
        except (ClientError, BotoCoreError):
            # Throttled, timed out, unreachable: the approval is APPROVED and the sweep owns it now.
            logger.exception("could not start RefundFlow; the sweep will", extra={"approval_id": approval_id})
            return Decision(self.get(approval_id), False)
        return self._await(approval_id)

    def _await(self, approval_id: str) -> Decision:
        until = self.clock() + self.wait_seconds
        while True:
            approval = self.get(approval_id)
            if approval.status in FINAL:
                return Decision(approval, True)
            if self.clock() >= until:
                return Decision(approval, False)
            self.sleep(0.1)

    def approve(self, approval_id: str, lead: str) -> Decision:
        self.get(approval_id)
        now = self.now()
        try:
            self.store.approve(approval_id, lead, now, self._not_created_before(now))
        except StateConflict as exc:
            if exc.status in FINAL:
                return Decision(self.get(approval_id), True)
            if exc.status == "PENDING" and self.ttl is not None:  # still PENDING: the TTL condition refused it
                hours = int(self.ttl.total_seconds() // 3600)
                raise Conflict(f"approval expired: it was not decided within {hours} hours") from None
            if exc.status == SETTLING:
                # The refund is at the provider: starting anything could only duplicate it. Wait, as for APPROVED.
                return self._await(approval_id)
            if exc.status != "APPROVED":
                raise Conflict(f"{exc.message}; it cannot be approved") from None
            # Approved before (perhaps by a request that died before starting the flow): ensure it runs.
            return self._start_and_await(approval_id, exc.current.retries if exc.current else 0)
        obs.emit(obs.APPROVALS_APPROVED)
        return self._start_and_await(approval_id)

    def _not_created_before(self, now: str) -> str | None:
        """The oldest ``created_at`` still approvable: what the sweep would not yet expire."""
        if self.ttl is None:
            return None
        moment = datetime.fromisoformat(now.replace("Z", "+00:00")) - self.ttl
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def reject(self, approval_id: str, lead: str, reason: str | None) -> Decision:
        decision = self._give_back(approval_id, lead, _REJECT, reason)
        approval = decision.approval
        if approval.action == "cancel_order" and approval.status == "REJECTED" and self.handoffs is not None:
            why = f"order {approval.order_id} was cancelled but a lead rejected refunding its {approval.amount_cents}"
            try:
                self.handoffs.open_for_decision(
                    approval_id, approval.conversation_id, approval.customer_id, f"{why} cents", lead, self.now()
                )
            except (ClientError, BotoCoreError, Conflict):  # the rejection stands; rejecting again opens it
                logger.exception(
                    "could not open the rejected cancellation's hand-off", extra={"approval_id": approval_id}
                )
        return decision

    def retry(self, approval_id: str, lead: str) -> Decision:
        self.get(approval_id)
        try:
            approval = self.store.mark_retry(approval_id, lead, self.now())
        except StateConflict as exc:
            if exc.status == SETTLING:
                raise _settling_refusal("retried") from None
            raise Conflict(f"{exc.message}; only a FAILED refund can be retried") from None
        obs.emit(obs.REFUND_RETRIES)
        return self._start_and_await(approval_id, approval.retries)

    def release(self, approval_id: str, lead: str) -> Decision:
        return self._give_back(approval_id, lead, _RELEASE)

    def _give_back(self, approval_id: str, lead: str, end: _GiveBack, reason: str | None = None) -> Decision:
        """A decision that returns the reservation; asked again once it holds, it answers the approval as it is."""
        self.get(approval_id)
        try:
            approval = self.store.release(
                approval_id, end.from_status, end.to_status, lead, end.action, self.now(), reason
            )
        except StateConflict as exc:
            if exc.status == end.to_status:
                return Decision(self.get(approval_id), True)
            if exc.status == SETTLING:
                raise _settling_refusal(end.verb) from None
            raise Conflict(f"{exc.message}; {end.refusal}") from None
        except ReservationMissing:
            # The order was changed outside the code: nothing moved; a person must reconcile it (OPERATIONS.md).
            logger.error("order does not hold the approval's reservation", extra={"approval_id": approval_id})
            raise
        obs.emit(end.metric)
        return Decision(approval, True)


@dataclass(frozen=True)
class _GiveBack:
    """A decision that frees the reservation: its move, audit action, metric and why it is refused."""

    from_status: str
    to_status: str
    action: str
    metric: str
    refusal: str
    verb: str  # "rejected", "released": what a SETTLING approval cannot be


_REJECT = _GiveBack(
    "PENDING", "REJECTED", "approval_rejected", obs.APPROVALS_REJECTED, "it cannot be rejected", "rejected"
)
_RELEASE = _GiveBack(
    "FAILED",
    "RELEASED",
    "approval_released",
    obs.APPROVALS_RELEASED,
    "only a FAILED refund can be released",
    "released",
)
