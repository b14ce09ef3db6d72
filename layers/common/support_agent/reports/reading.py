"""GET /api/reports/daily's range and answer: which days a lead asked for, and the stored days as the API shows
them (api/lead_routes.py serves it; the rates are report.py's)."""

from __future__ import annotations

from datetime import date, timedelta

from pydantic import BaseModel, ConfigDict, Field

from support_agent.errors import InvalidRequest
from support_agent.reports.report import day_view
from support_agent.reports.rollup import DayRollup, Refunds
from support_agent.reports.store import RollupStore

DEFAULT_DAYS = 14
MAX_DAYS = 92


class RefundsView(Refunds):
    refunded: int = Field(description="direct_refunded + approved_refunded")
    refunded_cents: dict[str, int] = Field(description="Minor units refunded per currency, direct and approved")


class ReportDay(DayRollup):
    refunds: RefundsView  # the stored counts and their totals
    complete: bool = Field(description="The day had ended (and settled) when it was last computed")
    resolution_rate: float | None = Field(description="resolved_by_agent / conversations")
    escalation_rate: float | None = Field(description="escalated / conversations")
    csat: float | None = Field(description="closing ratings of 4-5 / closing ratings")
    thumbs_up_share: float | None = Field(description="thumbs up / (up + down)")
    thumbs_down_share: float | None = Field(description="thumbs down / (up + down)")
    cost_usd: float = Field(description="(model + AWS cost micros) / 1e6")
    cost_per_conversation_usd: float | None
    cost_per_resolved_usd: float | None


class DailyReport(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    from_: str = Field(alias="from", description="First day, YYYY-MM-DD (UTC)")
    to: str = Field(description="Last day, YYYY-MM-DD (UTC), included")
    days: list[ReportDay] = Field(
        description="The stored days of the range, oldest first; a day never computed is absent"
    )


def _day(value: str, name: str) -> date:
    try:
        if len(value) != 10:
            raise ValueError(value)
        return date.fromisoformat(value)
    except ValueError:
        raise InvalidRequest(f"{name}: a date as YYYY-MM-DD") from None


def day_range(first: str | None, last: str | None, today: date) -> tuple[date, date]:
    """``to`` defaults to today (UTC), ``from`` to 13 days before ``to``; at most MAX_DAYS days, ``from`` ≤ ``to``."""
    end = _day(last, "to") if last is not None else today
    start = _day(first, "from") if first is not None else end - timedelta(days=DEFAULT_DAYS - 1)
    if start > end:
        raise InvalidRequest("from: after to")
    if (end - start).days + 1 > MAX_DAYS:
        raise InvalidRequest(f"at most {MAX_DAYS} days at a time")
    return start, end


def daily_report(store: RollupStore, start: date, end: date) -> DailyReport:
    days = [ReportDay.model_validate(day_view(d.rollup, d.complete)) for d in store.between(start, end)]
    return DailyReport.model_validate({"from": start.isoformat(), "to": end.isoformat(), "days": days})
