"""DailyRollupFunction (EventBridge schedule, hourly): today's and yesterday's rollups (UTC) stored, a completed day's
figures emitted once as metrics. Logic lives in the layer (support_agent/reports/job.py)."""

from typing import Any

from aws_lambda_powertools.logging import correlation_paths

from support_agent import wiring
from support_agent.observability import metrics, observed


# The correlation id is the EventBridge event id.
@observed(correlation_id_path=correlation_paths.EVENT_BRIDGE)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return wiring.rollup_job().run().as_dict()
