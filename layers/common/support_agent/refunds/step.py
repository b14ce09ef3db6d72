"""RefundFlow's refund step (`PaymentsFunction`): one approved refund, made at the provider exactly once.

Step Functions retries this step on `PaymentOutcomeUnknown` (the error type it sees); every run reads
the approval and the ledger row afresh, so a retry, a replayed execution or a lead's retry each either
continue the same attempt (same attempt key: the provider replays its first answer) or, after a
confirmed FAILED, start the next one. Nothing here ever makes a second refund for one approval.

==============  ====================================================================================
approval        what a run does
==============  ====================================================================================
APPROVED        APPROVED -> SETTLING with a REQUESTED ledger row (attempt 1, or n + 1 after FAILED),
                then asks the provider; if the order lost the reservation meanwhile, APPROVED ->
                FAILED instead, and the provider is never asked
SETTLING        asks the provider again for the row's current attempt (a replay, a Step Functions
                retry, a crash after the first transaction)
REFUNDED        nothing: ``replayed``
anything else   `ApprovalNotApproved` (REJECTED, EXPIRED, RELEASED, FAILED, PENDING): nothing changed
==============  ====================================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from support_agent.messages import Deadline
from support_agent.refunds.keys import approved_refund_sk
from support_agent.refunds.ledger_row import LedgerRace, ReservationMissing
from support_agent.refunds.settle import RefundSettler
from support_agent.store.approvals import Approval, ApprovalStore

ACTOR = "refund-flow"
RACE_ATTEMPTS = 3


class ApprovalNotFound(Exception):
    """No approval with this id (the execution's input is wrong): Step Functions fails the execution."""


class ApprovalNotApproved(Exception):
    """The approval is not APPROVED, SETTLING or REFUNDED: nothing was changed."""


class PaymentOutcomeUnknown(Exception):
    """The provider's answer is unknown: the approval stays SETTLING; retry this step (same attempt key)."""


@dataclass(frozen=True)
class RefundStep:
    approvals: ApprovalStore
    settler: RefundSettler
    provider_name: str
    now: Callable[[], str]

    def run(self, approval_id: str, execution: str = "", deadline: Deadline | None = None) -> dict[str, Any]:
        for _ in range(RACE_ATTEMPTS):
            approval = self.approvals.get(approval_id)
            if approval is None:
                raise ApprovalNotFound(approval_id)
            status = approval.status
            if status == "REFUNDED":
                return self._answer(approval, replayed=True)
            if status == "APPROVED":
                try:
                    self.settler.ledger.begin_approved(approval, self.provider_name, self.now(), ACTOR)
                except ReservationMissing:
                    try:
                        self.settler.ledger.fail_unstarted(
                            approval, self.now(), ACTOR, "reservation_missing", request_id=execution
                        )
                    except LedgerRace:
                        continue
                    return self._answer(self.approvals.get(approval_id) or approval, replayed=False)
                except LedgerRace:
                    continue  # a concurrent execution moved it first: read again
                approval = self.approvals.get(approval_id) or approval
            elif status != "SETTLING":
                raise ApprovalNotApproved(f"approval {approval_id} is {status}; nothing was changed")
            row = self.settler.ledger.get(approval.customer_id, approved_refund_sk(approval_id))
            if row is None:
                raise ApprovalNotApproved(f"approval {approval_id} is SETTLING without a refund row")
            settled = self.settler.settle(row, actor=ACTOR, request_id=execution, deadline=deadline)
            if settled.outcome.unknown and settled.row.status not in ("SUCCEEDED", "FAILED"):
                raise PaymentOutcomeUnknown(
                    f"approval {approval_id}: attempt {settled.row.attempt_key} outcome unknown "
                    f"({settled.outcome.provider_status}); it stays SETTLING"
                )
            final = self.approvals.get(approval_id) or approval
            return self._answer(final, replayed=False)
        raise PaymentOutcomeUnknown(f"approval {approval_id} kept changing under the refund step")

    @staticmethod
    def _answer(approval: Approval, *, replayed: bool) -> dict[str, Any]:
        return {
            "approvalId": approval.approval_id,
            "status": approval.status,
            "refundId": approval.refund_id,
            "replayed": replayed,
        }
