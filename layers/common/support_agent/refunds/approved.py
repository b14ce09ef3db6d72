"""An approved refund's start, before any provider call: APPROVED -> SETTLING with its REQUESTED ledger row
(`begin_approved`), or APPROVED -> FAILED when it cannot start (`fail_unstarted`). RefundFlow's refund step
(step.py) makes both; what a provider call then establishes is settlements.py's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from support_agent.refunds.keys import approved_refund_sk
from support_agent.refunds.ledger_row import UNSETTLED_INDEX_KEY, LedgerRace, LedgerRow, ReservationMissing
from support_agent.refunds.ledger_table import Chained, LedgerTable, chained
from support_agent.store.approvals import Approval, decided_note
from support_agent.store.audit import AuditRecord
from support_agent.store.audit_chain import Head
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
        link = chained(
            Head() if current is None else current.audit_head,
            AuditRecord(
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
            ),
        )
        if current is None:
            ledger_item = self.new_row_item(self._customers, row, now, link.head.attributes())
        elif current.status == "FAILED":
            ledger_item = self._restart(row, current, link, now)
        else:
            raise LedgerRace(f"refund {row.sk} is {current.status}")
        items = [
            self._approval_update(
                row.approval_id,
                "APPROVED",
                "SETTLING",
                now,
                {"refund_provider": provider, "refund_status": "REQUESTED"},
                remove="refund_id",  # a lead's retry: the failed attempt's id is not this one's
            ),
            ledger_item,
            link.record.put(self._audit),
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
        return replace(row, extra=link.head.attributes())

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

    def _restart(self, row: LedgerRow, failed: LedgerRow, link: Chained, now: str) -> dict[str, Any]:
        """A FAILED row back to REQUESTED at ``row``'s attempt, the failed attempt's answer removed."""
        return self._row_update(
            row,
            "SET #st = :requested, attempt = :n, attempt_started_at = :now, "
            f"updated_at = :now, provider = :provider, unsettled = :unsettled, {link.sets} "
            "REMOVE refund_id, failure_code, provider_status",
            f"#st = :failed AND attempt = :prev AND {link.condition}",
            {
                ":requested": "REQUESTED",
                ":failed": "FAILED",
                ":n": row.attempt,
                ":prev": failed.attempt,
                ":now": now,
                ":provider": row.provider,
                ":unsettled": UNSETTLED_INDEX_KEY,
                **link.values,
            },
        )

    def fail_unstarted(self, approval: Approval, now: str, actor: str, code: str, request_id: str = "") -> None:
        """APPROVED -> FAILED with its audit row, before any provider call of this attempt (nothing to look up).

        The reservation stays as the order has it, for the lead to put right and retry, or release.
        `LedgerRace` when the approval is no longer APPROVED.
        """
        approval_id = approval.approval_id
        record = AuditRecord(
            stream=f"approval#{approval_id}",
            action="refund_failed",
            actor=actor,
            outcome="FAILED",
            customer_id=approval.customer_id,
            created_at=now,
            output={
                "order_id": approval.order_id,
                "amount_cents": approval.amount_cents,
                "currency": approval.currency,
                "failure_code": code,
            },
            conversation_id=approval.conversation_id or None,
            approval_id=approval_id,
            request_id=request_id or None,
        )
        read = approval.head  # the approval's stream: the approval item holds its head
        link = chained(read, record)
        update = self._approval_update(
            approval_id,
            "APPROVED",
            "FAILED",
            now,
            {"failed_at": now, "failure_error": code},
            audit=(read, link.head),
        )
        items = [update, link.record.put(self._audit)]
        note = None
        if self._notes is not None:
            note = decided_note(
                approval.conversation_id, approval_id, approval.order_id, approval.amount_cents, "FAILED", now
            )
        with cancellation_as(lambda codes: LedgerRace(f"approval {approval_id} changed")):
            self._transact(items, note)
