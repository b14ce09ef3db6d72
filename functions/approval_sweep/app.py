"""ApprovalSweepFunction (EventBridge schedule): expire stale PENDING approvals, re-enqueue un-notified ones."""

from typing import Any

from aws_lambda_powertools.logging import correlation_paths

from support_agent import wiring
from support_agent.observability import metrics, observed


# The correlation id is the EventBridge event id; the sweep emits the oldest pending approval's age.
@observed(correlation_id_path=correlation_paths.EVENT_BRIDGE)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return wiring.approval_sweeper().run().as_dict()
