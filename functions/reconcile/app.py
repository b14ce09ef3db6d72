"""ReconcileFunction (EventBridge schedule, daily): the refund ledger compared with the payment provider.

Logic lives in the layer (support_agent/refunds/reconcile.py). Each difference is a log line, their count
the ``ReconciliationDifferences`` metric; the answer is the report, its first differences only (the counts
are whole). A provider that cannot be read completely raises `ReconciliationIncomplete`: the invocation
fails (its Errors alarm) instead of reporting refunds missing that are not.
"""

from typing import Any

from aws_lambda_powertools.logging import correlation_paths

from support_agent import wiring
from support_agent.messages import Deadline
from support_agent.observability import metrics, observed

# Left after the provider's last listing to log the report and flush the metric before Lambda's timeout.
MARGIN_MS = 10_000
SHOWN = 100  # differences in the answer; the log has every one


@observed(correlation_id_path=correlation_paths.EVENT_BRIDGE)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return wiring.reconciler().run(deadline=Deadline.of_lambda(context, MARGIN_MS / 1000)).as_dict(limit=SHOWN)
