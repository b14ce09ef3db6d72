"""TurnWorkerFunction: TurnQueue records → a handed-over turn finished by the same loop
(support_agent/agent/worker.py). Logic lives in the layer."""

import json
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from support_agent import wiring
from support_agent.messages import Deadline
from support_agent.observability import metrics, observed

# Left after the turn's last write to record its answer and flush the metrics before Lambda's timeout.
MARGIN_SECONDS = 10.0
# A record that raises (not a turn's own failure, which is recorded on the turn) is reported, redelivered, and
# after three receives goes to TurnDLQ, where the turn sweep ends the turn as failed.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


def work(record: SQSRecord, lambda_context: Any = None) -> str:
    """Powertools passes the handler's context here (the turn's deadline is Lambda's too)."""
    return wiring.turn_worker().run(json.loads(record.body), Deadline.of_lambda(lambda_context, MARGIN_SECONDS))


@observed()
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return dict(process_partial_response(event=event, record_handler=work, processor=processor, context=context))
