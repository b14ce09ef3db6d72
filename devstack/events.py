"""Local event sources: the template's SQS, DynamoDB stream and Schedule events, driven against the moto server.

On AWS, Lambda polls the queue and the table's stream and EventBridge fires the schedule; here threads do
the same and invoke the functions' handlers with the events Lambda would send. moto keeps a table's
stream records (INSERT, MODIFY, REMOVE, transactions included) and serves them through the DynamoDB
Streams API; its CloudFormation would instead invoke a mapped function in Docker, so the template's
event source mappings are not deployed (devstack/stack.py) and are read from the template here.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3

from devstack.functions import FunctionError, FunctionPool
from devstack.stack import Stack

# How long a stream poller waits after a read that found nothing. Lambda polls each shard of a DynamoDB stream four
# times a second, and a stored event's push to a WebSocket client (SocketPushFunction) waits on that poll: the same
# interval here, so the local push latency is bounded as on AWS (bench/sockets.py measures it).
STREAM_POLL_SECONDS = 0.25


@dataclass(frozen=True)
class QueueSource:
    function: str
    queue_logical_id: str
    batch_size: int


@dataclass(frozen=True)
class StreamSource:
    """An event source mapping on a DynamoDB table's stream (``EventSourceArn: !GetAtt <table>.StreamArn``)."""

    function: str
    table_logical_id: str
    batch_size: int
    starting_position: str  # TRIM_HORIZON | LATEST
    max_retries: int  # MaximumRetryAttempts; -1: until the record leaves the stream (here: forever)
    on_failure_queue: str | None  # logical id of the OnFailure destination queue, if any
    event_names: frozenset[str] | None = None  # FilterCriteria on eventName (the only filter used); None: all


@dataclass(frozen=True)
class ScheduleSource:
    function: str
    expression: str


def _ref(value: Any) -> str | None:
    if isinstance(value, dict):
        if "Ref" in value:
            return str(value["Ref"])
        if "Fn::GetAtt" in value:
            att = value["Fn::GetAtt"]
            return str(att[0] if isinstance(att, list) else att.split(".")[0])
    return None


def sources(stack: Stack) -> tuple[list[QueueSource], list[ScheduleSource]]:
    """SQS and Schedule events of the template, in either SAM or CloudFormation form."""
    queues: list[QueueSource] = []
    schedules: list[ScheduleSource] = []
    resources = stack.sam_template["Resources"]
    for logical_id, res in resources.items():
        props = res.get("Properties", {})
        if res.get("Type") == "AWS::Serverless::Function":
            for event in props.get("Events", {}).values():
                eprops = event.get("Properties", {})
                if event.get("Type") == "SQS" and _ref(eprops.get("Queue")):
                    queues.append(QueueSource(logical_id, _ref(eprops["Queue"]) or "", eprops.get("BatchSize", 10)))
                elif event.get("Type") in ("Schedule", "ScheduleV2"):
                    schedules.append(
                        ScheduleSource(logical_id, str(eprops.get("Schedule") or eprops.get("ScheduleExpression")))
                    )
        elif res.get("Type") == "AWS::Lambda::EventSourceMapping":
            function, queue = _ref(props.get("FunctionName")), _ref(props.get("EventSourceArn"))
            if function and queue and resources.get(queue, {}).get("Type") == "AWS::SQS::Queue":
                queues.append(QueueSource(function, queue, int(props.get("BatchSize", 10))))
    return queues, schedules


def stream_sources(stack: Stack) -> list[StreamSource]:
    """The template's event source mappings that read a DynamoDB table's stream."""
    found: list[StreamSource] = []
    resources = stack.sam_template["Resources"]
    for res in resources.values():
        props = res.get("Properties", {})
        if res.get("Type") != "AWS::Lambda::EventSourceMapping":
            continue
        arn = props.get("EventSourceArn")
        att = arn.get("Fn::GetAtt") if isinstance(arn, dict) else None
        if isinstance(att, str):
            att = att.split(".", 1)
        function = _ref(props.get("FunctionName"))
        if not (function and att and att[1] == "StreamArn"):
            continue
        if resources.get(att[0], {}).get("Type") != "AWS::DynamoDB::Table":
            continue
        destination = props.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
        names: set[str] = set()
        for f in props.get("FilterCriteria", {}).get("Filters", []):
            pattern = json.loads(f["Pattern"])
            if set(pattern) != {"eventName"}:
                raise ValueError(f"{function}: devstack filters stream records on eventName only, not {pattern}")
            names |= set(pattern["eventName"])
        found.append(
            StreamSource(
                function,
                str(att[0]),
                int(props.get("BatchSize", 100)),
                str(props.get("StartingPosition", "LATEST")),
                int(props.get("MaximumRetryAttempts", -1)),
                _ref(destination),
                frozenset(names) if names else None,
            )
        )
    return found


def _lambda_shape(value: Any) -> Any:
    """A DynamoDB Streams record as boto3 parses it, in the JSON Lambda sends: binary values base64, the
    creation time in epoch seconds."""
    if isinstance(value, dict):
        return {k: _lambda_shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_lambda_shape(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    return value


def stream_event(records: list[dict[str, Any]], stream_arn: str) -> dict[str, Any]:
    return {"Records": [{**_lambda_shape(r), "eventSourceARN": stream_arn} for r in records]}


def sqs_event(messages: list[dict[str, Any]], queue_arn: str, region: str) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": m.get("MessageAttributes", {}),
                "md5OfBody": m.get("MD5OfBody") or hashlib.md5(m["Body"].encode()).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            }
            for m in messages
        ]
    }


def scheduled_event(function: str, region: str) -> dict[str, Any]:
    return {
        "version": "0",
        "id": f"local-{time.time_ns()}",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "region": region,
        "resources": [f"arn:aws:events:{region}:123456789012:rule/{function}-local"],
        "detail": {},
    }


class EventSources:
    """Threads that poll the queues and fire the schedules until stopped."""

    def __init__(
        self, stack: Stack, pools: dict[str, FunctionPool], endpoint_url: str, schedule_seconds: float = 30.0
    ) -> None:
        self._stack, self._pools, self._endpoint = stack, pools, endpoint_url
        self._schedule_seconds = schedule_seconds
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.queues, self.schedules = sources(stack)
        self.streams = stream_sources(stack)

    def start(self) -> None:
        for q in self.queues:
            self._spawn(self._poll, q)
        for st in self.streams:
            self._spawn(self._poll_stream, st)
        for s in self.schedules:
            self._spawn(self._tick, s)

    def _spawn(self, target: Any, arg: Any) -> None:
        t = threading.Thread(target=target, args=(arg,), daemon=True, name=f"events-{arg.function}")
        t.start()
        self._threads.append(t)

    def _poll(self, source: QueueSource) -> None:
        sqs = boto3.client("sqs", endpoint_url=self._endpoint)
        url = self._stack.physical_ids[source.queue_logical_id]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        region = sqs.meta.region_name
        while not self._stop.is_set():
            try:
                got = sqs.receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=min(source.batch_size, 10),
                    WaitTimeSeconds=1,
                    AttributeNames=["All"],
                )
            except Exception:
                if self._stop.wait(1):
                    return
                continue
            messages = got.get("Messages", [])
            if messages:
                self._deliver(sqs, url, source.function, messages, arn, region)

    def _deliver(
        self, sqs: Any, url: str, function: str, messages: list[dict[str, Any]], arn: str, region: str
    ) -> None:
        try:
            out = self._pools[function].invoke(sqs_event(messages, arn, region))
        except FunctionError:
            return  # the whole batch becomes visible again after the visibility timeout, as on AWS
        failed = {f["itemIdentifier"] for f in (out or {}).get("batchItemFailures", [])}
        done = [m for m in messages if m["MessageId"] not in failed]
        for m in done:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])

    def _poll_stream(self, source: StreamSource) -> None:
        """As Lambda reads a stream: batches in order per shard; a failed record (ReportBatchItemFailures)
        or a failed invocation is retried from that record, up to ``max_retries``, then the batch is
        described on the on-failure queue and skipped."""
        ddb = boto3.client("dynamodb", endpoint_url=self._endpoint)
        streams = boto3.client("dynamodbstreams", endpoint_url=self._endpoint)
        table = self._stack.physical_ids[source.table_logical_id]
        arn = ddb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
        iterators: dict[str, str] = {}
        while not self._stop.is_set():
            try:
                for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
                    if shard["ShardId"] not in iterators:
                        iterators[shard["ShardId"]] = streams.get_shard_iterator(
                            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType=source.starting_position
                        )["ShardIterator"]
                busy = False
                for shard_id, iterator in list(iterators.items()):
                    got = streams.get_records(ShardIterator=iterator, Limit=source.batch_size)
                    records = got.get("Records", [])
                    if source.event_names is not None:  # as the mapping's FilterCriteria drops the others
                        records = [r for r in records if r.get("eventName") in source.event_names]
                    if records:
                        busy = True
                        self._deliver_stream(streams, source, arn, shard_id, records)
                    iterators[shard_id] = got["NextShardIterator"]
            except Exception as exc:  # moto restarting, or the stack stopping: try again shortly
                print(f"devstack: {source.function} stream poll failed: {exc!r}", file=sys.stderr)
                busy = False
            if not busy and self._stop.wait(STREAM_POLL_SECONDS):
                return

    def _deliver_stream(
        self, streams: Any, source: StreamSource, arn: str, shard_id: str, records: list[dict[str, Any]]
    ) -> None:
        pending, attempts = records, 0
        while pending and not self._stop.is_set():
            try:
                out = self._pools[source.function].invoke(stream_event(pending, arn))
                failed = {f["itemIdentifier"] for f in (out or {}).get("batchItemFailures", [])}
            except FunctionError:
                failed = {pending[0]["dynamodb"]["SequenceNumber"]}
            if not failed:
                return
            first = next((i for i, r in enumerate(pending) if r["dynamodb"]["SequenceNumber"] in failed), 0)
            pending = pending[first:]
            attempts += 1
            if 0 <= source.max_retries < attempts:
                self._give_up(source, arn, shard_id, pending)
                return

    def _give_up(self, source: StreamSource, arn: str, shard_id: str, records: list[dict[str, Any]]) -> None:
        """What Lambda sends the on-failure destination: where the records were, not the records."""
        info = {
            "shardId": shard_id,
            "startSequenceNumber": records[0]["dynamodb"]["SequenceNumber"],
            "endSequenceNumber": records[-1]["dynamodb"]["SequenceNumber"],
            "batchSize": len(records),
            "streamArn": arn,
        }
        print(f"devstack: {source.function} gave up on stream records {info}", file=sys.stderr)
        if source.on_failure_queue:
            sqs = boto3.client("sqs", endpoint_url=self._endpoint)
            body = {"requestContext": {"condition": "RetryAttemptsExhausted"}, "DDBStreamBatchInfo": info}
            sqs.send_message(QueueUrl=self._stack.physical_ids[source.on_failure_queue], MessageBody=json.dumps(body))

    def _tick(self, source: ScheduleSource) -> None:
        region = boto3.session.Session().region_name or "us-east-1"
        while not self._stop.wait(self._schedule_seconds):
            try:
                self._pools[source.function].invoke(scheduled_event(source.function, region))
            except FunctionError:
                continue

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(3)

    def __iter__(self) -> Iterator[QueueSource | StreamSource | ScheduleSource]:
        yield from self.queues
        yield from self.streams
        yield from self.schedules
