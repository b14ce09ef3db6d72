"""The refund ledger: one row per refund key, the only record of what was asked of the payment provider.

A row is written REQUESTED, with the reservation and its audit row, before any provider call; every
request of one attempt is built from the row alone (`LedgerRow.attempt_key`, `LedgerRow.metadata`), so a
repair, a sweep and a replayed execution send byte-identical parameters. Each provider call's outcome is recorded by one
transaction conditioned on the row still being unsettled at the same attempt, which moves the order's
money and (for an approved refund) the approval with it:

================  ===========================  ==============================================
ledger state      order                        approval (approved refunds)
================  ===========================  ==============================================
REQUESTED         available -> reserved        APPROVED -> SETTLING (`begin_approved`)
SETTLING          still reserved               SETTLING
SUCCEEDED         reserved -> refunded         SETTLING -> REFUNDED
FAILED            direct: reserved -> avail.   SETTLING -> FAILED (reservation kept for the lead)
================  ===========================  ==============================================

``available + reserved + refunded = total`` holds in every state. A FAILED approved refund that a
lead retries gets attempt ``n + 1`` (FAILED is written only once the provider refused and `find`
confirmed no refund exists, so the new key cannot make a second refund).

A change that settles a refund is announced in its conversation's event feed (store/notifications.py), in
the same transaction, so only the writer whose change landed announces it: an approval reaching REFUNDED or
FAILED always (``approval.decided``, when a conversation owns it); a direct refund's settlement only when the
caller says so (`By.announce`: the webhook and the payment sweep, ``refund.settled``), never the chat's own
call, whose tool result already says it.

Where each part lives: the row, its states and the ledger's errors in ledger_row.py; the tables and the parts
of every write in ledger_table.py; an approved refund's start in approved.py; what a provider call establishes
in settlements.py; a direct refund's first row is written with its reservation by requests.py.
"""

from __future__ import annotations

from typing import Any

from support_agent.refunds.approved import ApprovedWrites
from support_agent.refunds.ledger_row import (
    LEDGER_INDEX,
    LEDGER_INDEX_KEY,
    UNSETTLED_INDEX,
    UNSETTLED_INDEX_KEY,
    LedgerRow,
)
from support_agent.refunds.settlements import SettlementWrites
from support_agent.store.dynamo import from_item, to_values


class RefundLedger(ApprovedWrites, SettlementWrites):
    """Every write of the ledger, and the reads of the payment sweep and reconciliation (the indexes)."""

    def unsettled(self, started_before: str, limit: int) -> list[LedgerRow]:
        """Rows still REQUESTED or SETTLING whose attempt began before ``started_before``, oldest first."""
        out = self._db.query(
            TableName=self._customers,
            IndexName=UNSETTLED_INDEX,
            KeyConditionExpression="unsettled = :u AND attempt_started_at < :before",
            ExpressionAttributeValues=to_values({":u": UNSETTLED_INDEX_KEY, ":before": started_before}),
            Limit=limit,
        )
        return [LedgerRow.from_item(from_item(i)) for i in out.get("Items", [])]

    def created_since(self, since: str) -> list[LedgerRow]:
        """Every ledger row created at or after ``since`` (all pages), oldest first."""
        rows: list[LedgerRow] = []
        kwargs: dict[str, Any] = {
            "TableName": self._customers,
            "IndexName": LEDGER_INDEX,
            "KeyConditionExpression": "ledger = :l AND created_at >= :since",
            "ExpressionAttributeValues": to_values({":l": LEDGER_INDEX_KEY, ":since": since}),
        }
        while True:
            out = self._db.query(**kwargs)
            rows.extend(LedgerRow.from_item(from_item(i)) for i in out.get("Items", []))
            if "LastEvaluatedKey" not in out:
                return rows
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]
