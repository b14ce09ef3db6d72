"""A refund request's money writes: each one conditional TransactWriteItems with its own audit row.

A direct refund's REQUESTED ledger row with its reservation (`RefundWriter.direct`), an approval request's
PENDING approval with its reservation (`RefundWriter.reserve`), and the dedupe item of a held request (an MCP
call without an idempotency key). What is asked for, and which of them it gets, is decide.py's.

Per order the invariant ``available + reserved + refunded = total`` holds after every write: each
transaction moves an amount between those fields and is conditioned on ``available`` covering it.
DynamoDB conditions cannot add attributes, so the threshold rule
``refunded + reserved + A <= T`` is checked as the equivalent ``available >= total - T + A``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from support_agent.audit.chain import Head
from support_agent.errors import LeaseLost
from support_agent.refunds.ledger_row import LedgerRow
from support_agent.refunds.ledger_table import LedgerTable
from support_agent.store.approvals import Approval
from support_agent.store.audit import AuditRecord
from support_agent.store.audited_write import AuditedWrite
from support_agent.store.customer_data import order_key
from support_agent.store.dynamo import (
    CONDITION_FAILED,
    DynamoDBClient,
    cancellation_as,
    dumps,
    from_item,
    put_new,
    to_item,
    to_values,
)

_RESERVE = "SET available_cents = available_cents - :a, reserved_cents = reserved_cents + :a"


def held_sk(order_id: int, amount_cents: int) -> str:
    """The dedupe item of a held request (an MCP call without a key): one per customer, order and amount while
    its approval is PENDING (written by `RefundWriter.reserve`, removed by the approval's decision)."""
    return f"HELD#{order_id}#{amount_cents}"


class HeldExists(Exception):
    """An identical held request is pending: its approval answers this one (nothing was written)."""

    def __init__(self, approval_id: str, result: dict[str, Any]) -> None:
        super().__init__(f"an identical request is pending as {approval_id}")
        self.approval_id = approval_id
        self.result = result


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
    # A chat turn's lease check (`ToolContext.fence`): the last item of the money write's transaction, so a turn
    # that lost its conversation's lease cannot reserve or refund (`LeaseLost`).
    fence: dict[str, Any] | None = None
    # The order statuses the policy allows this refund in (its `request_refund` rule; a cancellation's refund:
    # CANCELLED), conditioned on in the write; ``cancelled_by``: only the order this proposal cancelled.
    statuses: tuple[str, ...] = ("DELIVERED", "SHIPPED")
    cancelled_by: str = ""
    policy_version: int | None = None  # the support policy's version the decision applied
    action: str = "request_refund"  # the declared action asking (actions/): a cancellation's refund names its own


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
            "conversation_id": r.conversation_id or None,  # an MCP call's: none
            "tool_use_id": r.tool_use_id,
            "created_at": r.now,
            "result": dumps(result),
            "policy_version": r.policy_version,
            "action": None if r.action == "request_refund" else r.action,
        }
        return put_new(self._customers, row, "sk")

    def _first_row(
        self, r: RefundRequest, stream: str, refund_key: str, action: str, outcome: str, result: dict[str, Any]
    ) -> AuditedWrite:
        """The first row of a new stream (the refund key's, or the approval's), chained from an empty head: its
        owner item is written in the same transaction, holding the new head (`AuditedWrite.put`)."""
        return AuditedWrite.of(self._audit, Head(), [self._record(r, stream, refund_key, action, outcome, result)])

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
            tool=r.action,
            input={"order_id": r.order_id, "amount_cents": r.amount_cents, "reason": r.reason},
            output=result,
            conversation_id=r.conversation_id or None,
            approval_id=result.get("approval_id"),
            request_id=r.request_id,
            tool_use_id=r.tool_use_id,
            refund_key=refund_key,
            policy_version=r.policy_version,
        )

    def _order_update(self, r: RefundRequest, set_expr: str, need: int) -> dict[str, Any]:
        """The order's money move, conditioned on its status being one ``r`` allows (and, for a cancellation's
        refund, on this cancellation), its total unchanged and ``available`` covering ``need``."""
        statuses = {f":s{i}": status for i, status in enumerate(r.statuses)}
        condition = f"#st IN ({', '.join(statuses)}) AND total_cents = :total AND available_cents >= :need"
        values: dict[str, Any] = {**statuses, ":total": r.total_cents, ":need": need, ":a": r.amount_cents}
        if r.cancelled_by:
            condition += " AND cancelled_by = :cancelled_by"
            values[":cancelled_by"] = r.cancelled_by
        return {
            "Update": {
                "TableName": self._customers,
                "Key": order_key(r.customer_id, r.order_id),
                "UpdateExpression": set_expr,
                "ConditionExpression": condition,
                "ExpressionAttributeNames": {"#st": "status"},
                "ExpressionAttributeValues": to_values(values),
            }
        }

    def _transact(self, items: list[dict[str, Any]], fence: dict[str, Any] | None) -> None:
        """Any cancellation is a race; the request row's own condition (the first item) says it exists. With a
        ``fence`` (the turn's lease check, appended last) failing, the turn lost its lease: `LeaseLost`."""
        if fence is not None:
            items = [*items, fence]

        def cancelled(codes: list[str]) -> Exception:
            if fence is not None and codes[-1:] == [CONDITION_FAILED]:
                return LeaseLost("the conversation's lease was lost before the refund was written; nothing was")
            return RefundRace(request_exists=codes[:1] == [CONDITION_FAILED])

        with cancellation_as(cancelled):
            self._db.transact_write_items(TransactItems=items)  # type: ignore[arg-type]

    def direct(self, r: RefundRequest, threshold_cents: int, row: LedgerRow) -> LedgerRow:
        """Write the REQUESTED ledger row and reserve the amount, before any provider call; the row as written.

        Only while refunded + reserved + amount stays within the threshold; the provider's answer then
        moves the reservation to refunded (or back), in `RefundLedger.record` (settlements.py). The audit row starts the
        refund key's stream (``refund#<key>``), whose head the ledger row holds.
        """
        need = max(r.amount_cents, r.total_cents - threshold_cents + r.amount_cents)
        write = self._first_row(
            r,
            row.audit_stream,
            row.refund_key,
            "refund",
            "REQUESTED",
            {"status": "REFUND_IN_PROGRESS", "attempt_key": row.attempt_key},
        )
        self._transact(
            [
                *write.put(self._customers, LedgerTable.new_row(row, r.now, {"reason": r.reason}), "sk"),  # first
                self._order_update(r, _RESERVE, need),
            ],
            r.fence,
        )
        return replace(row, extra={**row.extra, **write.head.attributes()})

    def held(self, customer_id: int, order_id: int, amount_cents: int) -> tuple[dict[str, Any] | None, str | None]:
        """The pending held request identical to this one: (its answer, None); or (None, the approval id of a
        stale dedupe item, whose approval was decided without removing it, for `reserve` to replace); or
        (None, None)."""
        out = self._db.get_item(
            TableName=self._customers,
            Key=to_item({"customer_id": customer_id, "sk": held_sk(order_id, amount_cents)}),
            ConsistentRead=True,
        )
        item = from_item(out["Item"]) if out.get("Item") else None
        if item is None or item.get("released_at"):
            return None, None  # none, or released by its approval's decision: a new request may take it
        approval_id = str(item["approval_id"])
        approval = self._db.get_item(
            TableName=self._approvals,
            Key=to_item({"approval_id": approval_id}),
            ConsistentRead=True,
            ProjectionExpression="#st",
            ExpressionAttributeNames={"#st": "status"},
        ).get("Item")
        if approval is not None and from_item(approval).get("status") == "PENDING":
            return dict(json.loads(item["result"])), None
        return None, approval_id

    def reserve(
        self,
        r: RefundRequest,
        approval_id: str,
        result: dict[str, Any],
        held: bool = False,
        replaces: str | None = None,
    ) -> None:
        """Write the PENDING approval and reserve the amount, in one transaction; the audit row starts the
        approval's stream (``approval#<id>``), whose head the approval holds.

        ``held`` (an MCP call without a key): the same transaction writes the request's dedupe item
        (`held_sk`), conditioned on no identical request pending (or on it still being the stale one
        ``replaces`` names), so two concurrent identical calls make one approval; `HeldExists` names the
        other. The approval carries ``dedupe_sk``: its decision releases the item (store/approvals.py)."""
        write = self._first_row(
            r, f"approval#{approval_id}", approval_id, "refund_requested", "PENDING_APPROVAL", result
        )
        approval = Approval(
            approval_id=approval_id,
            status="PENDING",
            customer_id=r.customer_id,
            order_id=r.order_id,
            amount_cents=r.amount_cents,
            currency=r.currency,
            reason=r.reason,
            conversation_id=r.conversation_id or None,  # none for an MCP call: nothing to announce to
            tool_use_id=r.tool_use_id,
            request_sk=r.request_sk,
            dedupe_sk=held_sk(r.order_id, r.amount_cents) if held else None,
            payment_intent=r.payment_intent or None,
            requested_by=r.actor,
            created_at=r.now,
            action=None if r.action == "request_refund" else r.action,
            policy_version=r.policy_version,
        )
        items = [
            self._request_row(r, "approval", "PENDING_APPROVAL", result),  # first: its condition says "exists"
            self._order_update(r, _RESERVE, r.amount_cents),
            *write.put(self._approvals, approval.item(), "approval_id"),
        ]
        if not held:
            self._transact(items, r.fence)
            return
        items.append(self._dedupe_put(r, approval_id, result, replaces))
        try:
            self._transact(items, r.fence)
        except RefundRace as race:
            if race.request_exists:
                raise
            pending, _stale = self.held(r.customer_id, r.order_id, r.amount_cents)
            if pending is not None:
                raise HeldExists(str(pending.get("approval_id")), pending) from None
            raise

    def _dedupe_put(
        self, r: RefundRequest, approval_id: str, result: dict[str, Any], replaces: str | None
    ) -> dict[str, Any]:
        """The held request's dedupe item (no ``updated_at``: nothing indexes it)."""
        item = {
            "customer_id": r.customer_id,
            "sk": held_sk(r.order_id, r.amount_cents),
            "approval_id": approval_id,
            "order_id": r.order_id,
            "amount_cents": r.amount_cents,
            "created_at": r.now,
            "result": dumps(result),
        }
        # Free: absent, released by its approval's decision, or (``replaces``) the stale item read before.
        condition = "attribute_not_exists(sk) OR attribute_exists(released_at)"
        put: dict[str, Any] = {"TableName": self._customers, "Item": to_item(item), "ConditionExpression": condition}
        if replaces is not None:
            put["ConditionExpression"] = f"{condition} OR approval_id = :stale"
            put["ExpressionAttributeValues"] = to_values({":stale": replaces})
        return {"Put": put}
