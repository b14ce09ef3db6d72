"""OutcomeSweepFunction (EventBridge schedule): the outcome of every conversation that went quiet (docs/OUTCOMES.md)."""

from typing import Any

from aws_lambda_powertools.logging import correlation_paths

from support_agent import wiring
from support_agent.observability import metrics, observed


# The correlation id is the EventBridge event id; the run is bounded by its count and by the time Lambda gives it.
@observed(correlation_id_path=correlation_paths.EVENT_BRIDGE)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return wiring.outcome_sweeper().run(remaining).as_dict()
