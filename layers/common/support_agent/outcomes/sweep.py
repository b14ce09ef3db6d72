"""OutcomeSweepFunction's logic, every 5 minutes: each conversation quiet long enough gets its outcome.

The due headers come from the sparse ``outcomes_due`` index (no Scan), earliest first, at most ``limit`` a run and
only while the Lambda has time left; the rest wait for the next run. Each is read again strongly first: a header
whose check time moved since the index showed it (a message, a rating) is left to its new time, one a turn still
holds is looked at when the lease ends. An error on one conversation does not stop the others; the run then raises
at the end, so the invocation counts as failed and its alarm fires.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit, single_metric

from support_agent import observability as obs
from support_agent.clock import Clock, iso, utc_datetime
from support_agent.outcomes.facts import FactGatherer
from support_agent.outcomes.rules import derive
from support_agent.outcomes.store import Due, OutcomeStore, figures, quiet_at_of

logger = logging.getLogger(__name__)

OUTCOMES_STORED = "OutcomesStored"  # per stored derivation, dimension ``outcome``
RESERVE_MS = 10_000  # stop taking conversations when the invocation has less than this left


@dataclass
class SweepSummary:
    due: int = 0
    stored: int = 0
    final: int = 0
    skipped: int = 0  # moved since the index showed it, or a turn still holds it
    errors: int = 0
    truncated: bool = False  # out of time: the rest wait for the next run
    outcomes: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class OutcomeSweepIncomplete(Exception):
    def __init__(self, summary: SweepSummary) -> None:
        super().__init__(f"outcome sweep finished with {summary.errors} error(s): {summary.as_dict()}")
        self.summary = summary


class OutcomeSweeper:
    def __init__(
        self,
        outcomes: OutcomeStore,
        facts: FactGatherer,
        quiet_seconds: int,
        clock: Clock = utc_datetime,
        limit: int = 200,
    ) -> None:
        self.outcomes = outcomes
        self.facts = facts
        self.quiet_seconds = quiet_seconds
        self._clock = clock
        self.limit = limit

    def run(self, remaining_ms: Callable[[], int] | None = None) -> SweepSummary:
        """One pass; ``remaining_ms`` is the Lambda context's time left (None: no bound but ``limit``)."""
        now = self._clock()
        summary = SweepSummary()
        stored: Counter[str] = Counter()
        due = self.outcomes.due(int(now.timestamp()), self.limit)
        summary.due = len(due)
        for entry in due:
            if remaining_ms is not None and remaining_ms() < RESERVE_MS:
                summary.truncated = True
                break
            try:
                outcome = self._one(entry, iso(now), int(now.timestamp()))
            except Exception:
                logger.exception("outcome_failed", extra={"conversation_id": entry.conversation_id})
                summary.errors += 1
                continue
            if outcome is None:
                summary.skipped += 1
                continue
            name, final = outcome
            stored[name] += 1
            summary.stored += 1
            summary.final += final
        summary.outcomes = dict(stored)
        for name, count in stored.items():
            with single_metric(OUTCOMES_STORED, MetricUnit.Count, count, namespace=obs.NAMESPACE) as metric:
                metric.add_dimension("service", obs.SERVICE)
                metric.add_dimension("outcome", name)
        if summary.errors:
            raise OutcomeSweepIncomplete(summary)
        return summary

    def _one(self, entry: Due, now: str, now_epoch: int) -> tuple[str, bool] | None:
        """Derive and store one conversation's outcome: (its outcome, final), or None when it was not due after all."""
        gathered = self.facts.gather(entry.conversation_id, now)
        if gathered is None:
            return None
        header = gathered.header
        if header.quiet_check_at != entry.quiet_check_at or header.quiet_check_at > now_epoch:
            return None  # activity or a rating since the index showed it: its own check comes
        if header.lease_owner and header.lease_expires_at >= now_epoch:
            self.outcomes.postpone(entry.conversation_id, entry.quiet_check_at, header.lease_expires_at + 1)
            return None
        outcome = derive(gathered.facts)
        quiet_at = quiet_at_of(header.updated_at or now, self.quiet_seconds)
        item = self.outcomes.put(entry.conversation_id, figures(gathered.facts, outcome), quiet_at, now)
        self.outcomes.follow_up(entry.conversation_id, entry.quiet_check_at, outcome.final, str(item["quiet_at"]), now)
        obs.logger.info(
            "outcome_stored",
            conversation_id=entry.conversation_id,
            outcome=outcome.outcome,
            reason=outcome.reason,
            final=outcome.final,
        )
        return outcome.outcome, outcome.final
