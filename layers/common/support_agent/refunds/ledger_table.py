"""The ledger's tables, and the parts every ledger write is built from (the writes: approved.py, settlements.py).

A ledger row lives in CustomerData beside its order; its audit rows chain on the refund key's stream, whose
head the row holds, so a row's update carries the head's condition and the stream cannot fork. An approved
refund's row moves its approval (Approvals) in the same transaction, and a settlement is announced in its
conversation's feed (store/notifications.py) there too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from support_agent.refunds.ledger_row import LEDGER_INDEX_KEY, UNSETTLED_INDEX_KEY, LedgerRow, Outcome
from support_agent.store.approvals import Approval
from support_agent.store.audit import AuditRecord
from support_agent.store.audit_chain import Head, chain, head_condition, head_set
from support_agent.store.customer_data import order_key
from support_agent.store.dynamo import DynamoDBClient, from_item, put_new, to_item, to_values
from support_agent.store.notifications import Notification, NotificationStore


@dataclass(frozen=True)
class Chained:
    """An audit row chained on the head its owner's item holds: the owner's update carries ``condition`` (the
    head read is still the head) and ``sets`` (the new head), with ``values``, so the stream cannot fork."""

    record: AuditRecord
    head: Head
    condition: str
    sets: str
    values: dict[str, Any]


def chained(read: Head, record: AuditRecord) -> Chained:
    (chained_record,), head = chain(read, [record])
    (condition, read_values), (sets, new_values) = head_condition(read), head_set(head)
    return Chained(chained_record, head, condition, sets, {**read_values, **new_values})


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
        self._notes = NotificationStore(client, conversations_table) if conversations_table else None

    def get(self, customer_id: int, sk: str) -> LedgerRow | None:
        out = self._db.get_item(
            TableName=self._customers, Key=to_item({"customer_id": customer_id, "sk": sk}), ConsistentRead=True
        )
        item = out.get("Item")
        return LedgerRow.from_item(from_item(item)) if item else None

    @staticmethod
    def new_row_item(table: str, row: LedgerRow, now: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """The Put that writes a new unsettled row once; callers add it to their transaction."""
        item = {
            **row.item(),
            "attempt_started_at": now,
            "unsettled": UNSETTLED_INDEX_KEY,  # in the sparse index until a final outcome removes it
            "ledger": LEDGER_INDEX_KEY,
            "created_at": now,
            "updated_at": now,
            **(extra or {}),
        }
        return put_new(table, item, "sk")

    # ------------------------------------------------------------------ parts

    def _transact(self, items: list[dict[str, Any]], note: Notification | None) -> None:
        """``items`` in one TransactWriteItems, with ``note``'s two items at the end when there is one."""
        if self._notes is not None and note is not None:
            self._notes.transact(items, note)
        else:
            self._db.transact_write_items(TransactItems=items)  # type: ignore[arg-type]

    def _row_update(
        self, row: LedgerRow, expression: str, condition: str, values: dict[str, Any], *, status: bool = True
    ) -> dict[str, Any]:
        """An Update of ``row``'s item; ``status``: the expressions name its status as ``#st``."""
        update: dict[str, Any] = {
            "TableName": self._customers,
            "Key": to_item({"customer_id": row.customer_id, "sk": row.sk}),
            "UpdateExpression": expression,
            "ConditionExpression": condition,
        }
        if status:
            update["ExpressionAttributeNames"] = {"#st": "status"}
        update["ExpressionAttributeValues"] = to_values(values)
        return {"Update": update}

    def _order_update(self, row: LedgerRow, expression: str, condition: str) -> dict[str, Any]:
        """An Update of ``row``'s order moving its amount (``:a``) between the order's money fields."""
        return {
            "Update": {
                "TableName": self._customers,
                "Key": order_key(row.customer_id, row.order_id),
                "UpdateExpression": expression,
                "ConditionExpression": condition,
                "ExpressionAttributeValues": to_values({":a": row.amount_cents}),
            }
        }

    def _order_intent(self, customer_id: int, order_id: int) -> str:
        """An approval made before orders carried their payment intent: the order's, read once."""
        out = self._db.get_item(TableName=self._customers, Key=order_key(customer_id, order_id), ConsistentRead=True)
        return str(from_item(out.get("Item") or {}).get("payment_intent") or "")

    def _approval_update(
        self,
        approval_id: str,
        from_status: str,
        to_status: str,
        now: str,
        sets: dict[str, Any],
        remove: str = "",
        audit: tuple[Head, Head] | None = None,
    ) -> dict[str, Any]:
        """``audit`` (the head read, the new head): the change writes a row on the approval's own stream."""
        names = {"#st": "status"}
        values: dict[str, Any] = {":to": to_status, ":from": from_status, ":now": now}
        assignments = ["#st = :to", "updated_at = :now"]
        condition = "#st = :from"
        if audit is not None:
            (head_if, head_values), (head_sets, head_new) = head_condition(audit[0]), head_set(audit[1])
            condition = f"{condition} AND {head_if}"
            assignments.append(head_sets)
            values.update({**head_values, **head_new})
        set_assignments, set_names, set_values = Approval.assign(sets)
        assignments.extend(set_assignments)
        names.update(set_names)
        values.update(set_values)
        if remove:
            Approval.check([remove])
        return {
            "Update": {
                "TableName": self._approvals,
                "Key": to_item({"approval_id": approval_id}),
                "UpdateExpression": "SET " + ", ".join(assignments) + (f" REMOVE {remove}" if remove else ""),
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": to_values(values),
            }
        }

    @staticmethod
    def _money(row: LedgerRow) -> dict[str, Any]:
        return {"order_id": row.order_id, "amount_cents": row.amount_cents, "currency": row.currency}

    def _current(self, row: LedgerRow) -> LedgerRow:
        current = self.get(row.customer_id, row.sk)
        assert current is not None
        return current

    def _call_audit(
        self, row: LedgerRow, outcome: Outcome, now: str, actor: str, request_id: str, action: str = "payment_refund"
    ) -> AuditRecord:
        """A row of the refund key's stream (not chained yet: `chained` does that on the row's head)."""
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
