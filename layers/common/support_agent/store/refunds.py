"""Money writes: each one conditional TransactWriteItems with its own audit row.

Per order the invariant ``available + reserved + refunded = total`` holds after every write: each
transaction moves an amount between those fields and is conditioned on ``available`` covering it.
DynamoDB conditions cannot add attributes, so the threshold rule
``refunded + reserved + A <= T`` is checked as the equivalent ``available >= total - T + A``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from support_agent.store.audit import AuditRecord
from support_agent.store.audit_chain import Head, chain, head_after
from support_agent.store.customer_data import REFUNDABLE_STATUSES, order_key
from support_agent.store.dynamo import CONDITION_FAILED, DynamoDBClient, cancellation_as, dumps, put_new, to_values
from support_agent.store.ledger import LedgerRow, RefundLedger


class RefundRace(Exception):
    """The order changed between our read and our write (or the request row already exists)."""

    def __init__(self, request_exists: bool) -> None:
        super().__init__("refund transaction cancelled")
        self.request_exists = request_exists


@dataclass(frozen=True)
class RefundRequest:
    customer_id: int
    order_id: int
    total_cents: int
    amount_cents: int
    currency: str
    reason: str
    request_sk: str
    conversation_id: str
    tool_use_id: str
    actor: str
    request_id: str
    now: str
    payment_intent: str = ""


class RefundWriter:
    def __init__(self, client: DynamoDBClient, customer_table: str, approvals_table: str, audit_table: str) -> None:
        self._db = client
        self._customers = customer_table
        self._approvals = approvals_table
        self._audit = audit_table

    def _request_row(self, r: RefundRequest, kind: str, status: str, result: dict[str, Any]) -> dict[str, Any]:
        row = {
            "customer_id": r.customer_id,
            "sk": r.request_sk,
            "kind": kind,
            "order_id": r.order_id,
            "amount_cents": r.amount_cents,
            "currency": r.currency,
            "reason": r.reason,
            "status": status,
            "approval_id": result.get("approval_id"),
            "conversation_id": r.conversation_id,
            "tool_use_id": r.tool_use_id,
            "created_at": r.now,
            "result": dumps(result),
        }
        return put_new(self._customers, row, "sk")

    def _audit_row(
        self, r: RefundRequest, stream: str, refund_key: str, action: str, outcome: str, result: dict[str, Any]
    ) -> AuditRecord:
        """The first row of a new stream (the refund key's, or the approval's), chained from an empty head:
        its owner item is written in the same transaction, holding the new head."""
        (row,), _ = chain(Head(), [self._record(r, stream, refund_key, action, outcome, result)])
        return row

    def _record(
        self, r: RefundRequest, stream: str, refund_key: str, action: str, outcome: str, result: dict[str, Any]
    ) -> AuditRecord:
        return AuditRecord(
            stream=stream,
            action=action,
            actor=r.actor,
            outcome=outcome,
            customer_id=r.customer_id,
            created_at=r.now,
            tool="request_refund",
            input={"order_id": r.order_id, "amount_cents": r.amount_cents, "reason": r.reason},
            output=result,
            conversation_id=r.conversation_id,
            approval_id=result.get("approval_id"),
            request_id=r.request_id,
            tool_use_id=r.tool_use_id,
            refund_key=refund_key,
        )

    def _order_update(self, r: RefundRequest, set_expr: str, need: int) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self._customers,
                "Key": order_key(r.customer_id, r.order_id),
                "UpdateExpression": set_expr,
                "ConditionExpression": ("#st IN (:s1, :s2) AND total_cents = :total AND available_cents >= :need"),
                "ExpressionAttributeNames": {"#st": "status"},
                "ExpressionAttributeValues": to_values(
                    {
                        ":s1": REFUNDABLE_STATUSES[0],
                        ":s2": REFUNDABLE_STATUSES[1],
                        ":total": r.total_cents,
                        ":need": need,
                        ":a": r.amount_cents,
                    }
                ),
            }
        }

    def _transact(self, items: list[dict[str, Any]]) -> None:
        """Any cancellation is a race; the request row's own condition (the first item) says it exists."""
        with cancellation_as(lambda codes: RefundRace(request_exists=codes[:1] == [CONDITION_FAILED])):
            self._db.transact_write_items(TransactItems=items)  # type: ignore[arg-type]

    def direct(self, r: RefundRequest, threshold_cents: int, row: LedgerRow) -> LedgerRow:
        """Write the REQUESTED ledger row and reserve the amount, before any provider call; the row as written.

        Only while refunded + reserved + amount stays within the threshold; the provider's answer then
        moves the reservation to refunded (or back), in `RefundLedger.record`. The audit row starts the
        refund key's stream (``refund#<key>``), whose head the ledger row holds.
        """
        need = max(r.amount_cents, r.total_cents - threshold_cents + r.amount_cents)
        audit = self._audit_row(
            r,
            f"refund#{row.refund_key}",
            row.refund_key,
            "refund",
            "REQUESTED",
            {"status": "REFUND_IN_PROGRESS", "attempt_key": row.attempt_key},
        )
        head = head_after(Head(), [audit]).attributes()
        self._transact(
            [
                RefundLedger.new_row_item(self._customers, row, r.now, {"reason": r.reason, **head}),
                self._order_update(
                    r,
                    "SET available_cents = available_cents - :a, reserved_cents = reserved_cents + :a",
                    need,
                ),
                audit.put(self._audit),
            ]
        )
        return replace(row, extra={**row.extra, **head})

    def reserve(self, r: RefundRequest, approval_id: str, result: dict[str, Any]) -> None:
        """Write the PENDING approval and reserve the amount, in one transaction; the audit row starts the
        approval's stream (``approval#<id>``), whose head the approval holds."""
        audit = self._audit_row(
            r, f"approval#{approval_id}", approval_id, "refund_requested", "PENDING_APPROVAL", result
        )
        approval = {
            "approval_id": approval_id,
            "entity": "APPROVAL",
            "status": "PENDING",
            "customer_id": r.customer_id,
            "order_id": r.order_id,
            "amount_cents": r.amount_cents,
            "currency": r.currency,
            "reason": r.reason,
            "conversation_id": r.conversation_id,
            "tool_use_id": r.tool_use_id,
            "request_sk": r.request_sk,
            "payment_intent": r.payment_intent or None,
            "requested_by": r.actor,
            "created_at": r.now,
            **head_after(Head(), [audit]).attributes(),
        }
        self._transact(
            [
                self._request_row(r, "approval", "PENDING_APPROVAL", result),
                self._order_update(
                    r,
                    "SET available_cents = available_cents - :a, reserved_cents = reserved_cents + :a",
                    r.amount_cents,
                ),
                put_new(self._approvals, approval, "approval_id"),
                audit.put(self._audit),
            ]
        )
