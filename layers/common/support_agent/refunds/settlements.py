"""What a provider call establishes, written on the ledger row: `record` (an outcome), `fail_late` (a refund the
provider failed after it succeeded), and the attempt's own bookkeeping, `mark_sent` and `new_attempt`.

Each write is one transaction conditioned on the row still being where the writer read it (unsettled at the same
attempt; for `fail_late`, SUCCEEDED with the same refund), moving the order's money and an approved refund's
approval with it (the table in ledger.py). Several writers settle one refund key (the tool, RefundFlow, the
webhook, the payment sweep): one whose condition fails re-reads the row, and either writes again on it (only its
audit head moved, or this call learned more) or leaves the row as the other writer left it, still auditing its
own call on the refund key's stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from support_agent.refunds.ledger_row import FINAL, By, Duplicate, LedgerRace, LedgerRow, Outcome
from support_agent.refunds.ledger_table import LedgerTable
from support_agent.refunds.vocabulary import LedgerStatus, customer_status
from support_agent.store.approvals import decided_note
from support_agent.store.audit import AuditRecord
from support_agent.store.dynamo import CONDITION_FAILED, cancellation_as, error_code, to_item, to_values, update_if
from support_agent.store.notifications import Notification

# A refund key's writers racing on its audit stream (the tool, RefundFlow executions, the webhook, the sweep): each
# lost race means another writer appended a row, so this bounds a burst of 32 writers on one key.
HEAD_RETRIES = 32
_UNSETTLED_AT_N = "#st IN (:requested, :settling) AND attempt = :n"


class SettlementWrites(LedgerTable):
    def record(self, row: LedgerRow, outcome: Outcome, now: str, by: By) -> LedgerRow:
        """Write one provider call's outcome: the row, the order's money and the approval, with the audit row.

        Conditioned on the row still being unsettled at this attempt; when it is not (another writer
        recorded first), only the audit row is written and the row as it now is comes back. ``by``'s
        ``extra_items`` are written with the change or not at all. A final outcome is announced with it: an
        approval's always, a direct refund's when ``by.announce`` (ledger.py's docstring).
        """
        return self._while_head_moves(row, lambda r: self._record(r, outcome, now, by))

    def fail_late(self, row: LedgerRow, refund_id: str, code: str, now: str, by: By) -> LedgerRow:
        """SUCCEEDED -> FAILED: the provider failed a refund it had made (Stripe's ``failed`` after ``succeeded``).

        The money moves back: a direct refund's to available; an approved one's to reserved, its approval
        REFUNDED -> FAILED for a lead to retry (attempt ``n + 1``) or release. Conditioned on the row still
        SUCCEEDED with this refund id; otherwise the row as it is comes back and nothing changes. Announced
        as `record` announces a FAILED outcome.
        """
        return self._while_head_moves(row, lambda r: self._fail_late(r, refund_id, code, now, by))

    def mark_sent(self, row: LedgerRow, now: str) -> LedgerRow:
        """Stamp ``attempt_sent_at`` before a request of the row's current attempt goes to the provider; the row
        as stamped. Every send is stamped (the first, a repair's, a sweep's resend, a replayed execution's), so
        `new_attempt` can tell "no request of attempt ``n`` may still be in flight" from the stamp alone.
        Conditioned on the row still being unsettled at this attempt: `LedgerRace` otherwise (settled, or a
        new attempt began: the caller re-reads and sends that one's key, never an older one)."""
        stamped = update_if(
            self._db,
            TableName=self._customers,
            Key=to_item({"customer_id": row.customer_id, "sk": row.sk}),
            UpdateExpression="SET attempt_sent_at = :now",
            ConditionExpression=_UNSETTLED_AT_N,
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues=to_values(
                {":now": now, ":requested": "REQUESTED", ":settling": "SETTLING", ":n": row.attempt}
            ),
        )
        if not stamped:
            raise LedgerRace(f"refund {row.sk} changed before its attempt {row.attempt} was sent")
        return replace(row, extra={**row.extra, "attempt_sent_at": now})

    def new_attempt(self, row: LedgerRow, now: str, actor: str) -> LedgerRow:
        """Attempt ``n`` -> ``n + 1`` of an unsettled row (the payment sweep, once `find` found nothing and
        attempt ``n``'s last send is older than PAYMENT_NEW_ATTEMPT_AFTER_SECONDS). Conditioned on the row still
        being unsettled at attempt ``n`` with the send stamp ``row`` was read with (`mark_sent`): a send stamped
        since — a request of attempt ``n`` that may still be in flight — wins, and this is `LedgerRace`."""
        nxt = replace(row, status="REQUESTED", attempt=row.attempt + 1, refund_id="")
        write = self._chained(row, self._call_audit(nxt, Outcome("REQUESTED"), now, actor, "", "refund_new_attempt"))
        sent = row.extra.get("attempt_sent_at")
        sent_if = "attribute_not_exists(attempt_sent_at)" if not sent else "attempt_sent_at = :sent"
        items = self._row_write(
            write,
            row,
            ["#st = :requested", "attempt = :next", "attempt_started_at = :now", "updated_at = :now"],
            f"{_UNSETTLED_AT_N} AND {sent_if}",
            {
                ":requested": "REQUESTED",
                ":settling": "SETTLING",
                ":n": row.attempt,
                ":next": nxt.attempt,
                ":now": now,
                **({":sent": sent} if sent else {}),
            },
            then="REMOVE refund_id, provider_status, failure_code, attempt_sent_at",
        )
        with cancellation_as(lambda codes: LedgerRace(f"refund {row.sk} changed")):
            self._db.transact_write_items(TransactItems=items)  # type: ignore[arg-type]
        return self._current(row)

    # ------------------------------------------------------------------ record and fail_late

    def _record(self, row: LedgerRow, outcome: Outcome, now: str, by: By) -> LedgerRow:
        record = self._call_audit(row, outcome, now, by.actor, by.request_id)
        nothing_new = (
            outcome.status == "SETTLING" and row.status == "SETTLING" and outcome.refund_id in ("", row.refund_id)
        )
        if nothing_new and not by.extra_items:
            self._audit_only(row, record)  # nothing new to record: the call is still audited
            return row
        items = self._head_only(row, record) if nothing_new else self._outcome_items(row, outcome, now, record)
        note = None if nothing_new else self._settled_note(row, outcome.status, now, by.announce)
        current = self._write(row, items, by.extra_items, note)
        if current is None:
            return row if nothing_new else self._current(row)
        if (current.status, current.attempt, current.refund_id) == (row.status, row.attempt, row.refund_id):
            raise _HeadMoved(current)  # only the audit head moved
        if _tells_more(current, row.attempt, outcome):
            # Another writer recorded less than this call learned (SETTLING, outcome unknown, while this call
            # has the provider's answer for the same attempt): record ours on the row as it now is.
            raise _HeadMoved(current)
        self._audit_only(current, record)  # another writer recorded first: this call is still audited
        return current

    def _fail_late(self, row: LedgerRow, refund_id: str, code: str, now: str, by: By) -> LedgerRow:
        failed = Outcome("FAILED", refund_id, "failed", code or "failed")
        write = self._chained(row, self._call_audit(row, failed, now, by.actor, by.request_id, "refund_failed_late"))
        back = "reserved_cents" if row.kind == "approved" else "available_cents"  # where the money goes back to
        items = [
            *self._row_write(
                write,
                row,
                [
                    "#st = :failed",
                    "failure_code = :code",
                    "provider_status = :pstatus",
                    "failed_late_at = :now",
                    "updated_at = :now",
                ],
                "#st = :succeeded AND refund_id = :rid",
                {
                    ":failed": "FAILED",
                    ":succeeded": "SUCCEEDED",
                    ":rid": refund_id,
                    ":code": failed.failure_code,
                    ":pstatus": "failed",
                    ":now": now,
                },
            ),
            self._order_update(
                row, f"SET refunded_cents = refunded_cents - :a, {back} = {back} + :a", "refunded_cents"
            ),
        ]
        if row.kind == "approved":
            sets = {"refund_status": "FAILED", "failed_at": now, "failure_error": failed.failure_code}
            items.extend(
                self._approval_move(row.approval_id, "REFUNDED", "FAILED", now, {**sets, "refund_failed_late_at": now})
            )
        current = self._write(row, items, by.extra_items, self._settled_note(row, "FAILED", now, by.announce))
        if current is None:
            return self._current(row)
        if current.status == "SUCCEEDED" and current.refund_id == refund_id:
            raise _HeadMoved(current)  # still this refund's: only the audit head moved
        return current

    def _outcome_items(self, row: LedgerRow, outcome: Outcome, now: str, record: AuditRecord) -> list[dict[str, Any]]:
        """`record`'s transaction: the row's update first (its condition decides `_Superseded`), then the rest."""
        values: dict[str, Any] = {
            ":to": outcome.status,
            ":n": row.attempt,
            ":now": now,
            ":requested": "REQUESTED",
            ":settling": "SETTLING",
        }
        sets = ["#st = :to", "updated_at = :now"]
        for name, value in (
            ("refund_id", outcome.refund_id),
            ("provider_status", outcome.provider_status),
            ("failure_code", outcome.failure_code),
        ):
            if value:
                sets.append(f"{name} = :{name}")
                values[f":{name}"] = value
        then = ""
        if outcome.status in FINAL:
            sets, then = [*sets, "settled_at = :now"], "REMOVE unsettled"
        items = self._row_write(self._chained(row, record), row, sets, _UNSETTLED_AT_N, values, then=then)
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
            items.extend(self._approval_move(row.approval_id, "SETTLING", to_status, now, approval_sets))
        return items

    def _write(
        self,
        row: LedgerRow,
        items: list[dict[str, Any]],
        extra_items: Sequence[dict[str, Any]],
        note: Notification | None,
    ) -> LedgerRow | None:
        """``items`` (the row's update first), the caller's ``extra_items`` and ``note`` in one transaction: None
        once written; the row as it now is when the row's own condition failed (another writer moved it, or
        only its audit head). `Duplicate` when an extra item's condition failed, `LedgerRace` for the rest.

        A notification's items, after the caller's, are not the caller's: its counter losing a race alone is
        retried by `NotificationStore.transact`."""
        ours, extras = len(items), len(extra_items)

        def cancelled(codes: list[str]) -> Exception:
            if CONDITION_FAILED in codes[ours : ours + extras]:
                return Duplicate(f"refund {row.sk}: already applied")
            if codes[:1] == [CONDITION_FAILED] or not codes:
                return _Superseded()
            return LedgerRace(f"refund {row.sk}: the order or approval changed ({codes})")

        try:
            with cancellation_as(cancelled):
                self._notes.transact([*items, *extra_items], note)
        except _Superseded:
            return self._current(row)
        return None

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

    # ------------------------------------------------------------------ parts

    def _settled_note(self, row: LedgerRow, status: str, now: str, announce: bool) -> Notification | None:
        """What the feed says of ``row`` reaching ``status`` (SUCCEEDED or FAILED; nothing for anything else): an
        approved refund's approval decided, a direct one settled (only when the caller ``announce``s it)."""
        if status not in FINAL:
            return None
        if row.kind == "approved":
            decided = "REFUNDED" if status == "SUCCEEDED" else "FAILED"
            return decided_note(row.conversation_id, row.approval_id, row.order_id, row.amount_cents, decided, now)
        if not announce or not row.conversation_id:
            return None
        data = {"orderId": row.order_id, "amountCents": row.amount_cents, "status": customer_status(status)}
        return Notification(conversation_id=row.conversation_id, type="refund.settled", at=now, data=data)

    def _order_move(self, row: LedgerRow, to: LedgerStatus) -> dict[str, Any] | None:
        if to == "SUCCEEDED":
            expr = "SET reserved_cents = reserved_cents - :a, refunded_cents = refunded_cents + :a"
        elif to == "FAILED" and row.kind == "direct":
            expr = "SET reserved_cents = reserved_cents - :a, available_cents = available_cents + :a"
        else:
            return None  # SETTLING keeps the reservation; a FAILED approval keeps it for the lead's decision
        return self._order_update(row, expr)

    def _head_only(self, row: LedgerRow, record: AuditRecord) -> list[dict[str, Any]]:
        """The row's head advanced (and nothing else of it) with ``record``: an audited call that changed nothing."""
        return self._row_write(self._chained(row, record), row, [], "attribute_exists(sk)", {}, status=False)

    def _audit_only(self, row: LedgerRow, record: AuditRecord) -> None:
        """Write ``record`` on the refund key's stream, re-reading the row while other writers move its head."""
        for _ in range(HEAD_RETRIES):
            try:
                self._db.transact_write_items(TransactItems=self._head_only(row, record))  # type: ignore[arg-type]
                return
            except ClientError as exc:
                if error_code(exc) != "TransactionCanceledException":
                    raise
            row = self._current(row)
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
