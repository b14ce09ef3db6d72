"""PaymentSweepFunction's logic, run on a schedule: no refund stays REQUESTED or SETTLING because nobody asked.

A row is left unsettled by a crash between the ledger write and the provider call, an unknown outcome
(timeout, 5xx) whose retries ran out, or a refund the provider keeps ``pending`` and whose webhook never
came. The sweep reads the ``unsettled`` index (a sparse GSI holding only such rows: never a Scan) for rows
whose attempt began more than ``grace`` ago and asks the provider about each:

* the row has a refund id → ``retrieve`` it, and `RefundSettler.apply` what the provider says (never
  backwards; ``failed``/``canceled`` → FAILED);
* no refund id → ``find`` by refund key: found → apply it; not found →

  - attempt ``n`` younger than ``new_attempt_after`` (≥ 600 s): `RefundSettler.settle` with the SAME
    attempt key. Safe: the provider answers the first request's saved outcome, or makes the refund a
    crashed call never sent;
  - older: attempt ``n + 1`` (`RefundLedger.new_attempt`, conditional on the row still at ``n`` with the send
    stamp it was read with), then settled. "Older" is measured from attempt ``n``'s LAST send
    (``attempt_sent_at``, stamped before every send: the chat's repair, an MCP resend, a RefundFlow retry, this
    sweep's resend), not from its start: by then no request of attempt ``n`` can still be executing, ``find``
    saw no refund, and a send stamped after our read makes the new attempt lose (a conflict) rather than race it.

Every write is the ledger's own conditional transaction with its audit rows, so a webhook, a chat repair or
RefundFlow settling the same row at the same moment cannot move the money twice; the loser is counted as a
conflict. A read that changes nothing (still ``pending`` under the same id) writes nothing: the audit
trail records changes, not each look. A refund this sweep settles is announced in its conversation's feed
in the same transaction (``refund.settled`` for a direct one, ``approval.decided`` for an approved one): a
second run finds it settled and announces nothing.

Bounded per run: at most ``limit`` rows, and none started once the invocation's deadline is near. Rows
with no refund id go first (nobody else will settle them: the provider has no refund we know of, and no
webhook will come), then the rest, oldest first, so a crowd of refunds the provider keeps pending for days
cannot starve them. An unexpected error on one row is logged and counted and the run goes on; the run
raises at the end so the invocation counts as failed (its Errors alarm). The oldest unsettled row's age is
the `OldestUnsettledRefundAge` metric (0 when none), with an alarm (docs/OPERATIONS.md).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from support_agent import observability as obs
from support_agent.clock import Clock, iso, parse_iso, utc_datetime
from support_agent.messages import Deadline
from support_agent.refunds.ledger import RefundLedger
from support_agent.refunds.ledger_row import By, LedgerRace, LedgerRow
from support_agent.refunds.provider.port import PaymentError, PaymentProvider, ProviderRefund
from support_agent.refunds.settle import RefundSettler

logger = logging.getLogger(__name__)

SWEEP_ACTOR = "system:payment-sweep"
# Rows read from the index per run, as a multiple of the limit, to put rows without a refund id first.
READ_FACTOR = 5
# No row is started with less time left than this: one provider call (retries bounded by the deadline) and
# its record fit in it, so the invocation ends before Lambda's timeout with every write made.
ROW_SECONDS = 3.0
# attempt_started_at sorts below this for every row: "the oldest row of the index", whenever it began.
_END_OF_TIME = "9999-12-31T23:59:59.999Z"

Action = Literal[
    "settled",
    "pending",
    "resent",
    "resent_settled",
    "new_attempt",
    "new_attempt_settled",
    "conflict",
    "unreachable",
    "unchanged",
    "skipped",
]


@dataclass(frozen=True)
class PaymentSweepResult:
    scanned: int  # rows looked at
    settled: int  # reached SUCCEEDED or FAILED in this run (whichever way: read, resent or a new attempt)
    pending: int  # the provider still has them pending: nothing written
    resent: int  # not found, asked again with the same attempt key (settled or not)
    new_attempts: int  # not found and attempt n old enough: attempt n + 1 (settled or not)
    conflicts: int  # another writer (webhook, repair, RefundFlow) changed the row between our read and write
    unreachable: int  # the provider could not be asked (down, 429, credentials): the next run asks again
    skipped: int  # left alone: another provider's row, or the provider's refund belongs to another attempt
    errors: int
    truncated: bool  # the limit or the deadline stopped the run; the next run continues
    oldest_age_seconds: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class PaymentSweepIncomplete(Exception):
    def __init__(self, result: PaymentSweepResult) -> None:
        super().__init__(f"payment sweep finished with {result.errors} error(s): {result.as_dict()}")
        self.result = result


class PaymentSweeper:
    def __init__(
        self,
        ledger: RefundLedger,
        settler: RefundSettler,
        provider: PaymentProvider,
        *,
        grace_seconds: int,
        new_attempt_after_seconds: int,
        limit: int,
        clock: Clock = utc_datetime,
    ) -> None:
        if new_attempt_after_seconds < 600:
            raise ValueError("a new attempt waits at least 600 s: Stripe may still be executing the last one")
        self.ledger = ledger
        self.settler = settler
        self.provider = provider
        self.grace = timedelta(seconds=grace_seconds)
        self.new_attempt_after = timedelta(seconds=new_attempt_after_seconds)
        self.limit = limit
        self._clock = clock

    def run(self, deadline: Deadline | None = None) -> PaymentSweepResult:
        now = self._clock()
        rows = self.ledger.unsettled(iso(now - self.grace), self.limit * READ_FACTOR)
        # Rows the provider has no refund of (as far as we know) first; then oldest first, as read.
        todo = sorted(rows, key=lambda r: bool(r.refund_id))
        counts: dict[str, int] = {}
        scanned = errors = 0
        truncated = len(todo) > self.limit
        for row in todo[: self.limit]:
            if deadline is not None and deadline.remaining() < ROW_SECONDS:
                truncated = True
                break
            scanned += 1
            try:
                action = self._sweep(row, deadline)
            except LedgerRace:
                action = "conflict"
            except Exception:
                errors += 1
                logger.exception("payment sweep failed on a refund", extra=_ids(row))
                continue
            counts[action] = counts.get(action, 0) + 1
        oldest = self._report_oldest()
        result = PaymentSweepResult(
            scanned=scanned,
            settled=counts.get("settled", 0) + counts.get("resent_settled", 0) + counts.get("new_attempt_settled", 0),
            pending=counts.get("pending", 0),
            resent=counts.get("resent", 0) + counts.get("resent_settled", 0),
            new_attempts=counts.get("new_attempt", 0) + counts.get("new_attempt_settled", 0),
            conflicts=counts.get("conflict", 0),
            unreachable=counts.get("unreachable", 0),
            skipped=counts.get("skipped", 0) + counts.get("unchanged", 0),
            errors=errors,
            truncated=truncated,
            oldest_age_seconds=oldest,
        )
        logger.info("payment sweep: %s", result.as_dict())
        if errors:
            raise PaymentSweepIncomplete(result)
        return result

    # ------------------------------------------------------------------ one row

    def _sweep(self, indexed: LedgerRow, deadline: Deadline | None) -> Action:
        # The index is eventually consistent: act on the row as the table holds it now.
        row = self.ledger.get(indexed.customer_id, indexed.sk)
        if row is None or row.settled or row.attempt != indexed.attempt:
            return "conflict"  # settled, or a new attempt begun, by another writer since the index was read
        if row.provider != self.provider.name:
            # Asking another provider than the one that holds the refund could only mislead (`none` would
            # "succeed" at once); a deployment that switched providers settles these by hand.
            logger.error("unsettled refund of another payment provider", extra={**_ids(row), "kind": row.provider})
            return "skipped"
        try:
            if row.refund_id:
                refund = self.provider.retrieve(row.refund_id, deadline=deadline)
                return self._apply(row, refund)
            found = self.provider.find(row.refund_key, row.payment_intent, deadline=deadline)
        except PaymentError as exc:
            logger.warning("payment sweep could not ask the provider", extra={**_ids(row), "kind": exc.kind})
            return "unreachable"
        if found is not None:
            return self._apply(row, found)
        if self._attempt_age(row) >= self.new_attempt_after:
            nxt = self.ledger.new_attempt(row, iso(self._clock()), SWEEP_ACTOR)
            logger.warning(
                "no refund found for an old attempt: starting the next",
                extra={**_ids(row), "attempt_key": nxt.attempt_key},
            )
            settled = self.settler.settle(nxt, actor=SWEEP_ACTOR, deadline=deadline, announce=True)
            self._log_outcome(settled.row)
            return "new_attempt_settled" if settled.row.settled else "new_attempt"
        settled = self.settler.settle(row, actor=SWEEP_ACTOR, deadline=deadline, announce=True)
        self._log_outcome(settled.row)
        return "resent_settled" if settled.row.settled else "resent"

    def _apply(self, row: LedgerRow, refund: ProviderRefund) -> Action:
        if row.status == "SETTLING" and refund.alive and refund.status != "succeeded" and refund.id == row.refund_id:
            return "pending"  # nothing new: no write, no audit row
        after = self.settler.apply(row, refund, By(SWEEP_ACTOR, announce=True))
        if after.settled:
            self._log_outcome(after)
            return "settled"
        if after is row:
            # apply() refused it: the refund is another attempt's (an earlier attempt made a refund after
            # all). Nothing is resent; reconciliation reports it, an operator decides.
            logger.error(
                "the provider's refund for this key belongs to another attempt",
                extra={**_ids(row), "refund_id": refund.id, "refund_attempt": refund.metadata.get("attempt", "")},
            )
            return "unchanged"
        return "pending"

    def _attempt_age(self, row: LedgerRow) -> timedelta:
        """Since the attempt's last send (`RefundLedger.mark_sent`: a repair, a resend, a replayed execution), or
        since it began when it was never sent. Not since it began: a send an hour later may still be in flight."""
        started = row.extra.get("attempt_sent_at") or row.extra.get("attempt_started_at")
        if not started:
            return timedelta(0)
        try:
            return self._clock() - parse_iso(str(started))
        except ValueError:
            return timedelta(0)

    @staticmethod
    def _log_outcome(row: LedgerRow) -> None:
        logger.info(
            "payment sweep recorded what the provider said",
            extra={**_ids(row), "status": row.status, "refund_id": row.refund_id, "attempt_key": row.attempt_key},
        )

    # ------------------------------------------------------------------ the metric

    def _report_oldest(self) -> int:
        """Seconds since the oldest unsettled row's attempt began (0 when none); grace included, as the
        alarm's threshold is far above it."""
        try:
            oldest = self.ledger.unsettled(_END_OF_TIME, 1)
        except Exception:  # the sweep itself ran; a missing datapoint is not a reason to fail it
            logger.exception("could not read the oldest unsettled refund")
            return 0
        age = 0
        if oldest:
            started = str(oldest[0].extra.get("attempt_started_at") or "")
            age = max(0, round(_seconds_since(self._clock(), started)))
            logger.info("oldest unsettled refund", extra={**_ids(oldest[0]), "age_seconds": age})
        obs.emit(obs.OLDEST_UNSETTLED_REFUND_AGE, age)
        return age


def _seconds_since(now: datetime, stamp: str) -> float:
    try:
        return (now - parse_iso(stamp)).total_seconds()
    except ValueError:
        return 0.0


def _ids(row: LedgerRow) -> dict[str, Any]:
    """What a log line may say of a row: ids, never an amount's owner beyond the customer id."""
    return {
        "customer_id": row.customer_id,
        "refund_key": row.refund_key,
        "approval_id": row.approval_id or None,
        "conversation_id": row.conversation_id or None,
        "attempt": row.attempt,
        "ledger_status": row.status,
    }
