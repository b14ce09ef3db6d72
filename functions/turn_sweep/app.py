"""TurnSweepFunction (every minute): handed-over turns that stopped moving are sent again, or ended as failed
(support_agent/agent/turn_sweep.py). Logic lives in the layer."""

from typing import Any

from aws_lambda_powertools.logging import correlation_paths

from support_agent import wiring
from support_agent.observability import metrics, observed


@observed(correlation_id_path=correlation_paths.EVENT_BRIDGE)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return wiring.turn_sweeper().run()
