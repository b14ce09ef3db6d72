"""An approved refund's start, before any provider call: APPROVED -> SETTLING with its REQUESTED ledger row
(`begin_approved`), or APPROVED -> FAILED when it cannot start (`fail_unstarted`). RefundFlow's refund step
(step.py) makes both; what a provider call then establishes is settlements.py's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from support_agent.audit.chain import Head
from support_agent.refunds.keys import approved_refund_sk
from support_agent.refunds.ledger_row import UNSETTLED_INDEX_KEY, LedgerRace, LedgerRow, ReservationMissing
from support_agent.refunds.ledger_table import LedgerTable
from support_agent.store.approvals import Approval
from support_agent.store.audit import AuditRecord
from support_agent.store.audited_write import AuditedWrite
from support_agent.store.customer_data import order_key
from support_agent.store.dynamo import CONDITION_FAILED, cancellation_as, to_values


class ApprovedWrites(LedgerTable):
    def begin_approved(self, approval: Approval, provider: str, now: str, actor: str) -> LedgerRow:
        """APPROVED -> SETTLING with the refund's REQUESTED row, in one transaction, before the provider call.

        The row is new (attempt 1), or a FAILED one a lead retried (attempt ``n + 1``). `LedgerRace` when
        the approval is no longer APPROVED or the row is neither absent nor FAILED; `ReservationMissing`
        when the order no longer holds the amount reserved: a refund made then could never be recorded
        (SUCCEEDED moves reserved -> refunded), so the provider is not asked (`fail_unstarted`).
        """
        current = self.get(approval.customer_id, approved_refund_sk(approval.approval_id))
        row = self._approved_row(approval, provider, current)
        started = AuditRecord(
            stream=row.audit_stream,
            action="refund_started",
            actor=actor,
            outcome="SETTLING",
            customer_id=row.customer_id,
            created_at=now,
            output={**self._money(row), "attempt_key": row.attempt_key, "provider": provider},
            conversation_id=row.conversation_id or None,
            approval_id=row.approval_id,
            refund_key=row.refund_key,
        )
        write = AuditedWrite.of(self._audit, Head() if current is None else current.audit_head, [started])
        if current is None:
            ledger_items = write.put(self._customers, self.new_row(row, now), "sk")
        elif current.status == "FAILED":
            ledger_items = self._restart(write, row, current, now)
        else:
            raise LedgerRace(f"refund {row.sk} is {current.status}")
        items = [
            *self._approval_move(
                row.approval_id,
                "APPROVED",
                "SETTLING",
                now,
                {"refund_provider": provider, "refund_status": "REQUESTED"},
                remove="refund_id",  # a lead's retry: the failed attempt's id is not this one's
            ),
            *ledger_items,  # the row, then its audit row
            {
                "ConditionCheck": {
                    "TableName": self._customers,
                    "Key": order_key(row.customer_id, row.order_id),
                    "ConditionExpression": "reserved_cents >= :a",
                    "ExpressionAttributeValues": to_values({":a": row.amount_cents}),
                }
            },
        ]

        def cancelled(codes: list[str]) -> Exception:
            if codes[3:4] == [CONDITION_FAILED] and CONDITION_FAILED not in codes[:3]:
                return ReservationMissing(f"order {row.order_id} no longer holds {row.amount_cents} reserved")
            return LedgerRace("approval or refund row changed")

        with cancellation_as(cancelled):
            self._db.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
        return replace(row, extra=write.head.attributes())

    def _approved_row(self, approval: Approval, provider: str, current: LedgerRow | None) -> LedgerRow:
        """The REQUESTED row of the approval's next attempt (1, or ``n + 1`` after a FAILED one)."""
        return LedgerRow(
            customer_id=approval.customer_id,
            sk=approved_refund_sk(approval.approval_id),
            kind="approved",
            refund_key=approval.approval_id,
            order_id=approval.order_id,
            amount_cents=approval.amount_cents,
            currency=approval.currency,
            payment_intent=approval.payment_intent or self._order_intent(approval.customer_id, approval.order_id),
            status="REQUESTED",
            attempt=1 if current is None else current.attempt + 1,
            provider=provider,
            conversation_id=approval.conversation_id or "",
            approval_id=approval.approval_id,
        )

    def _restart(self, write: AuditedWrite, row: LedgerRow, failed: LedgerRow, now: str) -> list[dict[str, Any]]:
        """A FAILED row back to REQUESTED at ``row``'s attempt, the failed attempt's answer removed."""
        return self._row_write(
            write,
            row,
            [
                "#st = :requested",
                "attempt = :n",
                "attempt_started_at = :now",
                "updated_at = :now",
                "provider = :provider",
                "unsettled = :unsettled",
            ],
            "#st = :failed AND attempt = :prev",
            {
                ":requested": "REQUESTED",
                ":failed": "FAILED",
                ":n": row.attempt,
                ":prev": failed.attempt,
                ":now": now,
                ":provider": row.provider,
                ":unsettled": UNSETTLED_INDEX_KEY,
            },
            then="REMOVE refund_id, failure_code, provider_status",
        )

    def fail_unstarted(self, approval: Approval, now: str, actor: str, code: str, request_id: str = "") -> None:
        """APPROVED -> FAILED with its audit row, before any provider call of this attempt (nothing to look up).

        The reservation stays as the order has it, for the lead to put right and retry, or release.
        `LedgerRace` when the approval is no longer APPROVED.
        """
        output = {**self._money(approval), "failure_code": code}
        failed = approval.audit_row("refund_failed", actor, "FAILED", now, output, request_id=request_id or None)
        items = self._approval_move(  # on the approval's own stream: the approval item holds its head
            approval.approval_id,
            "APPROVED",
            "FAILED",
            now,
            {"failed_at": now, "failure_error": code},
            write=AuditedWrite.of(self._audit, approval.head, [failed]),
        )
        with cancellation_as(lambda codes: LedgerRace(f"approval {approval.approval_id} changed")):
            self._notes.transact(items, approval.decided_note("FAILED", now))
