"""AuditWatcherFunction: the audit table's stream → AuditRowsTampered and an error line per MODIFY or REMOVE
of an audit row (support_agent/audit/watch.py). Logic lives in the layer."""

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord

from support_agent.audit import watch as audit_watch
from support_agent.observability import metrics, observed

# A record that fails is reported (ReportBatchItemFailures) rather than raised: Lambda retries from it,
# bisecting, then describes it on the on-failure destination (template.yaml AuditWatcherStreamMapping).
processor = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)


def watch(record: DynamoDBRecord) -> None:
    audit_watch.check(record.raw_event)


@observed()
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return dict(process_partial_response(event=event, record_handler=watch, processor=processor, context=context))
