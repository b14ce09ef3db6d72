"""A lead's decisions on an approval, and starting RefundFlow for the approved ones.

The database conditions are the guard: approving twice, approving what was rejected, or ten
leads clicking at once each either win the conditional transition or see the state that did.
Starting the execution is idempotent by its name (the approval id, ``<id>-r<n>`` for a retry).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from support_agent import observability as obs
from support_agent.approvals.flow import execution_name, flow_input
from support_agent.errors import Conflict, NotFound
from support_agent.ids import APPROVAL_ID
from support_agent.store.approvals import ApprovalStore, StateConflict
from support_agent.store.dynamo import error_code

FINAL = ("REFUNDED", "FAILED")


@dataclass(frozen=True)
class Decision:
    approval: dict[str, Any]
    done: bool  # False while RefundFlow still runs (202)


class ApprovalDecisions:
    def __init__(
        self,
        store: ApprovalStore,
        sfn: Any,
        state_machine_arn: str,
        wait_seconds: float,
        now: Callable[[], str],
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._sfn = sfn
        self._arn = state_machine_arn
        self._wait = wait_seconds
        self._now = now
        self._sleep = sleep
        self._clock = clock

    def get(self, approval_id: str) -> dict[str, Any]:
        approval = self.store.get(approval_id) if APPROVAL_ID.match(approval_id) else None
        if approval is not None:
            obs.logger.append_keys(approval_id=approval_id)  # every decision starts here: the correlation id
        if approval is None or approval.get("entity", "APPROVAL") != "APPROVAL":
            raise NotFound("approval not found")
        return approval

    def _start(self, approval_id: str, retry: int = 0) -> None:
        try:
            self._sfn.start_execution(
                stateMachineArn=self._arn,
                name=execution_name(approval_id, retry),
                input=json.dumps(flow_input(approval_id)),
            )
        except ClientError as exc:
            if error_code(exc) != "ExecutionAlreadyExists":  # a repeat: the first start stands
                raise

    def _await(self, approval_id: str) -> Decision:
        until = self._clock() + self._wait
        while True:
            approval = self.get(approval_id)
            if approval["status"] in FINAL:
                return Decision(approval, True)
            if self._clock() >= until:
                return Decision(approval, False)
            self._sleep(0.1)

    def approve(self, approval_id: str, lead: str) -> Decision:
        self.get(approval_id)
        try:
            self.store.approve(approval_id, lead, self._now())
        except StateConflict as exc:
            status = (exc.current or {}).get("status")
            if status in ("REFUNDED", "FAILED"):
                return Decision(self.get(approval_id), True)
            if status != "APPROVED":
                raise Conflict(f"approval is {status}; it cannot be approved") from None
            # Approved before (perhaps by a request that died before starting the flow): ensure it runs.
            retries = int((exc.current or {}).get("retries", 0))
            self._start(approval_id, retries)
            return self._await(approval_id)
        obs.emit(obs.APPROVALS_APPROVED)
        self._start(approval_id)
        return self._await(approval_id)

    def reject(self, approval_id: str, lead: str, reason: str | None) -> Decision:
        self.get(approval_id)
        try:
            approval = self.store.release(
                approval_id, "PENDING", "REJECTED", lead, "approval_rejected", self._now(), reason
            )
        except StateConflict as exc:
            status = (exc.current or {}).get("status")
            if status == "REJECTED":
                return Decision(self.get(approval_id), True)
            raise Conflict(f"approval is {status}; it cannot be rejected") from None
        obs.emit(obs.APPROVALS_REJECTED)
        return Decision(approval, True)

    def retry(self, approval_id: str, lead: str) -> Decision:
        self.get(approval_id)
        try:
            approval = self.store.mark_retry(approval_id, lead, self._now())
        except StateConflict as exc:
            status = (exc.current or {}).get("status")
            raise Conflict(f"approval is {status}; only a FAILED refund can be retried") from None
        obs.emit(obs.REFUND_RETRIES)
        self._start(approval_id, int(approval.get("retries", 1)))
        return self._await(approval_id)

    def release(self, approval_id: str, lead: str) -> Decision:
        self.get(approval_id)
        try:
            approval = self.store.release(approval_id, "FAILED", "RELEASED", lead, "approval_released", self._now())
        except StateConflict as exc:
            status = (exc.current or {}).get("status")
            if status == "RELEASED":
                return Decision(self.get(approval_id), True)
            raise Conflict(f"approval is {status}; only a FAILED refund can be released") from None
        obs.emit(obs.APPROVALS_RELEASED)
        return Decision(approval, True)


def approval_view(a: dict[str, Any]) -> dict[str, Any]:
    return {
        "approvalId": a["approval_id"],
        "orderId": a.get("order_id"),
        "customerId": a.get("customer_id"),
        "amountCents": a.get("amount_cents"),
        "currency": a.get("currency"),
        "reason": a.get("reason"),
        "status": a.get("status"),
        "conversationId": a.get("conversation_id"),
        "createdAt": a.get("created_at"),
        "decidedBy": a.get("decided_by"),
        "decidedAt": a.get("decided_at"),
    }
