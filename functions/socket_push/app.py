"""SocketPushFunction: the Conversations table's stream → each changed conversation's new feed events, posted to
its subscribed connections (support_agent/sockets/pusher.py). All logic lives in the layer."""

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord

from support_agent import wiring
from support_agent.observability import metrics, observed
from support_agent.sockets.pusher import StreamBatch

# A record whose push raised (a throttled read) is reported, not raised: Lambda retries from it, bisecting, then
# describes it on the on-failure destination (template.yaml SocketPushStreamMapping).
processor = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)


@observed()
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    batch = StreamBatch(wiring.socket_pusher())

    def push(record: DynamoDBRecord) -> None:
        batch.record(record.raw_event)

    return dict(process_partial_response(event=event, record_handler=push, processor=processor, context=context))
