"""A stored day as the leads read it: its counts and the rates computed from them at read time (a rate with a zero
denominator is None, never 0: "no rated conversation" is not "nobody liked it"), and the CSV of a range.

Definitions (docs/OPERATIONS.md, "Reading the reports"): resolution rate = resolved_by_agent / conversations;
escalation rate = escalated / conversations; CSAT = closing ratings of 4-5 / closing ratings; thumbs-up share =
up / (up + down); thumbs-down share = down / (up + down); cost = (model + AWS micros) / 10⁶ USD, per conversation and
per conversation resolved by the agent.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from support_agent.reports.rollup import DayRollup

PLACES = 4  # rates
USD_PLACES = 6  # costs (micro-dollars)


def share(part: int, whole: int) -> float | None:
    return round(part / whole, PLACES) if whole else None


def _usd(micros: int, per: int) -> float | None:
    return round(micros / 1_000_000 / per, USD_PLACES) if per else None


def rates(day: DayRollup) -> dict[str, float | None]:
    resolved = day.outcomes.get("resolved_by_agent", 0)
    thumbs = day.ratings.thumbs_up + day.ratings.thumbs_down
    cost = day.model_cost_micros + day.aws_cost_micros
    return {
        "resolution_rate": share(resolved, day.conversations),
        "escalation_rate": share(day.outcomes.get("escalated", 0), day.conversations),
        "csat": share(day.ratings.scores_4_5, day.ratings.closing),
        "thumbs_up_share": share(day.ratings.thumbs_up, thumbs),
        "thumbs_down_share": share(day.ratings.thumbs_down, thumbs),
        "cost_usd": round(cost / 1_000_000, USD_PLACES),
        "cost_per_conversation_usd": _usd(cost, day.conversations),
        "cost_per_resolved_usd": _usd(cost, resolved),
    }


def day_view(day: DayRollup, complete: bool) -> dict[str, Any]:
    """The API's day: the stored counts, the refunds' totals, the rates, and whether the day had ended."""
    refunded, cents = day.refunds.totals()
    refunds = day.refunds.model_dump() | {"refunded": refunded, "refunded_cents": cents}
    return day.model_dump() | {"refunds": refunds, "complete": complete, **rates(day)}


_COLUMNS = [
    "day",
    "complete",
    "conversations",
    "turns",
    *(f"outcomes.{o}" for o in ("resolved_by_agent", "escalated", "abandoned", "waiting_on_lead")),
    "resolution_rate",
    "escalation_rate",
    "csat",
    "thumbs_up_share",
    "ratings.thumbs_up",
    "ratings.thumbs_down",
    "ratings.rated_conversations",
    "ratings.closing",
    "ratings.scores_4_5",
    "refunds.direct_requested",
    "refunds.direct_refunded",
    "refunds.held_requested",
    "refunds.held_approved",
    "refunds.held_rejected",
    "refunds.held_expired",
    "refunds.held_pending",
    "refunds.approved_refunded",
    "refunds.refunded",
    "refunds.decision.median_s",
    "refunds.decision.p95_s",
    "refunds.settlement.median_s",
    "refunds.settlement.p95_s",
    "handoffs.opened",
    "handoffs.claimed",
    "handoffs.closed",
    "handoffs.returned_to_bot",
    "handoffs.to_claim.median_s",
    "handoffs.to_claim.p95_s",
    "handoffs.to_close.median_s",
    "handoffs.to_close.p95_s",
    "model_cost_micros",
    "aws_cost_micros",
    "cost_per_conversation_usd",
    "cost_per_resolved_usd",
]


def _pick(view: dict[str, Any], path: str) -> Any:
    value: Any = view
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else value


def to_csv(days: list[dict[str, Any]]) -> str:
    """One row per day (the API's days), the columns above, then one refunded amount column per currency seen."""
    currencies = sorted({c for d in days for c in d["refunds"]["refunded_cents"]})
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow([*_COLUMNS, *(f"refunded_cents.{c}" for c in currencies)])
    for d in days:
        writer.writerow(
            [_pick(d, c) for c in _COLUMNS] + [d["refunds"]["refunded_cents"].get(c, 0) for c in currencies]
        )
    return out.getvalue()
