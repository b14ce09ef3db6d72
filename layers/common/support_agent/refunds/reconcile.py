"""ReconcileFunction's logic, run daily and by ``make reconcile``: proof that our ledger and the provider agree.

For a window (``RECONCILE_WINDOW_DAYS``, default 7) it reads the ledger rows created in it (the
``ledger_by_created`` index: never a Scan) and the provider's refunds: every refund of each payment intent
those rows touch, plus every refund created in the window on any payment intent
(``GET /v1/refunds?created[gte]=…``), so refunds made outside our code show up too. A refund whose refund
key names a row created before the window (a lead's retry or the payment sweep's new attempt, days later)
brings that row in, read by the key its metadata carries. Rows and refunds are matched by refund key, then
compared by refund id, amount and status. Each difference is one of:

* ``unknown_provider_refund`` — a live refund created in the window whose refund key no ledger row holds,
  or with no refund key at all (made in the provider's dashboard, or by another system);
* ``missing_at_provider`` — a SUCCEEDED or SETTLING row whose refund id the provider does not have, or a
  SUCCEEDED row with no refund id and no live refund under its key;
* ``amount_mismatch`` — the row's refund (or a live refund under its key) is of another amount;
* ``status_mismatch`` — a SUCCEEDED row whose refund is failed, canceled or still pending; a FAILED row
  with a live refund under its key; a REQUESTED or SETTLING row whose refund the provider finished
  (succeeded, failed or canceled) while the row was last written more than ``unsettled_after`` ago
  (an hour, and at least twice the payment sweep's grace: by then a webhook or the sweep should have
  recorded it; younger rows are in flight, not differences). A SETTLING row whose refund is still
  ``pending`` agrees with it;
* ``duplicate_refund`` — two or more live refunds under one refund key (money paid out twice).

Each difference is a structured log line; their number is the ``ReconciliationDifferences`` metric (0 on a
clean run), which ``ReconciliationDifferenceAlarm`` watches. Nothing is written: reconciliation reports,
people decide (docs/OPERATIONS.md). Rows of another provider (refunds made ledger-only before a switch to
Stripe) are left out, and with ``PAYMENT_PROVIDER=none`` there is nothing to compare: the run is skipped.
A provider that cannot be read completely (down, the deadline) fails the run — a partial listing would
report refunds as missing that are not.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from support_agent import observability as obs
from support_agent.clock import Clock, iso, parse_iso, utc_datetime
from support_agent.messages import Deadline
from support_agent.refunds.ledger import RefundLedger
from support_agent.refunds.ledger_row import LedgerRow
from support_agent.refunds.provider.port import PaymentError, PaymentProvider, ProviderRefund, ProviderRefused

logger = logging.getLogger(__name__)

Kind = Literal[
    "unknown_provider_refund", "missing_at_provider", "amount_mismatch", "status_mismatch", "duplicate_refund"
]
KINDS: tuple[Kind, ...] = (
    "unknown_provider_refund",
    "missing_at_provider",
    "amount_mismatch",
    "status_mismatch",
    "duplicate_refund",
)
FINAL_AT_PROVIDER = frozenset({"succeeded", "failed", "canceled"})
# A row still REQUESTED/SETTLING this long after its last write, while the provider's refund is final, is a
# difference: the webhook and the payment sweep (every run, past its grace) both missed it.
UNSETTLED_AFTER = timedelta(hours=1)


@dataclass(frozen=True)
class Difference:
    kind: Kind
    refund_key: str = ""
    refund_ids: tuple[str, ...] = ()
    customer_id: int | None = None
    payment_intent: str = ""
    ledger_status: str = ""
    provider_status: str = ""
    ledger_amount: int | None = None
    provider_amount: int | None = None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["refund_ids"] = list(self.refund_ids)
        return out

    def line(self) -> str:
        """One human-readable line (``make reconcile``)."""
        parts = [f"{self.kind:<24}"]
        if self.refund_key:
            parts.append(f"key={self.refund_key}")
        if self.refund_ids:
            parts.append(f"refund={','.join(self.refund_ids)}")
        if self.payment_intent:
            parts.append(f"on {self.payment_intent}")
        if self.customer_id is not None:
            parts.append(f"customer {self.customer_id}")
        if self.ledger_status or self.ledger_amount is not None:
            parts.append(f"ledger {self.ledger_status or '-'} {_amount(self.ledger_amount)}".rstrip())
        if self.provider_status or self.provider_amount is not None:
            parts.append(f"provider {self.provider_status or '-'} {_amount(self.provider_amount)}".rstrip())
        if self.detail:
            parts.append(f"({self.detail})")
        return "  ".join(parts)


def _amount(cents: int | None) -> str:
    return "" if cents is None else str(cents)


@dataclass(frozen=True)
class ReconcileReport:
    provider: str
    since: str
    until: str
    rows: int  # ledger rows compared (created in the window, or brought in by a refund's key)
    provider_refunds: int  # distinct provider refunds read
    differences: list[Difference] = field(default_factory=list)
    skipped: str = ""  # why nothing was compared (ledger-only payments)

    @property
    def counts(self) -> dict[str, int]:
        found = Counter(d.kind for d in self.differences)
        return {kind: found.get(kind, 0) for kind in KINDS}

    def as_dict(self, limit: int | None = None) -> dict[str, Any]:
        """The report; ``limit`` keeps that many differences (the counts stay whole)."""
        shown = self.differences if limit is None else self.differences[:limit]
        return {
            "provider": self.provider,
            "since": self.since,
            "until": self.until,
            "rows": self.rows,
            "provider_refunds": self.provider_refunds,
            "difference_count": len(self.differences),
            "counts": self.counts,
            "differences": [d.as_dict() for d in shown],
            "skipped": self.skipped,
        }


class ReconciliationIncomplete(Exception):
    """The provider could not be read completely: no report, rather than a wrong one."""


class Reconciler:
    def __init__(
        self,
        ledger: RefundLedger,
        provider: PaymentProvider,
        *,
        window_days: int = 7,
        clock: Clock = utc_datetime,
        unsettled_after: timedelta = UNSETTLED_AFTER,
    ) -> None:
        self.ledger = ledger
        self.provider = provider
        self.window = timedelta(days=window_days)
        self._clock = clock
        self.unsettled_after = unsettled_after

    def run(self, window: timedelta | None = None, *, deadline: Deadline | None = None) -> ReconcileReport:
        """Compare the window ending now; log each difference and emit their count. Writes nothing."""
        now = self._clock()
        since = now - (window or self.window)
        if self.provider.name == "none":
            report = ReconcileReport("none", iso(since), iso(now), 0, 0, skipped="ledger-only payments (none)")
            logger.info("reconciliation skipped: PAYMENT_PROVIDER is none, no provider holds the refunds")
            obs.emit(obs.RECONCILIATION_DIFFERENCES, 0)
            return report
        try:
            report = self._compare(now, since, deadline)
        except PaymentError as exc:
            raise ReconciliationIncomplete(f"the provider could not be read: {exc.kind}: {exc}") from exc
        for difference in report.differences:
            logger.warning("reconciliation difference", extra={"reconciliation": difference.as_dict()})
        logger.info(
            "reconciliation: %d difference(s)",
            len(report.differences),
            extra={"reconciliation_summary": report.as_dict(limit=0)},
        )
        obs.emit(obs.RECONCILIATION_DIFFERENCES, len(report.differences))
        return report

    # ------------------------------------------------------------------ the comparison

    def _compare(self, now: datetime, since: datetime, deadline: Deadline | None) -> ReconcileReport:
        name = self.provider.name
        by_key = {r.refund_key: r for r in self.ledger.created_since(iso(since)) if r.provider == name}
        refunds: dict[str, ProviderRefund] = {}
        listed: set[str] = set()

        def list_intent(intent: str) -> None:
            if intent and intent not in listed:
                listed.add(intent)
                refunds.update((r.id, r) for r in self.provider.list_for_intent(intent, deadline=deadline))

        for row in sorted(by_key.values(), key=lambda r: r.payment_intent):
            list_intent(row.payment_intent)
        since_s = int(since.timestamp())
        refunds.update((r.id, r) for r in self.provider.list_created_since(since_s, deadline=deadline))

        # A refund under a key no row of the window holds may be a later attempt of an older row.
        for refund in list(refunds.values()):
            if not refund.refund_key or refund.refund_key in by_key:
                continue
            where = refund.ledger_row
            older = self.ledger.get(*where) if where else None
            if older is not None and older.refund_key == refund.refund_key and older.provider == name:
                by_key[older.refund_key] = older
                list_intent(older.payment_intent)

        differences: list[Difference] = []
        keyed: dict[str, list[ProviderRefund]] = {}
        for refund in refunds.values():
            keyed.setdefault(refund.refund_key, []).append(refund)
        for key, row in sorted(by_key.items()):
            differences += self._row_differences(row, keyed.get(key, []), now, deadline)
        for refund in sorted(refunds.values(), key=lambda r: (r.created, r.id)):
            ours = refund.refund_key and refund.refund_key in by_key
            if refund.alive and not ours and refund.created >= since_s:
                differences.append(
                    Difference(
                        "unknown_provider_refund",
                        refund.refund_key,
                        (refund.id,),
                        _customer(refund),
                        refund.payment_intent,
                        provider_status=refund.status,
                        provider_amount=refund.amount,
                        detail="no refund key" if not refund.refund_key else "no ledger row holds its refund key",
                    )
                )
        return ReconcileReport(name, iso(since), iso(now), len(by_key), len(refunds), differences)

    def _row_differences(
        self, row: LedgerRow, keyed: list[ProviderRefund], now: datetime, deadline: Deadline | None
    ) -> list[Difference]:
        def diff(kind: Kind, refunds: list[ProviderRefund], detail: str = "") -> Difference:
            statuses = ",".join(sorted({r.status for r in refunds}))
            amounts = sorted({r.amount for r in refunds})
            return Difference(
                kind,
                row.refund_key,
                tuple(r.id for r in refunds) or ((row.refund_id,) if row.refund_id else ()),
                row.customer_id,
                row.payment_intent,
                row.status,
                statuses,
                row.amount_cents,
                amounts[0] if len(amounts) == 1 else None,
                detail,
            )

        out: list[Difference] = []
        live = [r for r in keyed if r.alive]
        if len(live) > 1:
            out.append(diff("duplicate_refund", live, f"{len(live)} live refunds for one refund key"))
        mine = next((r for r in keyed if r.id == row.refund_id), None) if row.refund_id else None
        if row.refund_id and mine is None:
            mine = self._retrieve(row.refund_id, deadline)
        if row.status in ("SUCCEEDED", "SETTLING") and row.refund_id and mine is None:
            return [*out, diff("missing_at_provider", [], "the provider has no refund with the row's id")]
        if row.status == "SUCCEEDED" and not row.refund_id and not live:
            return [*out, diff("missing_at_provider", [], "no refund id and no live refund under its key")]
        subject = mine or (live[0] if len(live) == 1 else None)
        compared = ([subject] if subject else []) + [r for r in live if r is not subject]
        other_amount = [r for r in compared if r.amount != row.amount_cents]
        if other_amount:
            out.append(diff("amount_mismatch", other_amount))
        if row.status == "SUCCEEDED" and subject is not None and subject.status != "succeeded":
            out.append(diff("status_mismatch", [subject], "the ledger says refunded"))
        elif row.status == "FAILED" and live:
            out.append(diff("status_mismatch", live, "the ledger says failed, the provider has a live refund"))
        elif (
            row.status in ("REQUESTED", "SETTLING")
            and subject is not None
            and subject.status in FINAL_AT_PROVIDER
            and self._lagging(row, now)
        ):
            out.append(diff("status_mismatch", [subject], "the provider finished it; the ledger still waits"))
        return out

    def _retrieve(self, refund_id: str, deadline: Deadline | None) -> ProviderRefund | None:
        """The refund, or None when the provider says it has none (any other failure: the run is incomplete)."""
        try:
            return self.provider.retrieve(refund_id, deadline=deadline)
        except ProviderRefused as exc:
            if exc.code == "resource_missing":
                return None
            raise

    def _lagging(self, row: LedgerRow, now: datetime) -> bool:
        written = str(row.extra.get("updated_at") or row.extra.get("attempt_started_at") or "")
        try:
            return now - parse_iso(written) > self.unsettled_after
        except ValueError:
            return True  # no time of its own: nothing says it is in flight


def _customer(refund: ProviderRefund) -> int | None:
    value = refund.metadata.get("customer_id", "")
    return int(value) if value.isdigit() else None
