"""A day's rollup: the counts and times of one UTC day, from what the day's sources returned (reports/sources.py).

Pure arithmetic, so the figures can be checked against hand-made days. Counts only: outcomes, reasons as codes,
refunds by kind, hand-offs, ratings, actions, costs; never a comment, a customer id or a conversation id (the model
has no field that could hold one). Rates are not stored: the report computes them from these counts (report.py), so
a definition can change without rewriting stored days.

Percentiles are nearest-rank: the p-th percentile of n values sorted ascending is the value at rank ceil(p/100 · n)
(1-based); the median is the 50th (for an even n the lower of the two middle values). Times are whole seconds.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from support_agent.clock import parse_iso

OUTCOMES = ("resolved_by_agent", "escalated", "abandoned", "waiting_on_lead")
# An approval a lead decided (approved, then refunded or not; or rejected). EXPIRED was the sweep's, RELEASED's
# decided_at is the release (a second decision), PENDING has none.
_LEAD_DECIDED = ("APPROVED", "SETTLING", "REFUNDED", "FAILED", "REJECTED")
_APPROVED = ("APPROVED", "SETTLING", "REFUNDED", "FAILED", "RELEASED")


def nearest_rank(values: Iterable[int], percent: int) -> int | None:
    """The nearest-rank percentile (module docstring); None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(1, math.ceil(percent / 100 * len(ordered))) - 1]


class _Counts(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Timing(_Counts):
    """How many intervals were measured, and their median and 95th percentile in seconds (None: none measured)."""

    count: int = 0
    median_s: int | None = None
    p95_s: int | None = None

    @classmethod
    def of(cls, seconds: list[int]) -> Timing:
        return cls(count=len(seconds), median_s=nearest_rank(seconds, 50), p95_s=nearest_rank(seconds, 95))


class Refunds(_Counts):
    """Direct refunds: ledger rows of kind ``direct`` created that day. Held ones: approvals created that day.
    Amounts are minor units per currency, of the refunds that succeeded."""

    direct_requested: int = 0
    direct_refunded: int = 0
    held_requested: int = 0
    held_approved: int = 0
    held_rejected: int = 0
    held_expired: int = 0
    held_pending: int = 0
    approved_refunded: int = 0
    direct_cents: dict[str, int] = Field(default_factory=dict)
    approved_cents: dict[str, int] = Field(default_factory=dict)
    decision: Timing = Field(default_factory=Timing)  # approvals: request → a lead's decision
    settlement: Timing = Field(default_factory=Timing)  # refunds that succeeded: request → settled

    def totals(self) -> tuple[int, dict[str, int]]:
        """Refunds that succeeded, direct and approved: how many, and the minor units per currency."""
        cents = Counter(self.direct_cents)
        cents.update(self.approved_cents)
        return self.direct_refunded + self.approved_refunded, dict(sorted(cents.items()))


class Handoffs(_Counts):
    """Hand-off tickets opened that day and what became of them."""

    opened: int = 0
    claimed: int = 0
    closed: int = 0
    returned_to_bot: int = 0
    to_claim: Timing = Field(default_factory=Timing)
    to_close: Timing = Field(default_factory=Timing)


class Ratings(_Counts):
    """From the outcome items (an erased customer's are 0 there). ``closing`` counts the 1-5 ratings given."""

    thumbs_up: int = 0
    thumbs_down: int = 0
    rated_conversations: int = 0
    closing: int = 0
    scores_4_5: int = 0


class DayRollup(_Counts):
    day: str  # YYYY-MM-DD, UTC
    conversations: int = 0
    turns: int = 0
    outcomes: dict[str, int] = Field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    escalation_reasons: dict[str, int] = Field(default_factory=dict)
    abandoned_reasons: dict[str, int] = Field(default_factory=dict)
    refunds: Refunds = Field(default_factory=Refunds)
    handoffs: Handoffs = Field(default_factory=Handoffs)
    ratings: Ratings = Field(default_factory=Ratings)
    actions: dict[str, int] = Field(default_factory=dict)
    model_cost_micros: int = 0
    aws_cost_micros: int = 0


def _seconds(start: str | None, end: str | None) -> int | None:
    if not start or not end:
        return None
    delta = (parse_iso(end) - parse_iso(start)).total_seconds()
    return max(0, round(delta))


def _count(values: Iterable[str]) -> dict[str, int]:
    return dict(sorted(Counter(v for v in values if v).items()))


def _n(item: Mapping[str, Any], name: str) -> int:
    return int(item.get(name) or 0)


def _outcome_figures(day: str, outcomes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    actions: Counter[str] = Counter()
    for o in outcomes:
        actions.update({str(k): int(v) for k, v in (o.get("actions") or {}).items()})
    kinds = Counter(str(o.get("outcome", "")) for o in outcomes)
    return {
        "day": day,
        "conversations": len(outcomes),
        "turns": sum(_n(o, "turns") for o in outcomes),
        "outcomes": {k: kinds.get(k, 0) for k in OUTCOMES},
        "escalation_reasons": _count(str(o.get("reason", "")) for o in outcomes if o.get("outcome") == "escalated"),
        "abandoned_reasons": _count(str(o.get("reason", "")) for o in outcomes if o.get("outcome") == "abandoned"),
        "actions": dict(sorted(actions.items())),
        "model_cost_micros": sum(_n(o, "model_cost_micros") for o in outcomes),
        "aws_cost_micros": sum(_n(o, "aws_cost_micros") for o in outcomes),
        "ratings": Ratings(
            thumbs_up=sum(_n(o, "thumbs_up") for o in outcomes),
            thumbs_down=sum(_n(o, "thumbs_down") for o in outcomes),
            rated_conversations=sum(1 for o in outcomes if _n(o, "thumbs_up") + _n(o, "thumbs_down") + _n(o, "score")),
            closing=sum(1 for o in outcomes if 1 <= _n(o, "score") <= 5),
            scores_4_5=sum(1 for o in outcomes if _n(o, "score") >= 4),
        ),
    }


def _add(cents: Counter[str], row: Mapping[str, Any]) -> None:
    cents[str(row.get("currency", "")).upper()] += _n(row, "amount_cents")


def refunds(ledger_rows: Sequence[Mapping[str, Any]], approvals: Sequence[Mapping[str, Any]]) -> Refunds:
    """Direct refunds from the ledger (an approved refund's row is counted by its approval instead)."""
    direct = [r for r in ledger_rows if r.get("kind") == "direct"]
    succeeded = [r for r in direct if r.get("status") == "SUCCEEDED"]
    refunded = [a for a in approvals if a.get("status") == "REFUNDED"]
    direct_cents: Counter[str] = Counter()
    approved_cents: Counter[str] = Counter()
    for row in succeeded:
        _add(direct_cents, row)
    for approval in refunded:
        _add(approved_cents, approval)
    statuses = Counter(str(a.get("status", "")) for a in approvals)
    decided = [
        _seconds(a.get("created_at"), a.get("decided_at")) for a in approvals if a.get("status") in _LEAD_DECIDED
    ]
    settled = [_seconds(r.get("created_at"), r.get("settled_at") or r.get("updated_at")) for r in succeeded]
    settled += [_seconds(a.get("created_at"), a.get("refunded_at")) for a in refunded]
    return Refunds(
        direct_requested=len(direct),
        direct_refunded=len(succeeded),
        held_requested=len(approvals),
        held_approved=sum(statuses[s] for s in _APPROVED),
        held_rejected=statuses["REJECTED"],
        held_expired=statuses["EXPIRED"],
        held_pending=statuses["PENDING"],
        approved_refunded=len(refunded),
        direct_cents=dict(sorted(direct_cents.items())),
        approved_cents=dict(sorted(approved_cents.items())),
        decision=Timing.of([s for s in decided if s is not None]),
        settlement=Timing.of([s for s in settled if s is not None]),
    )


def handoffs(tickets: Sequence[Mapping[str, Any]]) -> Handoffs:
    """``claimed``: a person holds it or held it when it ended (its ``assigned_at``, the latest claim)."""
    ended = [t for t in tickets if t.get("status") == "CLOSED"]
    to_claim = [_seconds(t.get("created_at"), t.get("assigned_at")) for t in tickets]
    to_close = [_seconds(t.get("created_at"), t.get("closed_at")) for t in ended]
    return Handoffs(
        opened=len(tickets),
        claimed=sum(1 for t in tickets if t.get("assigned_at")),
        closed=sum(1 for t in ended if t.get("closed_as", "closed") == "closed"),
        returned_to_bot=sum(1 for t in ended if t.get("closed_as") == "returned_to_bot"),
        to_claim=Timing.of([s for s in to_claim if s is not None]),
        to_close=Timing.of([s for s in to_close if s is not None]),
    )


def rollup(
    day: str,
    outcomes: Sequence[Mapping[str, Any]],
    ledger_rows: Sequence[Mapping[str, Any]],
    approvals: Sequence[Mapping[str, Any]],
    tickets: Sequence[Mapping[str, Any]],
) -> DayRollup:
    """The day's rollup from its outcome items, the ledger rows and approvals created that day, and its hand-offs."""
    datetime.strptime(day, "%Y-%m-%d")  # a day, or ValueError
    return DayRollup(
        **_outcome_figures(day, outcomes), refunds=refunds(ledger_rows, approvals), handoffs=handoffs(tickets)
    )
