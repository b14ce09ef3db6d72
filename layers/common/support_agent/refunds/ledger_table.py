"""The ledger's tables, and the parts every ledger write is built from (the writes: approved.py, settlements.py).

A ledger row lives in CustomerData beside its order; its audit rows chain on the refund key's stream, whose
head the row holds, so a row's update carries the head's condition and the stream cannot fork (`_row_write`, an
audited write: store/audited_write.py). An approved refund's row moves its approval (Approvals) in the same
transaction, and a settlement is announced in its conversation's feed (store/notifications.py) there too.
"""

from __future__ import annotations

from typing import Any

from support_agent.refunds.ledger_row import LEDGER_INDEX_KEY, UNSETTLED_INDEX_KEY, LedgerRow, Outcome
from support_agent.store.approvals import Approval, status_move
from support_agent.store.audit import AuditRecord
from support_agent.store.audited_write import UNAUDITED, AuditedWrite
from support_agent.store.customer_data import order_key, order_move
from support_agent.store.dynamo import DynamoDBClient, from_item, to_item
from support_agent.store.notifications import NotificationStore


class LedgerTable:
    """``conversations_table``: where settlements are announced (store/notifications.py); without it (the
    reconciliation's read-only ledger, a test of the ledger alone) nothing is."""

    def __init__(
        self,
        client: DynamoDBClient,
        customer_table: str,
        approvals_table: str,
        audit_table: str,
        conversations_table: str = "",
    ) -> None:
        self._db = client
        self._customers = customer_table
        self._approvals = approvals_table
        self._audit = audit_table
        self._notes = NotificationStore(client, conversations_table)

    def get(self, customer_id: int, sk: str) -> LedgerRow | None:
        out = self._db.get_item(
            TableName=self._customers, Key=to_item({"customer_id": customer_id, "sk": sk}), ConsistentRead=True
        )
        item = out.get("Item")
        return LedgerRow.from_item(from_item(item)) if item else None

    @staticmethod
    def new_row(row: LedgerRow, now: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """A new unsettled row's item; its writer puts it once, holding its stream's first head
        (`AuditedWrite.put`)."""
        return {
            **row.item(),
            "attempt_started_at": now,
            "unsettled": UNSETTLED_INDEX_KEY,  # in the sparse index until a final outcome removes it
            "ledger": LEDGER_INDEX_KEY,
            "created_at": now,
            "updated_at": now,
            **(extra or {}),
        }

    # ------------------------------------------------------------------ parts

    def _chained(self, row: LedgerRow, record: AuditRecord) -> AuditedWrite:
        """``record`` chained on the refund key's stream, after the head ``row`` was read with."""
        return AuditedWrite.of(self._audit, row.audit_head, [record])

    def _row_write(
        self,
        write: AuditedWrite,
        row: LedgerRow,
        sets: list[str],
        condition: str,
        values: dict[str, Any],
        *,
        then: str = "",
        status: bool = True,
    ) -> list[dict[str, Any]]:
        """An Update of ``row``'s item with ``write``'s rows (the row's first); ``status``: the expressions name its
        status as ``#st``; ``then``: a ``REMOVE`` clause."""
        key = {"customer_id": row.customer_id, "sk": row.sk}
        names = {"#st": "status"} if status else None
        return write.update(self._customers, key, sets, condition, values, names, then)

    def _order_update(self, row: LedgerRow, expression: str, source: str = "reserved_cents") -> dict[str, Any]:
        """An Update of ``row``'s order moving its amount (``:a``) out of ``source`` (store/customer_data.py)."""
        return order_move(self._customers, row.customer_id, row.order_id, row.amount_cents, expression, source)

    def _order_intent(self, customer_id: int, order_id: int) -> str:
        """An approval made before orders carried their payment intent: the order's, read once."""
        out = self._db.get_item(TableName=self._customers, Key=order_key(customer_id, order_id), ConsistentRead=True)
        return str(from_item(out.get("Item") or {}).get("payment_intent") or "")

    def _approval_move(
        self,
        approval_id: str,
        from_status: str,
        to_status: str,
        now: str,
        sets: dict[str, Any],
        remove: str = "",
        write: AuditedWrite = UNAUDITED,
    ) -> list[dict[str, Any]]:
        """The approval's move (store/approvals.py `status_move`), stamped ``updated_at``; ``write``: the change
        writes rows on the approval's own stream (none: the refund key's row tells it)."""
        sets = {"updated_at": now, **sets}
        return status_move(write, self._approvals, approval_id, from_status, to_status, sets, remove=remove)

    @staticmethod
    def _money(row: LedgerRow | Approval) -> dict[str, Any]:
        return {"order_id": row.order_id, "amount_cents": row.amount_cents, "currency": row.currency}

    def _current(self, row: LedgerRow) -> LedgerRow:
        current = self.get(row.customer_id, row.sk)
        assert current is not None
        return current

    def _call_audit(
        self, row: LedgerRow, outcome: Outcome, now: str, actor: str, request_id: str, action: str = "payment_refund"
    ) -> AuditRecord:
        """A row of the refund key's stream (not chained yet: `_chained` does that on the row's head)."""
        return AuditRecord(
            stream=row.audit_stream,
            action=action,
            actor=actor,
            outcome=outcome.status,
            customer_id=row.customer_id,
            created_at=now,
            tool=None,
            output={
                **self._money(row),
                "provider": row.provider,
                "attempt_key": row.attempt_key,
                "refund_id": outcome.refund_id or None,
                "provider_status": outcome.provider_status or None,
                "failure_code": outcome.failure_code or None,
            },
            conversation_id=row.conversation_id or None,
            approval_id=row.approval_id or None,
            request_id=request_id or None,
            tool_use_id=row.tool_use_id or None,
            refund_key=row.refund_key,
        )
