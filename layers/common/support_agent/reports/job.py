"""The hourly rollup run: today's and yesterday's days (UTC) computed again and stored, and a completed day's
figures emitted once as EMF metrics (the day's alarms read them: template.yaml ResolutionRateAlarm and
ThumbsDownShareAlarm).

A day counts as complete once ``SETTLE`` has passed since its end: the outcome sweep stores a conversation's outcome
some minutes after it went quiet, so a run just after midnight would miss the day's last ones. Its metrics then go
out with the run's time stamp (CloudWatch takes no day-old points for an alarm's current period). A rate without a
denominator (no conversation, no thumbs) is not emitted: the alarms treat missing data as not breaching.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from support_agent import observability as obs
from support_agent.clock import Clock, iso
from support_agent.observability import logger
from support_agent.reports.report import rates
from support_agent.reports.rollup import DayRollup, rollup
from support_agent.reports.sources import DaySources
from support_agent.reports.store import RollupStore

SETTLE = timedelta(hours=2)


def day_metrics(day: DayRollup) -> dict[str, float]:
    """What a completed day emits; RefundedCents sums every currency's minor units (one currency per shop)."""
    computed = rates(day)
    values: dict[str, float | None] = {
        obs.RESOLUTION_RATE: computed["resolution_rate"],
        obs.ESCALATION_RATE: computed["escalation_rate"],
        obs.THUMBS_DOWN_SHARE: computed["thumbs_down_share"],
        obs.CSAT: computed["csat"],
        obs.CONVERSATIONS: day.conversations,
        obs.REFUNDED_CENTS: sum(day.refunds.totals()[1].values()),
    }
    return {name: value for name, value in values.items() if value is not None}


@dataclass
class RunReport:
    days: list[str] = field(default_factory=list)
    emitted: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"days": self.days, "emitted": self.emitted}


class RollupJob:
    def __init__(self, sources: DaySources, store: RollupStore, clock: Clock) -> None:
        self._sources = sources
        self._store = store
        self._clock = clock

    def run(self) -> RunReport:
        now = self._clock()
        today = now.date()
        report = RunReport()
        for day in (today - timedelta(days=1), today):
            figures = self.compute(day)
            complete = now >= datetime.combine(day + timedelta(days=1), datetime.min.time(), now.tzinfo) + SETTLE
            self._store.save(figures, iso(now), complete)
            report.days.append(figures.day)
            if complete and self._store.claim_metrics(day, iso(now)):
                for name, value in day_metrics(figures).items():
                    obs.emit(name, value)
                report.emitted.append(figures.day)
        logger.info("daily rollup", extra=report.as_dict())
        return report

    def compute(self, day: date) -> DayRollup:
        inputs = self._sources.day(day.isoformat())
        return rollup(day.isoformat(), inputs.outcomes, inputs.ledger_rows, inputs.approvals, inputs.handoffs)
