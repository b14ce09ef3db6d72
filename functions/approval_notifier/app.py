"""ApprovalNotifierFunction: ApprovalQueue records → one leads notification per approval. Logic lives in the layer."""

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

from support_agent import wiring
from support_agent.approvals.notifier import ApprovalQueueRecord, handle_record
from support_agent.observability import metrics, observed

# Failed records are reported (ReportBatchItemFailures), never raised, even when all fail:
# each is redelivered on its own and a poison message goes to the DLQ after maxReceiveCount.
processor = BatchProcessor(event_type=EventType.SQS, model=ApprovalQueueRecord, raise_on_entire_batch_failure=False)


def notify(record: ApprovalQueueRecord) -> str:
    """Each record's lines carry its approval id and SQS message id (handle_record adds them)."""
    return handle_record(record, wiring.approval_notifier())


@observed()
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return dict(process_partial_response(event=event, record_handler=notify, processor=processor, context=context))
