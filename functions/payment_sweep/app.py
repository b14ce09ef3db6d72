"""PaymentSweepFunction (EventBridge schedule): refunds left REQUESTED or SETTLING are settled by asking the
payment provider (support_agent/refunds/sweep.py). Logic lives in the layer."""

from typing import Any

from aws_lambda_powertools.logging import correlation_paths

from support_agent import wiring
from support_agent.messages import Deadline
from support_agent.observability import metrics, observed

# Left after the last row to record its outcome and flush the metric before Lambda's timeout.
MARGIN_MS = 5_000


# The correlation id is the EventBridge event id; the sweep emits the oldest unsettled refund's age.
@observed(correlation_id_path=correlation_paths.EVENT_BRIDGE)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return wiring.payment_sweeper().run(Deadline.of_lambda(context, MARGIN_MS / 1000)).as_dict()
