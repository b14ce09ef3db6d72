"""The refund ledger: one row per refund key, the only record of what was asked of the payment provider.

A row is written REQUESTED, with the reservation and its audit row, before any provider call; every
request of one attempt is built from the row alone (`LedgerRow.request`), so a repair, a sweep and a
replayed execution send byte-identical parameters. Each provider call's outcome is recorded by one
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
caller says so (``announce``: the webhook and the payment sweep, ``refund.settled``), never the chat's own
call, whose tool result already says it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

from botocore.exceptions import ClientError

from support_agent.payments.vocabulary import LedgerStatus, customer_status
from support_agent.refunds.keys import approved_refund_sk, attempt_key
from support_agent.store.approvals import Approval, decided_note
from support_agent.store.audit import AuditRecord
from support_agent.store.audit_chain import Head, chain, head_condition, head_set
from support_agent.store.customer_data import order_key
from support_agent.store.dynamo import (
    CONDITION_FAILED,
    DynamoDBClient,
    cancellation_as,
    error_code,
    from_item,
    is_conditional_failure,
    put_new,
    to_item,
    to_values,
)
from support_agent.store.notifications import Notification, NotificationStore
from support_agent.store.records import Record, optional

UNSETTLED: tuple[LedgerStatus, ...] = ("REQUESTED", "SETTLING")
FINAL: tuple[LedgerStatus, ...] = ("SUCCEEDED", "FAILED")
# Index keys (template.yaml, CustomerDataTable): `unsettled` holds only REQUESTED/SETTLING rows, by
# attempt_started_at (the payment sweep); `ledger_by_created` every ledger row, by created_at (reconciliation).
UNSETTLED_INDEX, UNSETTLED_INDEX_KEY = "unsettled", "UNSETTLED"
LEDGER_INDEX, LEDGER_INDEX_KEY = "ledger_by_created", "LEDGER"
Kind = Literal["direct", "approved"]
# A refund key's writers racing on its audit stream (the tool, RefundFlow executions, the webhook, the sweep): each
# lost race means another writer appended a row, so this bounds a burst of 32 writers on one key.
HEAD_RETRIES = 32


@dataclass(frozen=True, kw_only=True)
class LedgerRow(Record):
    """A ledger row, every attribute this module reads; the rest (timestamps, the index keys, the audit head)
    stay in ``extra``. `new_row_item` writes a new one from `Record.item`."""

    KIND: ClassVar[str] = "ledger row"

    customer_id: int
    sk: str
    kind: Kind
    refund_key: str
    order_id: int
    amount_cents: int
    currency: str
    payment_intent: str = ""  # none on a row written before orders carried one
    status: LedgerStatus
    attempt: int
    provider: str = "none"
    conversation_id: str = optional("")
    approval_id: str = optional("")
    tool_use_id: str = optional("")  # a direct refund's tool call
    refund_id: str = optional("")
    failure_code: str = optional("")

    @property
    def settled(self) -> bool:
        return self.status in FINAL

    @property
    def attempt_key(self) -> str:
        return attempt_key(self.refund_key, self.attempt)

    @property
    def audit_head(self) -> Head:
        """The head of the refund key's audit stream (``refund#<key>``), which this row owns."""
        return Head.of(self.extra)

    @property
    def audit_stream(self) -> str:
        return f"refund#{self.refund_key}"

    @property
    def metadata(self) -> dict[str, str]:
        """What the provider stores with the refund (the port adds refund_key and attempt)."""
        meta = {"customer_id": str(self.customer_id), "order_id": str(self.order_id)}
        if self.approval_id:
            meta["approval_id"] = self.approval_id
        if self.conversation_id:
            meta["conversation_id"] = self.conversation_id
        return meta


@dataclass(frozen=True)
class Outcome:
    """What one provider call (and, after a refusal, the look-up) established."""

    status: LedgerStatus  # SUCCEEDED, SETTLING or FAILED
    refund_id: str = ""
    provider_status: str = ""  # the provider's word (pending, succeeded...), or what went wrong
    failure_code: str = ""
    unknown: bool = False  # True: no answer (timeout, 5xx, unavailable); repeat the same attempt later


class LedgerRace(Exception):
    """The row, the order or the approval was not in the state the write needs; re-read and decide."""


class Duplicate(LedgerRace):
    """A caller's extra item already exists (`record`/`fail_late` ``extra_items``): this change was applied."""


class ReservationMissing(LedgerRace):
    """The order no longer holds the approved amount reserved (changed underneath): ask the provider nothing."""


class RefundLedger:
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

    def begin_approved(self, approval: Approval, provider: str, now: str, actor: str) -> LedgerRow:
        """APPROVED -> SETTLING with the refund's REQUESTED row, in one transaction, before the provider call.

        The row is new (attempt 1), or a FAILED one a lead retried (attempt ``n + 1``). `LedgerRace` when
        the approval is no longer APPROVED or the row is neither absent nor FAILED; `ReservationMissing`
        when the order no longer holds the amount reserved: a refund made then could never be recorded
        (SUCCEEDED moves reserved -> refunded), so the provider is not asked (`fail_unstarted`).
        """
        approval_id, customer_id = approval.approval_id, approval.customer_id
        sk = approved_refund_sk(approval_id)
        current = self.get(customer_id, sk)
        row = LedgerRow(
            customer_id=customer_id,
            sk=sk,
            kind="approved",
            refund_key=approval_id,
            order_id=approval.order_id,
            amount_cents=approval.amount_cents,
            currency=approval.currency,
            payment_intent=approval.payment_intent or self._order_intent(customer_id, approval.order_id),
            status="REQUESTED",
            attempt=1 if current is None else current.attempt + 1,
            provider=provider,
            conversation_id=approval.conversation_id or "",
            approval_id=approval_id,
        )
        record = AuditRecord(
            stream=row.audit_stream,
            action="refund_started",
            actor=actor,
            outcome="SETTLING",
            customer_id=customer_id,
            created_at=now,
            output={**self._money(row), "attempt_key": row.attempt_key, "provider": provider},
            conversation_id=row.conversation_id or None,
            approval_id=approval_id,
            refund_key=row.refund_key,
        )
        read = Head() if current is None else current.audit_head
        (audit,), head = chain(read, [record])
        (head_if, head_values), (head_sets, head_new) = head_condition(read), head_set(head)
        if current is None:
            ledger_item = self.new_row_item(self._customers, row, now, head.attributes())
        elif current.status == "FAILED":
            ledger_item = {
                "Update": {
                    "TableName": self._customers,
                    "Key": to_item({"customer_id": customer_id, "sk": sk}),
                    "UpdateExpression": "SET #st = :requested, attempt = :n, attempt_started_at = :now, "
                    f"updated_at = :now, provider = :provider, unsettled = :unsettled, {head_sets} "
                    "REMOVE refund_id, failure_code, provider_status",
                    "ConditionExpression": f"#st = :failed AND attempt = :prev AND {head_if}",
                    "ExpressionAttributeNames": {"#st": "status"},
                    "ExpressionAttributeValues": to_values(
                        {
                            ":requested": "REQUESTED",
                            ":failed": "FAILED",
                            ":n": row.attempt,
                            ":prev": current.attempt,
                            ":now": now,
                            ":provider": provider,
                            ":unsettled": UNSETTLED_INDEX_KEY,
                            **head_values,
                            **head_new,
                        }
                    ),
                }
            }
        else:
            raise LedgerRace(f"refund {sk} is {current.status}")
        items = [
            self._approval_update(
                approval_id,
                "APPROVED",
                "SETTLING",
                now,
                {"refund_provider": provider, "refund_status": "REQUESTED"},
                remove="refund_id",  # a lead's retry: the failed attempt's id is not this one's
            ),
            ledger_item,
            audit.put(self._audit),
            {
                "ConditionCheck": {
                    "TableName": self._customers,
                    "Key": order_key(customer_id, row.order_id),
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
        return replace(row, extra=head.attributes())

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
        (audit,), head = chain(read, [record])
        update = self._approval_update(
            approval_id, "APPROVED", "FAILED", now, {"failed_at": now, "failure_error": code}, audit=(read, head)
        )
        items = [update, audit.put(self._audit)]
        note = None
        if self._notes is not None:
            note = decided_note(
                approval.conversation_id, approval_id, approval.order_id, approval.amount_cents, "FAILED", now
            )
        with cancellation_as(lambda codes: LedgerRace(f"approval {approval_id} changed")):
            self._transact(items, note)

    def record(
        self,
        row: LedgerRow,
        outcome: Outcome,
        now: str,
        actor: str,
        request_id: str = "",
        extra_items: Sequence[dict[str, Any]] = (),
        *,
        announce: bool = False,
    ) -> LedgerRow:
        """Write one provider call's outcome: the row, the order's money and the approval, with the audit row.

        Conditioned on the row still being unsettled at this attempt; when it is not (another writer
        recorded first), only the audit row is written and the row as it now is comes back.
        ``extra_items``: the caller's own conditional writes, in the same transaction (a webhook's dedupe
        item), so the change and its marker are written together or not at all; `Duplicate` when one of
        their conditions fails. A final outcome is announced with it: an approval's always, a direct
        refund's when ``announce`` (the module's docstring).
        """
        return self._while_head_moves(
            row, lambda r: self._record(r, outcome, now, actor, request_id, extra_items, announce)
        )

    def _record(
        self,
        row: LedgerRow,
        outcome: Outcome,
        now: str,
        actor: str,
        request_id: str,
        extra_items: Sequence[dict[str, Any]],
        announce: bool,
    ) -> LedgerRow:
        record = self._call_audit(row, outcome, now, actor, request_id)
        nothing_new = (
            outcome.status == "SETTLING" and row.status == "SETTLING" and outcome.refund_id in ("", row.refund_id)
        )
        if nothing_new and not extra_items:
            self._audit_only(row, record)  # nothing new to record: the call is still audited
            return row
        items = self._head_only(row, record) if nothing_new else self._outcome_items(row, outcome, now, record)
        note = None if nothing_new else self._settled_note(row, outcome.status, now, announce)
        cancelled = self._outcome_cancelled(row, len(items), len(extra_items))
        items.extend(extra_items)
        try:
            with cancellation_as(cancelled):
                self._transact(items, note)
        except _Superseded:
            current = self.get(row.customer_id, row.sk)
            assert current is not None
            if current.status == row.status and current.attempt == row.attempt and current.refund_id == row.refund_id:
                raise _HeadMoved(current) from None
            if _tells_more(current, row.attempt, outcome):
                # Another writer recorded less than this call learned (SETTLING, outcome unknown, while this call
                # has the provider's answer for the same attempt): record ours on the row as it now is.
                raise _HeadMoved(current) from None
            self._audit_only(current, record)  # another writer recorded first: this call is still audited
            return current
        if nothing_new:
            return row
        current = self.get(row.customer_id, row.sk)
        assert current is not None
        return current

    def _outcome_items(self, row: LedgerRow, outcome: Outcome, now: str, record: AuditRecord) -> list[dict[str, Any]]:
        """`record`'s transaction: the row's update first (its condition decides `_Superseded`), then the rest."""
        audit, head_if, head_sets, head_values = self._chained(row, record)
        names = {"#st": "status"}
        values: dict[str, Any] = {
            **head_values,
            ":to": outcome.status,
            ":n": row.attempt,
            ":now": now,
            ":requested": "REQUESTED",
            ":settling": "SETTLING",
        }
        sets = ["#st = :to", "updated_at = :now", head_sets]
        for name, value in (
            ("refund_id", outcome.refund_id),
            ("provider_status", outcome.provider_status),
            ("failure_code", outcome.failure_code),
        ):
            if value:
                sets.append(f"{name} = :{name}")
                values[f":{name}"] = value
        update = "SET " + ", ".join(sets)
        if outcome.status in FINAL:
            update = "SET " + ", ".join([*sets, "settled_at = :now"]) + " REMOVE unsettled"
        items: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self._customers,
                    "Key": to_item({"customer_id": row.customer_id, "sk": row.sk}),
                    "UpdateExpression": update,
                    "ConditionExpression": f"#st IN (:requested, :settling) AND attempt = :n AND {head_if}",
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": to_values(values),
                }
            },
            audit.put(self._audit),
        ]
        order_move = self._order_move(row, outcome.status)
        if order_move:
            items.append(order_move)
        if row.kind == "approved":
            approval_sets: dict[str, Any] = {"refund_status": outcome.status}
            if outcome.refund_id:
                approval_sets["refund_id"] = outcome.refund_id
            to_status = {"SUCCEEDED": "REFUNDED", "FAILED": "FAILED"}.get(outcome.status, "SETTLING")
            if to_status == "REFUNDED":
                approval_sets["refunded_at"] = now
            if to_status == "FAILED":
                approval_sets.update(failed_at=now, failure_error=outcome.failure_code or "refused")
            items.append(self._approval_update(row.approval_id, "SETTLING", to_status, now, approval_sets))
        return items

    def fail_late(
        self,
        row: LedgerRow,
        refund_id: str,
        code: str,
        now: str,
        actor: str,
        request_id: str = "",
        extra_items: Sequence[dict[str, Any]] = (),
        *,
        announce: bool = False,
    ) -> LedgerRow:
        """SUCCEEDED -> FAILED: the provider failed a refund it had made (Stripe's ``failed`` after ``succeeded``).

        The money moves back: a direct refund's to available; an approved one's to reserved, its approval
        REFUNDED -> FAILED for a lead to retry (attempt ``n + 1``) or release. Conditioned on the row still
        SUCCEEDED with this refund id; otherwise the row as it is comes back and nothing changes. Announced
        as `record` announces a FAILED outcome.
        """
        return self._while_head_moves(
            row, lambda r: self._fail_late(r, refund_id, code, now, actor, request_id, extra_items, announce)
        )

    @staticmethod
    def _while_head_moves(row: LedgerRow, write: Callable[[LedgerRow], LedgerRow]) -> LedgerRow:
        """``write(row)`` again, with the row as it now is, while only its audit stream moved on (another call
        audited meanwhile); LedgerRace after HEAD_RETRIES."""
        for _ in range(HEAD_RETRIES):
            try:
                return write(row)
            except _HeadMoved as moved:
                row = moved.current
        raise LedgerRace(f"refund {row.sk}: its audit stream kept moving")

    def _fail_late(
        self,
        row: LedgerRow,
        refund_id: str,
        code: str,
        now: str,
        actor: str,
        request_id: str,
        extra_items: Sequence[dict[str, Any]],
        announce: bool,
    ) -> LedgerRow:
        audit, head_if, head_sets, head_values = self._chained(
            row,
            self._call_audit(
                row,
                Outcome("FAILED", refund_id, "failed", code or "failed"),
                now,
                actor,
                request_id,
                "refund_failed_late",
            ),
        )
        sets = (
            "SET #st = :failed, failure_code = :code, provider_status = :pstatus, failed_late_at = :now, "
            f"updated_at = :now, {head_sets}"
        )
        items: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self._customers,
                    "Key": to_item({"customer_id": row.customer_id, "sk": row.sk}),
                    "UpdateExpression": sets,
                    "ConditionExpression": f"#st = :succeeded AND refund_id = :rid AND {head_if}",
                    "ExpressionAttributeNames": {"#st": "status"},
                    "ExpressionAttributeValues": to_values(
                        {
                            **head_values,
                            ":failed": "FAILED",
                            ":succeeded": "SUCCEEDED",
                            ":rid": refund_id,
                            ":code": code or "failed",
                            ":pstatus": "failed",
                            ":now": now,
                        }
                    ),
                }
            },
            audit.put(self._audit),
            {
                "Update": {
                    "TableName": self._customers,
                    "Key": order_key(row.customer_id, row.order_id),
                    "UpdateExpression": "SET refunded_cents = refunded_cents - :a, "
                    + (
                        "reserved_cents = reserved_cents + :a"
                        if row.kind == "approved"
                        else "available_cents = available_cents + :a"
                    ),
                    "ConditionExpression": "refunded_cents >= :a",
                    "ExpressionAttributeValues": to_values({":a": row.amount_cents}),
                }
            },
        ]
        if row.kind == "approved":
            items.append(
                self._approval_update(
                    row.approval_id,
                    "REFUNDED",
                    "FAILED",
                    now,
                    {
                        "refund_status": "FAILED",
                        "failed_at": now,
                        "failure_error": code or "failed",
                        "refund_failed_late_at": now,
                    },
                )
            )

        cancelled = self._outcome_cancelled(row, len(items), len(extra_items))
        items.extend(extra_items)
        try:
            with cancellation_as(cancelled):
                self._transact(items, self._settled_note(row, "FAILED", now, announce))
        except _Superseded:
            current = self.get(row.customer_id, row.sk)
            assert current is not None
            if current.status == "SUCCEEDED" and current.refund_id == refund_id:
                raise _HeadMoved(current) from None
            return current
        current = self.get(row.customer_id, row.sk)
        assert current is not None
        return current

    def mark_sent(self, row: LedgerRow, now: str) -> LedgerRow:
        """Stamp ``attempt_sent_at`` before a request of the row's current attempt goes to the provider; the row
        as stamped. Every send is stamped (the first, a repair's, a sweep's resend, a replayed execution's), so
        `new_attempt` can tell "no request of attempt ``n`` may still be in flight" from the stamp alone.
        Conditioned on the row still being unsettled at this attempt: `LedgerRace` otherwise (settled, or a
        new attempt began: the caller re-reads and sends that one's key, never an older one)."""
        try:
            self._db.update_item(
                TableName=self._customers,
                Key=to_item({"customer_id": row.customer_id, "sk": row.sk}),
                UpdateExpression="SET attempt_sent_at = :now",
                ConditionExpression="#st IN (:requested, :settling) AND attempt = :n",
                ExpressionAttributeNames={"#st": "status"},
                ExpressionAttributeValues=to_values(
                    {":now": now, ":requested": "REQUESTED", ":settling": "SETTLING", ":n": row.attempt}
                ),
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                raise LedgerRace(f"refund {row.sk} changed before its attempt {row.attempt} was sent") from None
            raise
        return replace(row, extra={**row.extra, "attempt_sent_at": now})

    def new_attempt(self, row: LedgerRow, now: str, actor: str) -> LedgerRow:
        """Attempt ``n`` -> ``n + 1`` of an unsettled row (the payment sweep, once `find` found nothing and
        attempt ``n``'s last send is older than PAYMENT_NEW_ATTEMPT_AFTER_SECONDS). Conditioned on the row still
        being unsettled at attempt ``n`` with the send stamp ``row`` was read with (`mark_sent`): a send stamped
        since — a request of attempt ``n`` that may still be in flight — wins, and this is `LedgerRace`."""
        nxt = replace(row, status="REQUESTED", attempt=row.attempt + 1, refund_id="")
        audit, head_if, head_sets, head_values = self._chained(
            row, self._call_audit(nxt, Outcome("REQUESTED"), now, actor, "", "refund_new_attempt")
        )
        sent = row.extra.get("attempt_sent_at")
        sent_if = "attribute_not_exists(attempt_sent_at)" if not sent else "attempt_sent_at = :sent"
        items = [
            {
                "Update": {
                    "TableName": self._customers,
                    "Key": to_item({"customer_id": row.customer_id, "sk": row.sk}),
                    "UpdateExpression": "SET #st = :requested, attempt = :next, attempt_started_at = :now, "
                    f"updated_at = :now, {head_sets} REMOVE refund_id, provider_status, failure_code, attempt_sent_at",
                    "ConditionExpression": (
                        f"#st IN (:requested, :settling) AND attempt = :n AND {sent_if} AND {head_if}"
                    ),
                    "ExpressionAttributeNames": {"#st": "status"},
                    "ExpressionAttributeValues": to_values(
                        {
                            **head_values,
                            ":requested": "REQUESTED",
                            ":settling": "SETTLING",
                            ":n": row.attempt,
                            ":next": nxt.attempt,
                            ":now": now,
                            **({":sent": sent} if sent else {}),
                        }
                    ),
                }
            },
            audit.put(self._audit),
        ]
        with cancellation_as(lambda codes: LedgerRace(f"refund {row.sk} changed")):
            self._db.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
        current = self.get(row.customer_id, row.sk)
        assert current is not None
        return current

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

    # ------------------------------------------------------------------ parts

    def _transact(self, items: list[dict[str, Any]], note: Notification | None) -> None:
        """``items`` in one TransactWriteItems, with ``note``'s two items at the end when there is one."""
        if self._notes is not None and note is not None:
            self._notes.transact(items, note)
        else:
            self._db.transact_write_items(TransactItems=items)  # type: ignore[arg-type]

    def _settled_note(self, row: LedgerRow, status: str, now: str, announce: bool) -> Notification | None:
        """What the feed says of ``row`` reaching ``status`` (SUCCEEDED or FAILED; nothing for anything else): an
        approved refund's approval decided, a direct one settled (only when the caller ``announce``s it)."""
        if self._notes is None or status not in FINAL:
            return None
        if row.kind == "approved":
            decided = "REFUNDED" if status == "SUCCEEDED" else "FAILED"
            return decided_note(row.conversation_id, row.approval_id, row.order_id, row.amount_cents, decided, now)
        if not announce or not row.conversation_id:
            return None
        data = {"orderId": row.order_id, "amountCents": row.amount_cents, "status": customer_status(status)}
        return Notification(conversation_id=row.conversation_id, type="refund.settled", at=now, data=data)

    @staticmethod
    def _outcome_cancelled(
        row: LedgerRow, ours: int, extras: int = 0, *, superseded: bool = True
    ) -> Callable[[list[str]], Exception]:
        """How `record`/`fail_late` read a cancellation of their ``ours`` items plus the caller's ``extras``
        (a notification's items, after those, are not the caller's: its counter losing a race alone is retried
        by `NotificationStore.transact`).

        A failed extra condition is `Duplicate` (it wins: the change it marks was made); else, when the
        row's update comes first (``superseded``), a failed row condition is `_Superseded`; else `LedgerRace`.
        """

        def cancelled(codes: list[str]) -> Exception:
            if CONDITION_FAILED in codes[ours : ours + extras]:
                return Duplicate(f"refund {row.sk}: already applied")
            if superseded and (codes[:1] == [CONDITION_FAILED] or not codes):
                return _Superseded()
            return LedgerRace(f"refund {row.sk}: the order or approval changed ({codes})")

        return cancelled

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

    def _order_move(self, row: LedgerRow, to: LedgerStatus) -> dict[str, Any] | None:
        if to == "SUCCEEDED":
            expr = "SET reserved_cents = reserved_cents - :a, refunded_cents = refunded_cents + :a"
        elif to == "FAILED" and row.kind == "direct":
            expr = "SET reserved_cents = reserved_cents - :a, available_cents = available_cents + :a"
        else:
            return None  # SETTLING keeps the reservation; a FAILED approval keeps it for the lead's decision
        return {
            "Update": {
                "TableName": self._customers,
                "Key": order_key(row.customer_id, row.order_id),
                "UpdateExpression": expr,
                "ConditionExpression": "reserved_cents >= :a",
                "ExpressionAttributeValues": to_values({":a": row.amount_cents}),
            }
        }

    @staticmethod
    def _money(row: LedgerRow) -> dict[str, Any]:
        return {"order_id": row.order_id, "amount_cents": row.amount_cents, "currency": row.currency}

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

    @staticmethod
    def _chained(row: LedgerRow, record: AuditRecord) -> tuple[AuditRecord, str, str, dict[str, Any]]:
        """``record`` chained on the row's head; the ledger row's head condition, its SET assignments and
        their values: the row's update carries them, so the stream cannot fork."""
        (audit,), head = chain(row.audit_head, [record])
        (head_if, head_values), (head_sets, head_new) = head_condition(row.audit_head), head_set(head)
        return audit, head_if, head_sets, {**head_values, **head_new}

    def _head_only(self, row: LedgerRow, record: AuditRecord) -> list[dict[str, Any]]:
        """The row's head advanced (and nothing else of it) with ``record``: an audited call that changed nothing."""
        audit, head_if, head_sets, values = self._chained(row, record)
        return [
            {
                "Update": {
                    "TableName": self._customers,
                    "Key": to_item({"customer_id": row.customer_id, "sk": row.sk}),
                    "UpdateExpression": f"SET {head_sets}",
                    "ConditionExpression": f"attribute_exists(sk) AND {head_if}",
                    "ExpressionAttributeValues": to_values(values),
                }
            },
            audit.put(self._audit),
        ]

    def _audit_only(self, row: LedgerRow, record: AuditRecord) -> None:
        """Write ``record`` on the refund key's stream, re-reading the row while other writers move its head."""
        for _ in range(HEAD_RETRIES):
            try:
                self._db.transact_write_items(TransactItems=self._head_only(row, record))  # type: ignore[arg-type]
                return
            except ClientError as exc:
                if error_code(exc) != "TransactionCanceledException":
                    raise
            current = self.get(row.customer_id, row.sk)
            assert current is not None
            row = current
        raise LedgerRace(f"refund {row.sk}: its audit stream kept moving")


class _Superseded(Exception):
    """The row was no longer unsettled at this attempt: another writer recorded first."""


def _tells_more(current: LedgerRow, attempt: int, outcome: Outcome) -> bool:
    """Whether ``outcome`` (of ``attempt``) says more than ``current`` records: the row is still unsettled at that
    attempt and the outcome is final, or names a refund the row does not."""
    if current.settled or current.attempt != attempt:
        return False
    return outcome.status in FINAL or bool(outcome.refund_id and not current.refund_id)


class _HeadMoved(Exception):
    """Only the row's audit head moved (another call was audited): write again on ``current``."""

    def __init__(self, current: LedgerRow) -> None:
        super().__init__("audit head moved")
        self.current = current
