"""PaymentsFunction: RefundFlow's refund step (a Step Functions ``lambda:invoke`` task). Logic lives in the layer.

Event ``{"approvalId": "apr_…", "execution": "<execution name>"}``; the answer is the step's outcome
``{"approvalId", "status", "refundId", "replayed"}``. ``ApprovalNotFound``, ``ApprovalNotApproved`` and
``PaymentOutcomeUnknown`` propagate: Lambda reports the class name as ``errorType`` and the state
machine's Retry/Catch match on it (statemachine/refund_flow.asl.json).
"""

from typing import Any

from support_agent import wiring
from support_agent.ids import APPROVAL_ID
from support_agent.messages import Deadline
from support_agent.observability import metrics, observed
from support_agent.refunds import ApprovalNotFound

# Left after the last provider attempt to record its outcome and answer Step Functions before Lambda's timeout:
# an invocation killed mid-record is only retried, but one that ends in time says what happened.
MARGIN_MS = 5_000


@observed(correlation_id_path="approvalId")
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    approval_id = event.get("approvalId") if isinstance(event, dict) else None
    if not isinstance(approval_id, str) or not APPROVAL_ID.match(approval_id):
        raise ApprovalNotFound(f"not an approval id: {approval_id!r}"[:200])
    execution = str(event.get("execution") or "")
    return wiring.refund_step().run(approval_id, execution, Deadline.of_lambda(context, MARGIN_MS / 1000))
