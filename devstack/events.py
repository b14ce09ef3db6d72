"""Local event sources: the template's SQS and Schedule events, driven against the moto server.

On AWS, Lambda polls the queue and EventBridge fires the schedule; here two threads do the same and
invoke the functions' handlers with the events Lambda would send.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3

from devstack.functions import FunctionError, FunctionPool
from devstack.stack import Stack


@dataclass(frozen=True)
class QueueSource:
    function: str
    queue_logical_id: str
    batch_size: int


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

    def start(self) -> None:
        for q in self.queues:
            self._spawn(self._poll, q)
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

    def __iter__(self) -> Iterator[QueueSource | ScheduleSource]:
        yield from self.queues
        yield from self.schedules
