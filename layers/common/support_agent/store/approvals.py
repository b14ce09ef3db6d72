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

from support_agent.errors import Conflict
from support_agent.refunds.vocabulary import LedgerStatus, customer_status
from support_agent.store.audit import AuditRecord
from support_agent.store.audited_write import AuditedWrite, StreamOwner
from support_agent.store.customer_data import order_move
from support_agent.store.dynamo import (
    CONDITION_FAILED,
    DynamoDBClient,
    cancellation_as,
    from_item,
    to_item,
    to_values,
    update_if,
)
from support_agent.store.notifications import Notification, NotificationStore
from support_agent.store.records import optional

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
class Approval(StreamOwner):
    """An approval item, every attribute any writer sets: `RefundWriter.reserve` writes it PENDING, the decisions
    here move it, and the refund's ledger (refunds/ledger.py) records the provider's refund on it. It owns the
    approval's audit stream (``approval#<id>``: `StreamOwner`). The lead's view (api/responses.py
    ``Approval.of``) is built from it."""

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
    # The declared action that asked (actions/): none for a refund request; "cancel_order" for a cancellation's
    # refund, whose rejection opens a hand-off (approvals/decisions.py). The policy version it was decided under.
    action: str | None = None
    policy_version: int | None = None
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

    def audit_row(
        self,
        action: str,
        actor: str,
        outcome: str,
        now: str,
        output: Any,
        *,
        input: Any = None,
        request_id: str | None = None,
        refund_key: str | None = None,
    ) -> AuditRecord:
        """A row of this approval's own stream (``approval#<id>``): a decision, or its refund failing unstarted."""
        return AuditRecord(
            f"approval#{self.approval_id}",
            action,
            actor,
            outcome,
            self.customer_id,
            now,
            input=input,
            output=output,
            conversation_id=self.conversation_id or None,
            approval_id=self.approval_id,
            request_id=request_id,
            refund_key=refund_key,
        )

    def decided_note(self, status: str, now: str) -> Notification | None:
        """This approval's ``approval.decided`` notification on reaching ``status`` (module `decided_note`)."""
        return decided_note(self.conversation_id, self.approval_id, self.order_id, self.amount_cents, status, now)


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
# A transaction's items (a name the store's annotations can use: its own `list` method hides the builtin there).
TransactItems = list[dict[str, Any]]


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


def status_move(
    write: AuditedWrite,
    table: str,
    approval_id: str,
    from_status: str,
    to_status: str,
    sets: Mapping[str, Any],
    *,
    remove: str = "",
    add_retry: bool = False,
    not_created_before: str | None = None,
) -> list[dict[str, Any]]:
    """An approval's move from ``from_status`` (its condition) to ``to_status``, setting ``sets`` (declared fields)
    and removing ``remove`` (a declared attribute), with ``write``'s rows on its stream (none with `UNAUDITED`):
    a lead's decision here, a refund's progress in the ledger (refunds/ledger_table.py). ``add_retry`` counts a
    lead's retry; ``not_created_before`` refuses an approval created before it (the approval's TTL)."""
    assignments, names, values = Approval.assign(sets)
    condition, clauses = "#st = :from", []
    if not_created_before is not None:
        condition += " AND #created >= :not_before"
        names["#created"], values[":not_before"] = "created_at", not_created_before
    if remove:
        Approval.check([remove])
        clauses.append(f"REMOVE {remove}")
    if add_retry:
        clauses.append("ADD retries :one")
        values[":one"] = 1
    return write.update(
        table,
        {"approval_id": approval_id},
        ["#st = :to", *assignments],
        condition,
        {":to": to_status, ":from": from_status, **values},
        {"#st": "status", **names},
        " ".join(clauses),
    )


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
        self._notes = NotificationStore(client, conversations_table)

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

    @staticmethod
    def _audit_row(approval: Approval, change: _Change) -> AuditRecord:
        return approval.audit_row(
            change.action,
            change.actor,
            change.to_status,
            change.now,
            {"order_id": approval.order_id, "amount_cents": approval.amount_cents},
            input={"reason": change.reason} if change.reason else None,
            refund_key=approval.approval_id if change.to_status == "APPROVED" else None,  # its refund starts
        )

    def _decide(self, approval_id: str, change: _Change) -> Approval:
        """The change's status move with its audit row (and, freeing money, the order's) atomically."""
        approval = self.get(approval_id)
        if approval is None or approval.status != change.from_status:
            raise StateConflict(approval)
        items = self._move(approval, change)  # the approval's update, then its row
        if change.order_release:
            expression = "SET available_cents = available_cents + :a, reserved_cents = reserved_cents - :a"
            items.append(
                order_move(self._customers, approval.customer_id, approval.order_id, approval.amount_cents, expression)
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
        with cancellation_as(cancelled):
            self._notes.transact(items, approval.decided_note(change.to_status, change.now))
        updated = self.get(approval_id)
        assert updated is not None
        return updated

    def _move(self, approval: Approval, change: _Change) -> TransactItems:
        """The approval's update and its audit row, on the approval's own stream (the item holds its head)."""
        return status_move(
            AuditedWrite.of(self._audit, approval.head, [self._audit_row(approval, change)]),
            self.table,
            approval.approval_id,
            change.from_status,
            change.to_status,
            change.sets,
            add_retry=change.add_retry,
            not_created_before=change.not_created_before,
        )

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
        return update_if(
            self._db,
            TableName=self.table,
            Key=self._key(approval_id),
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeValues=to_values(values),
        )

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
