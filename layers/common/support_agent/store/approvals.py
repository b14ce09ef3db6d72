"""The Approvals table: one item per refund that waits for a support lead.

State changes are conditional on the current state, so a decision races safely: two leads, a
double click, the sweep and a replayed message each either win or see the state that did.
Every change that frees money is one transaction with the order update and its audit row, and, when the
approval belongs to a conversation, the ``approval.decided`` notification of that conversation's feed
(store/notifications.py): written only by the transaction that made the change, so a replayed decision
announces nothing twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from botocore.exceptions import ClientError

from support_agent.errors import Conflict
from support_agent.payments.vocabulary import customer_status
from support_agent.store.audit import AuditRecord
from support_agent.store.audit_chain import Head, chain, head_condition, head_set
from support_agent.store.customer_data import order_key
from support_agent.store.dynamo import (
    CONDITION_FAILED,
    DynamoDBClient,
    cancellation_as,
    from_item,
    is_conditional_failure,
    to_item,
    to_values,
)
from support_agent.store.notifications import Notification, NotificationStore

# PENDING -> APPROVED -> SETTLING (the provider has the refund, unconfirmed) -> REFUNDED | FAILED;
# PENDING -> REJECTED | EXPIRED; FAILED -> APPROVED (retry) | RELEASED. The one list: the routes' filter,
# the response model and the OpenAPI document all take it from here.
ApprovalStatus = Literal["PENDING", "APPROVED", "SETTLING", "REFUNDED", "FAILED", "REJECTED", "EXPIRED", "RELEASED"]
STATUSES: tuple[str, ...] = get_args(ApprovalStatus)
# Every approval carries entity=APPROVAL so one index lists them all, newest first.
ENTITY = "APPROVAL"
# The statuses a conversation's feed announces (``approval.decided``): the approval's end, or its refund's failure.
DECIDED: tuple[str, ...] = ("REFUNDED", "REJECTED", "EXPIRED", "FAILED", "RELEASED")


class StateConflict(Conflict):
    """The approval is not in the state the change needs; ``current`` is what it is (None: no such approval)."""

    def __init__(self, current: dict[str, Any] | None) -> None:
        self.current = current
        self.status = (current or {}).get("status")
        super().__init__(f"approval is {self.status}")


class ReservationMissing(Conflict):
    """The order no longer holds the amount this approval reserved: changed outside the code, nothing moved.

    A person must reconcile the order first (OPERATIONS.md); the message says so to the lead.
    """

    def __init__(self, approval: dict[str, Any]) -> None:
        super().__init__(
            f"order {approval.get('order_id')} no longer holds the {approval.get('amount_cents')} cents this "
            "approval reserved; nothing was changed — reconcile the order first"
        )
        self.approval = approval


@dataclass(frozen=True)
class _Change:
    """One status move: its condition, what it sets, its audit row, and whether it frees the reservation."""

    from_status: str
    to_status: str
    actor: str
    action: str  # the audit row's
    now: str
    sets: Mapping[str, Any] = field(default_factory=dict)
    add_retry: bool = False
    order_release: bool = False
    reason: str | None = None
    not_created_before: str | None = None  # adds ``created_at >= it`` to the condition (the approval's TTL)


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    next_key: dict[str, Any] | None


def decided_note(approval: dict[str, Any], status: str, now: str) -> Notification | None:
    """The ``approval.decided`` notification of ``approval`` reaching ``status``; None when there is nothing to
    announce (not a status the feed shows, or an approval no conversation owns)."""
    conversation_id = str(approval.get("conversation_id") or "")
    if status not in DECIDED or not conversation_id:
        return None
    data = {
        "approvalId": str(approval["approval_id"]),
        "orderId": int(approval["order_id"]),
        "amountCents": int(approval["amount_cents"]),
        "status": customer_status(status),
    }
    return Notification(conversation_id, "approval.decided", now, data)


class ApprovalStore:
    """``conversations_table``: where decisions are announced (store/notifications.py); without it (a reader, a
    test of the store alone) nothing is."""

    def __init__(
        self,
        client: DynamoDBClient,
        table: str,
        customer_table: str = "",
        audit_table: str = "",
        conversations_table: str = "",
    ) -> None:
        self._db = client
        self.table = table
        self._customers = customer_table
        self._audit = audit_table
        self._notes = NotificationStore(client, conversations_table) if conversations_table else None

    def _key(self, approval_id: str) -> dict[str, Any]:
        return to_item({"approval_id": approval_id})

    def get(self, approval_id: str) -> dict[str, Any] | None:
        out = self._db.get_item(TableName=self.table, Key=self._key(approval_id), ConsistentRead=True)
        item = out.get("Item")
        return from_item(item) if item else None

    def list(self, status: str | None, limit: int = 25, start_key: dict[str, Any] | None = None) -> Page:
        """Newest first: by_status for one status, by_created for all."""
        kwargs: dict[str, Any] = {"TableName": self.table, "ScanIndexForward": False, "Limit": limit}
        if status:
            kwargs.update(
                IndexName="by_status",
                KeyConditionExpression="#st = :s",
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues=to_values({":s": status}),
            )
        else:
            kwargs.update(
                IndexName="by_created",
                KeyConditionExpression="entity = :e",
                ExpressionAttributeValues=to_values({":e": ENTITY}),
            )
        if start_key:
            kwargs["ExclusiveStartKey"] = start_key
        out = self._db.query(**kwargs)
        return Page([from_item(i) for i in out.get("Items", [])], out.get("LastEvaluatedKey"))

    def _audit_row(self, approval: dict[str, Any], change: _Change) -> AuditRecord:
        return AuditRecord(
            stream=f"approval#{approval['approval_id']}",
            action=change.action,
            actor=change.actor,
            outcome=change.to_status,
            customer_id=int(approval["customer_id"]),
            created_at=change.now,
            input={"reason": change.reason} if change.reason else None,
            output={"order_id": approval["order_id"], "amount_cents": int(approval["amount_cents"])},
            conversation_id=approval.get("conversation_id"),
            approval_id=approval["approval_id"],
            refund_key=approval["approval_id"] if change.to_status == "APPROVED" else None,
        )

    def _decide(self, approval_id: str, change: _Change) -> dict[str, Any]:
        """The change's status move with its audit row (and, freeing money, the order's) atomically."""
        approval = self.get(approval_id)
        if approval is None or approval.get("status") != change.from_status:
            raise StateConflict(approval)
        # The approval's stream: the approval item holds its head, advanced with the row, conditioned on it.
        read = Head.of(approval)
        (audit,), head = chain(read, [self._audit_row(approval, change)])
        (head_if, head_values), (head_sets, head_new) = head_condition(read), head_set(head)
        names = {"#st": "status"}
        values: dict[str, Any] = {":to": change.to_status, ":from": change.from_status, **head_values, **head_new}
        condition = f"#st = :from AND {head_if}"
        if change.not_created_before is not None:
            names["#created"] = "created_at"
            values[":not_before"] = change.not_created_before
            condition += " AND #created >= :not_before"
        assignments = ["#st = :to", head_sets]
        for i, (name, value) in enumerate(change.sets.items()):
            names[f"#f{i}"] = name
            values[f":v{i}"] = value
            assignments.append(f"#f{i} = :v{i}")
        update = "SET " + ", ".join(assignments)
        if change.add_retry:
            update += " ADD retries :one"
            values[":one"] = 1
        items: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": self._key(approval_id),
                    "UpdateExpression": update,
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": to_values(values),
                }
            },
            audit.put(self._audit),
        ]
        if change.order_release:
            items.append(
                {
                    "Update": {
                        "TableName": self._customers,
                        "Key": order_key(int(approval["customer_id"]), int(approval["order_id"])),
                        "UpdateExpression": "SET available_cents = available_cents + :a, "
                        "reserved_cents = reserved_cents - :a",
                        "ConditionExpression": "reserved_cents >= :a",
                        "ExpressionAttributeValues": to_values({":a": int(approval["amount_cents"])}),
                    }
                }
            )
        dedupe = self._dedupe_release(approval, change)
        if dedupe is not None:
            items.append(dedupe)

        def cancelled(codes: list[str]) -> Conflict | None:
            """The approval's condition failed (or none was named): its state moved on; the order's: the
            reservation is gone. Anything else (the audit row's key) propagates."""
            if not codes or codes[0] == CONDITION_FAILED:
                return StateConflict(self.get(approval_id))
            if change.order_release and codes[2:3] == [CONDITION_FAILED]:
                return ReservationMissing(approval)
            return None

        # The conversation's notification goes last (its items after ours: the codes above keep their places).
        note = decided_note(approval, change.to_status, change.now) if self._notes is not None else None
        with cancellation_as(cancelled):
            if self._notes is not None and note is not None:
                self._notes.transact(items, note)
            else:
                self._db.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
        updated = self.get(approval_id)
        assert updated is not None
        return updated

    def _dedupe_release(self, approval: dict[str, Any], change: _Change) -> dict[str, Any] | None:
        """A held request's dedupe item (store/refunds.py `held_sk`) is released by the decision that ends its
        approval's PENDING (approve, reject, expire: each happens once), so the same request may be asked again;
        the later decisions (its refund, failure, release) find it released. An UpdateItem, not a delete: no role
        holds DeleteItem. While the approval is PENDING the item is its own (a reserve replaces only an item
        whose approval was decided), hence the condition."""
        dedupe_sk = approval.get("dedupe_sk")
        if not dedupe_sk or change.from_status != "PENDING" or not self._customers:
            return None
        return {
            "Update": {
                "TableName": self._customers,
                "Key": to_item({"customer_id": int(approval["customer_id"]), "sk": str(dedupe_sk)}),
                "UpdateExpression": "SET released_at = :now",
                "ConditionExpression": "approval_id = :id",
                "ExpressionAttributeValues": to_values({":id": str(approval["approval_id"]), ":now": change.now}),
            }
        }

    def approve(self, approval_id: str, lead: str, now: str, not_created_before: str | None = None) -> dict[str, Any]:
        """PENDING → APPROVED, recording who and when. The refund itself is RefundFlow's job.

        With ``not_created_before`` (now - the TTL) an approval the sweep would expire cannot be
        approved, whether or not the sweep has run: StateConflict with the approval still PENDING.
        """
        sets = {"decided_by": lead, "decided_at": now}
        change = _Change(
            "PENDING", "APPROVED", lead, "approval_approved", now, sets, not_created_before=not_created_before
        )
        return self._decide(approval_id, change)

    def mark_retry(self, approval_id: str, lead: str, now: str) -> dict[str, Any]:
        """FAILED → APPROVED again, counting retries (the retry execution is ``<id>-r<n>``)."""
        sets = {"retried_by": lead, "retried_at": now}
        change = _Change("FAILED", "APPROVED", lead, "refund_retried", now, sets, add_retry=True)
        return self._decide(approval_id, change)

    def _update_if(self, approval_id: str, update: str, condition: str, values: dict[str, Any]) -> bool:
        """One conditional UpdateItem; False when the condition does not hold."""
        try:
            self._db.update_item(
                TableName=self.table,
                Key=self._key(approval_id),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeValues=to_values(values),
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise
        return True

    def claim_notification(self, approval_id: str, now: str, until: str) -> bool:
        """Claim the leads' notification until ``until``; False when notified already or another
        claim is still live. An expired claim (its holder died before ``notified_at``) can be taken."""
        return self._update_if(
            approval_id,
            "SET notify_claim_until = :until",
            "attribute_exists(approval_id) AND attribute_not_exists(notified_at)"
            " AND (attribute_not_exists(notify_claim_until) OR notify_claim_until <= :now)",
            {":now": now, ":until": until},
        )

    def mark_notified(self, approval_id: str, now: str) -> None:
        """After the publish: ``notified_at`` set and the claim dropped, so nothing notifies again."""
        self._update_if(
            approval_id,
            "SET notified_at = :now REMOVE notify_claim_until",
            "attribute_exists(approval_id)",
            {":now": now},
        )

    def drop_notification_claim(self, approval_id: str, until: str) -> bool:
        """Remove the claim if it is still the one ending at ``until`` (ours), so a redelivery can publish."""
        return self._update_if(
            approval_id, "REMOVE notify_claim_until", "notify_claim_until = :until", {":until": until}
        )

    def release(
        self,
        approval_id: str,
        from_status: str,
        to_status: str,
        actor: str,
        action: str,
        now: str,
        reason: str | None = None,
    ) -> dict[str, Any]:
        """from_status → to_status and the reservation returned to the order, in one transaction.

        Used by reject (PENDING → REJECTED), expiry (PENDING → EXPIRED) and release
        (FAILED → RELEASED). Raises StateConflict with the current item when the state differs.
        """
        sets: dict[str, Any] = {"decided_by": actor, "decided_at": now}
        if reason:
            sets["decision_reason"] = reason
        change = _Change(from_status, to_status, actor, action, now, sets, order_release=True, reason=reason)
        return self._decide(approval_id, change)
