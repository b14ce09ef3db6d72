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
from typing import Any, ClassVar, Generic, Literal, TypeVar, get_args

from botocore.exceptions import ClientError

from support_agent.errors import Conflict
from support_agent.refunds.vocabulary import LedgerStatus, customer_status
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
from support_agent.store.records import Record, optional

# PENDING -> APPROVED -> SETTLING (the provider has the refund, unconfirmed) -> REFUNDED | FAILED;
# PENDING -> REJECTED | EXPIRED; FAILED -> APPROVED (retry) | RELEASED. The one list: the routes' filter,
# the response model and the OpenAPI document all take it from here.
ApprovalStatus = Literal["PENDING", "APPROVED", "SETTLING", "REFUNDED", "FAILED", "REJECTED", "EXPIRED", "RELEASED"]
STATUSES: tuple[str, ...] = get_args(ApprovalStatus)
# Every approval carries entity=APPROVAL so one index lists them all, newest first.
ENTITY = "APPROVAL"
# The statuses a conversation's feed announces (``approval.decided``): the approval's end, or its refund's failure.
DECIDED: tuple[str, ...] = ("REFUNDED", "REJECTED", "EXPIRED", "FAILED", "RELEASED")


@dataclass(frozen=True, kw_only=True)
class Approval(Record):
    """An approval item, every attribute any writer sets: `RefundWriter.reserve` writes it PENDING, the decisions
    here move it, and the refund's ledger (refunds/ledger.py) records the provider's refund on it. The lead's
    view (api/responses.py ``Approval.of``) is built from it."""

    KIND: ClassVar[str] = "approval"

    approval_id: str
    status: ApprovalStatus
    customer_id: int
    order_id: int
    amount_cents: int
    currency: str
    created_at: str
    entity: str = "APPROVAL"
    reason: str = ""
    conversation_id: str | None = None  # none for an MCP call: nothing to announce to
    tool_use_id: str = ""
    request_sk: str = ""
    dedupe_sk: str | None = None  # a held request's dedupe item (refunds/requests.py `held_sk`)
    payment_intent: str | None = None
    requested_by: str = ""
    # The decisions (``_Change.sets``) and the leads' notification (its claim, then when it went out).
    decided_by: str | None = None
    decided_at: str | None = None
    decision_reason: str | None = None
    retried_by: str | None = None
    retried_at: str | None = None
    retries: int = optional(0)
    notify_claim_until: str | None = None
    notified_at: str | None = None
    # The refund, as its ledger row last recorded it (refunds/ledger_table.py `_approval_update`).
    updated_at: str | None = None
    refund_provider: str | None = None
    refund_status: LedgerStatus | None = None
    refund_id: str | None = None
    refunded_at: str | None = None
    failed_at: str | None = None
    failure_error: str | None = None
    refund_failed_late_at: str | None = None
    # The head of the approval's audit stream (store/audit_chain.py), which this item owns.
    audit_n: int = optional(0)
    audit_hash: str = optional("")
    audit_event: str = optional("")

    @property
    def head(self) -> Head:
        return Head(self.audit_n, self.audit_hash, self.audit_event)


class StateConflict(Conflict):
    """The approval is not in the state the change needs; ``current`` is what it is (None: no such approval)."""

    def __init__(self, current: Approval | None) -> None:
        self.current = current
        self.status = current.status if current is not None else None
        super().__init__(f"approval is {self.status}")


class ReservationMissing(Conflict):
    """The order no longer holds the amount this approval reserved: changed outside the code, nothing moved.

    A person must reconcile the order first (OPERATIONS.md); the message says so to the lead.
    """

    def __init__(self, approval: Approval) -> None:
        super().__init__(
            f"order {approval.order_id} no longer holds the {approval.amount_cents} cents this "
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


T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    next_key: dict[str, Any] | None


def decided_note(
    conversation_id: str | None, approval_id: str, order_id: int, amount_cents: int, status: str, now: str
) -> Notification | None:
    """The ``approval.decided`` notification of an approval reaching ``status``; None when there is nothing to
    announce (not a status the feed shows, or an approval no conversation owns)."""
    if status not in DECIDED or not conversation_id:
        return None
    data = {
        "approvalId": approval_id,
        "orderId": order_id,
        "amountCents": amount_cents,
        "status": customer_status(status),
    }
    return Notification(conversation_id=conversation_id, type="approval.decided", at=now, data=data)


def query_page(
    db: DynamoDBClient, table: str, status: str | None, entity: str, limit: int, start_key: dict[str, Any] | None
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """One page of the Approvals table's items, newest first: by_status for one status, by_created for one
    entity (approvals and hand-offs share the table, store/handoffs.py)."""
    kwargs: dict[str, Any] = {"TableName": table, "ScanIndexForward": False, "Limit": limit}
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
            ExpressionAttributeValues=to_values({":e": entity}),
        )
    if start_key:
        kwargs["ExclusiveStartKey"] = start_key
    out = db.query(**kwargs)
    return [from_item(i) for i in out.get("Items", [])], out.get("LastEvaluatedKey")


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

    def get(self, approval_id: str) -> Approval | None:
        """The approval, or None (none by that id, or the table's other kind: a hand-off, a call record)."""
        out = self._db.get_item(TableName=self.table, Key=self._key(approval_id), ConsistentRead=True)
        item = out.get("Item")
        if not item or item.get("entity", {}).get("S", ENTITY) != ENTITY:
            return None
        return Approval.from_item(from_item(item))

    def list(self, status: str | None, limit: int = 25, start_key: dict[str, Any] | None = None) -> Page[Approval]:
        """Newest first: by_status for one status, by_created for all."""
        items, next_key = query_page(self._db, self.table, status, ENTITY, limit, start_key)
        return Page([Approval.from_item(i) for i in items if i.get("entity", ENTITY) == ENTITY], next_key)

    def _audit_row(self, approval: Approval, change: _Change) -> AuditRecord:
        return AuditRecord(
            stream=f"approval#{approval.approval_id}",
            action=change.action,
            actor=change.actor,
            outcome=change.to_status,
            customer_id=approval.customer_id,
            created_at=change.now,
            input={"reason": change.reason} if change.reason else None,
            output={"order_id": approval.order_id, "amount_cents": approval.amount_cents},
            conversation_id=approval.conversation_id,
            approval_id=approval.approval_id,
            refund_key=approval.approval_id if change.to_status == "APPROVED" else None,
        )

    def _decide(self, approval_id: str, change: _Change) -> Approval:
        """The change's status move with its audit row (and, freeing money, the order's) atomically."""
        approval = self.get(approval_id)
        if approval is None or approval.status != change.from_status:
            raise StateConflict(approval)
        # The approval's stream: the approval item holds its head, advanced with the row, conditioned on it.
        read = approval.head
        (audit,), head = chain(read, [self._audit_row(approval, change)])
        (head_if, head_values), (head_sets, head_new) = head_condition(read), head_set(head)
        names = {"#st": "status"}
        values: dict[str, Any] = {":to": change.to_status, ":from": change.from_status, **head_values, **head_new}
        condition = f"#st = :from AND {head_if}"
        if change.not_created_before is not None:
            names["#created"] = "created_at"
            values[":not_before"] = change.not_created_before
            condition += " AND #created >= :not_before"
        sets, set_names, set_values = Approval.assign(change.sets)
        names.update(set_names)
        values.update(set_values)
        update = "SET " + ", ".join(["#st = :to", head_sets, *sets])
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
                        "Key": order_key(approval.customer_id, approval.order_id),
                        "UpdateExpression": "SET available_cents = available_cents + :a, "
                        "reserved_cents = reserved_cents - :a",
                        "ConditionExpression": "reserved_cents >= :a",
                        "ExpressionAttributeValues": to_values({":a": approval.amount_cents}),
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
        note = None
        if self._notes is not None:
            note = decided_note(
                approval.conversation_id,
                approval.approval_id,
                approval.order_id,
                approval.amount_cents,
                change.to_status,
                change.now,
            )
        with cancellation_as(cancelled):
            if self._notes is not None and note is not None:
                self._notes.transact(items, note)
            else:
                self._db.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
        updated = self.get(approval_id)
        assert updated is not None
        return updated

    def _dedupe_release(self, approval: Approval, change: _Change) -> dict[str, Any] | None:
        """A held request's dedupe item (refunds/requests.py `held_sk`) is released by the decision that ends its
        approval's PENDING (approve, reject, expire: each happens once), so the same request may be asked again;
        the later decisions (its refund, failure, release) find it released. An UpdateItem, not a delete: no role
        holds DeleteItem. While the approval is PENDING the item is its own (a reserve replaces only an item
        whose approval was decided), hence the condition."""
        if not approval.dedupe_sk or change.from_status != "PENDING" or not self._customers:
            return None
        return {
            "Update": {
                "TableName": self._customers,
                "Key": to_item({"customer_id": approval.customer_id, "sk": approval.dedupe_sk}),
                "UpdateExpression": "SET released_at = :now",
                "ConditionExpression": "approval_id = :id",
                "ExpressionAttributeValues": to_values({":id": approval.approval_id, ":now": change.now}),
            }
        }

    def approve(self, approval_id: str, lead: str, now: str, not_created_before: str | None = None) -> Approval:
        """PENDING → APPROVED, recording who and when. The refund itself is RefundFlow's job.

        With ``not_created_before`` (now - the TTL) an approval the sweep would expire cannot be
        approved, whether or not the sweep has run: StateConflict with the approval still PENDING.
        """
        sets = {"decided_by": lead, "decided_at": now}
        change = _Change(
            "PENDING", "APPROVED", lead, "approval_approved", now, sets, not_created_before=not_created_before
        )
        return self._decide(approval_id, change)

    def mark_retry(self, approval_id: str, lead: str, now: str) -> Approval:
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
    ) -> Approval:
        """from_status → to_status and the reservation returned to the order, in one transaction.

        Used by reject (PENDING → REJECTED), expiry (PENDING → EXPIRED) and release
        (FAILED → RELEASED). Raises StateConflict with the current item when the state differs.
        """
        sets: dict[str, Any] = {"decided_by": actor, "decided_at": now}
        if reason:
            sets["decision_reason"] = reason
        change = _Change(from_status, to_status, actor, action, now, sets, order_release=True, reason=reason)
        return self._decide(approval_id, change)
