"""ApprovalNotifierFunction on the template deployed into moto: SQS records in, one SNS message per approval out.

Messages go through the deployed ApprovalQueue and come back with ``receive_message``; the test
plays the event source mapping (batch → handler → delete what did not fail), so the queue's own
redrive policy moves a poison message to the deployed DLQ. The LeadsTopic gets an SQS
subscription so every notification can be counted.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from devstack.stack import Stack
from support_agent import wiring
from support_agent.approvals import notifier as notifier_module
from support_agent.approvals.sweep import ApprovalSweeper
from support_agent.config import get_settings
from support_agent.ids import new_approval_id
from support_agent.store.approvals import Approval, ApprovalStore
from tests.integration.conftest import BASE_ENV, load_handler
from tests.support.approvals import put_pending_approval

CUSTOMER = 70
_order_ids = itertools.count(70_001)


def iso(moment: datetime) -> str:
    return notifier_module.iso(moment)


@dataclass
class Env:
    stack: Stack
    env: dict[str, str]
    handler: Any
    queue_url: str
    queue_arn: str
    dlq_url: str
    inbox_url: str
    ddb: Any
    sqs: Any

    def pending_approval(self, amount_cents: int = 18_900, created_at: datetime | None = None) -> str:
        """An order and a PENDING approval reserving ``amount_cents``, written by the refund tool's writer."""
        return put_pending_approval(
            self.ddb,
            self.env,
            CUSTOMER,
            next(_order_ids),
            amount_cents,
            iso(created_at or datetime.now(UTC)),
            "arrived broken",
        )

    def approval(self, approval_id: str) -> Approval:
        item = ApprovalStore(self.ddb, self.env["APPROVALS_TABLE"]).get(approval_id)
        assert item is not None
        return item

    def send(self, body: str) -> str:
        return str(self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=body)["MessageId"])

    def receive(self, max_messages: int = 10) -> list[dict[str, Any]]:
        """What the event source mapping hands the function: records in the Lambda SQS event shape."""
        out = self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=max_messages, VisibilityTimeout=0, AttributeNames=["All"]
        )
        return [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m["Attributes"],
                "messageAttributes": {},
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": self.queue_arn,
                "awsRegion": "us-east-1",
            }
            for m in out.get("Messages", [])
        ]

    def invoke(self, records: list[dict[str, Any]]) -> set[str]:
        """Run the handler on a batch; delete the records it did not report (as Lambda does). Returns the failed ids."""
        response = self.handler({"Records": records}, None)
        failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
        for record in records:
            if record["messageId"] not in failed:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=record["receiptHandle"])
        return failed

    def drain(self) -> None:
        """Play the event source mapping until the queue is empty (failed records stay until redriven)."""
        for _ in range(50):
            records = self.receive()
            if not records:
                return
            self.invoke(records)
        raise AssertionError("queue did not drain")

    def notifications(self) -> list[dict[str, Any]]:
        """Every SNS message delivered to the LeadsTopic's test subscription so far (consumed)."""
        seen: list[dict[str, Any]] = []
        while True:
            out = self.sqs.receive_message(QueueUrl=self.inbox_url, MaxNumberOfMessages=10)
            messages = out.get("Messages", [])
            if not messages:
                return seen
            for m in messages:
                envelope = json.loads(m["Body"])
                seen.append({"subject": envelope.get("Subject"), "message": json.loads(envelope["Message"])})
                self.sqs.delete_message(QueueUrl=self.inbox_url, ReceiptHandle=m["ReceiptHandle"])


def empty(sqs: Any, url: str) -> None:
    """Delete every message (PurgeQueue is allowed once a minute)."""
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        for m in messages:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


@pytest.fixture(scope="module")
def leads_inbox(stack: Stack) -> str:
    """An SQS queue subscribed (raw delivery off) to the deployed LeadsTopic."""
    sqs = boto3.client("sqs")
    url = sqs.create_queue(QueueName="leads-inbox")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    boto3.client("sns").subscribe(TopicArn=stack.outputs["LeadsTopicArn"], Protocol="sqs", Endpoint=arn)
    return str(url)


@pytest.fixture
def env(stack: Stack, leads_inbox: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    function_env = stack.function_env("ApprovalNotifierFunction")
    for key, value in {**BASE_ENV, **function_env}.items():
        monkeypatch.setenv(key, value)
    wiring.reset()
    sqs = boto3.client("sqs")
    for url in (stack.outputs["ApprovalQueueUrl"], stack.outputs["ApprovalDLQUrl"], leads_inbox):
        empty(sqs, url)
    queue_url = stack.outputs["ApprovalQueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    yield Env(
        stack=stack,
        env=function_env,
        handler=load_handler(stack, "ApprovalNotifierFunction"),
        queue_url=queue_url,
        queue_arn=queue_arn,
        dlq_url=stack.outputs["ApprovalDLQUrl"],
        inbox_url=leads_inbox,
        ddb=boto3.client("dynamodb"),
        sqs=sqs,
    )
    wiring.reset()


def test_the_function_environment_names_the_stacks_topic(env: Env) -> None:
    assert env.env["LEADS_TOPIC_ARN"] == env.stack.outputs["LeadsTopicArn"]
    assert env.env["APPROVALS_TABLE"] == env.stack.physical_ids["ApprovalsTable"]


def test_partial_batch_failure_reports_exactly_the_failed_message_ids(env: Env) -> None:
    good = env.pending_approval(18_900)
    sent = {
        "good": env.send(json.dumps({"approvalId": good})),
        "not_json": env.send("refund everything"),
        "bad_id": env.send(json.dumps({"approvalId": "apr_../../etc"})),
        "no_id": env.send(json.dumps({"orderId": 1042})),
        "not_an_object": env.send(json.dumps([good])),
        # Well-formed but unknown: nothing to notify, and retrying would not change that.
        "unknown": env.send(json.dumps({"approvalId": new_approval_id()})),
    }
    records = env.receive()
    assert {r["messageId"] for r in records} == set(sent.values())

    failed = env.invoke(records)

    assert failed == {sent["not_json"], sent["bad_id"], sent["no_id"], sent["not_an_object"]}
    (note,) = env.notifications()
    assert note["message"] == {
        "approvalId": good,
        "orderId": env.approval(good).order_id,
        "customerId": CUSTOMER,
        "amountCents": 18_900,
        "currency": "USD",
        "reason": "arrived broken",
        "createdAt": env.approval(good).created_at,
    }
    assert note["subject"] == f"Refund approval needed: order {env.approval(good).order_id}, 189.00 USD"
    assert env.approval(good).notified_at
    # Only the failed records are left for redelivery.
    left = env.receive()
    assert {r["messageId"] for r in left} == failed


def test_a_batch_of_only_failures_is_reported_not_raised(env: Env) -> None:
    ids = {env.send("{"), env.send(json.dumps({"approvalId": 7}))}
    assert env.invoke(env.receive()) == ids


def test_a_poison_message_reaches_the_dlq_after_max_receive_count(env: Env) -> None:
    attrs = env.sqs.get_queue_attributes(QueueUrl=env.queue_url, AttributeNames=["RedrivePolicy"])["Attributes"]
    max_receive_count = int(json.loads(attrs["RedrivePolicy"])["maxReceiveCount"])
    good = env.pending_approval()
    poison = env.send(json.dumps({"approvalId": "DROP TABLE"}))
    env.send(json.dumps({"approvalId": good}))

    handed_poison = 0
    for _ in range(max_receive_count + 3):
        records = env.receive()
        if not records:
            break
        handed_poison += sum(r["messageId"] == poison for r in records)
        env.invoke(records)

    # The good message went through on the first batch, beside the poison one.
    assert len(env.notifications()) == 1
    assert handed_poison == max_receive_count
    dead = env.sqs.receive_message(QueueUrl=env.dlq_url, MaxNumberOfMessages=10, AttributeNames=["All"])
    assert [m["MessageId"] for m in dead.get("Messages", [])] == [poison]
    assert env.receive() == []


def test_a_duplicate_delivery_publishes_once(env: Env) -> None:
    approval_id = env.pending_approval()
    body = json.dumps({"approvalId": approval_id})
    # The chat function's send and the sweep's re-send in one batch, then the same message again
    # (SQS is at-least-once; a record can also be redelivered after a visibility timeout).
    env.send(body)
    env.send(body)
    records = env.receive()
    assert env.invoke(records) == set()
    assert env.handler({"Records": records[:1]}, None) == {"batchItemFailures": []}
    env.send(body)
    env.drain()

    notes = env.notifications()
    assert [n["message"]["approvalId"] for n in notes] == [approval_id]


def test_publish_failure_takes_the_claim_back_and_the_record_is_retried(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    approval_id = env.pending_approval()
    message_id = env.send(json.dumps({"approvalId": approval_id}))
    # SNS answers NotFound for a topic that is not there: the publish fails after the claim.
    missing_topic = env.env["LEADS_TOPIC_ARN"] + "-gone"
    monkeypatch.setenv("LEADS_TOPIC_ARN", missing_topic)
    wiring.reset()

    assert env.invoke(env.receive()) == {message_id}
    assert env.approval(approval_id).notified_at is None
    assert env.approval(approval_id).notify_claim_until is None  # taken back: no need to wait for it
    assert env.notifications() == []

    monkeypatch.setenv("LEADS_TOPIC_ARN", env.env["LEADS_TOPIC_ARN"])
    wiring.reset()
    records = env.receive()
    assert [r["messageId"] for r in records] == [message_id]
    assert records[0]["attributes"]["ApproximateReceiveCount"] == "2"
    assert env.invoke(records) == set()
    assert [n["message"]["approvalId"] for n in env.notifications()] == [approval_id]
    assert env.approval(approval_id).notified_at


def test_unclaim_only_removes_its_own_claim(env: Env) -> None:
    approval_id = env.pending_approval()
    notifier = wiring.approval_notifier()
    store = notifier.store
    assert store.claim_notification(approval_id, "2030-01-01T00:00:00.000Z", "2030-01-01T00:02:00.000Z")
    notifier.unclaim(approval_id, "2030-01-01T00:01:00.000Z")  # not ours: left alone
    assert env.approval(approval_id).notify_claim_until == "2030-01-01T00:02:00.000Z"
    notifier.unclaim(approval_id, "2030-01-01T00:02:00.000Z")
    assert env.approval(approval_id).notify_claim_until is None
    assert env.approval(approval_id).notified_at is None


def test_decided_approvals_are_not_announced(env: Env) -> None:
    approval_id = env.pending_approval()
    store = ApprovalStore(env.ddb, env.env["APPROVALS_TABLE"], env.env["CUSTOMER_DATA_TABLE"], env.env["AUDIT_TABLE"])
    store.approve(approval_id, "lead-1", iso(datetime.now(UTC)))
    env.send(json.dumps({"approvalId": approval_id}))
    env.drain()
    assert env.notifications() == []
    assert env.approval(approval_id).notified_at is None


def test_the_clock_is_injectable(env: Env) -> None:
    approval_id = env.pending_approval()
    at = datetime(2031, 5, 6, 7, 8, 9, 123_000, tzinfo=UTC)
    base = wiring.approval_notifier()
    notifier = notifier_module.ApprovalNotifier(base.store, boto3.client("sns"), base.topic_arn, lambda: at)
    assert notifier.notify(approval_id) is notifier_module.Outcome.PUBLISHED
    assert notifier.notify(approval_id) is notifier_module.Outcome.ALREADY_NOTIFIED
    assert env.approval(approval_id).notified_at == "2031-05-06T07:08:09.123Z"
    assert env.approval(approval_id).notify_claim_until is None
    assert len(env.notifications()) == 1
    assert env.approval(approval_id).status == "PENDING"  # notifying decides nothing


# ------------------------------------------------------------------ at-least-once (a crash mid-way)


class Died(BaseException):
    """The process ending mid-call (a Lambda timeout or crash): no ``except Exception`` runs after it."""


class DiesOnPublish:
    def publish(self, **_: Any) -> None:
        raise Died("killed during the SNS publish")


@dataclass
class FakeClock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now


def notifier_at(env: Env, clock: FakeClock, sns: Any = None) -> notifier_module.ApprovalNotifier:
    base = wiring.approval_notifier()
    return notifier_module.ApprovalNotifier(base.store, sns or boto3.client("sns"), base.topic_arn, clock)


def crash_after_the_claim(env: Env, created: datetime) -> tuple[str, FakeClock]:
    """A PENDING approval whose notifier claimed it at ``created + 5 min`` and died in the publish."""
    approval_id = env.pending_approval(created_at=created)
    clock = FakeClock(created + timedelta(minutes=5))
    with pytest.raises(Died):
        notifier_at(env, clock, DiesOnPublish()).notify(approval_id)
    assert env.notifications() == []
    return approval_id, clock


def test_the_claim_outlives_the_function_and_expires_within_the_visibility_timeout(env: Env) -> None:
    """A live holder keeps its claim until its Timeout; a dead one's redelivery finds it expired."""
    resources = env.stack.template["Resources"]
    timeout = int(resources["ApprovalNotifierFunction"]["Properties"]["Timeout"])
    visibility = int(resources["ApprovalQueue"]["Properties"]["VisibilityTimeout"])
    assert timeout < notifier_module.CLAIM_SECONDS < visibility


def test_a_redelivery_after_a_crash_between_claim_and_publish_publishes_once(env: Env) -> None:
    approval_id, clock = crash_after_the_claim(env, datetime(2030, 4, 1, 9, 0, tzinfo=UTC))

    # A redelivery while the claim is live is suppressed: its holder may still be publishing.
    clock.now += timedelta(seconds=notifier_module.CLAIM_SECONDS - 1)
    assert notifier_at(env, clock).notify(approval_id) is notifier_module.Outcome.CLAIMED_ELSEWHERE
    assert env.notifications() == []

    # The crashed record comes back after the visibility timeout, past the claim: it publishes.
    clock.now += timedelta(seconds=2)
    assert notifier_at(env, clock).notify(approval_id) is notifier_module.Outcome.PUBLISHED
    assert notifier_at(env, clock).notify(approval_id) is notifier_module.Outcome.ALREADY_NOTIFIED
    assert [n["message"]["approvalId"] for n in env.notifications()] == [approval_id]
    approval = env.approval(approval_id)
    assert approval.notified_at == iso(clock.now) and approval.notify_claim_until is None


def test_the_sweep_re_enqueues_an_approval_whose_claim_expired_unpublished(env: Env) -> None:
    # In the past, so that the deployed handler (real clock) finds the claim expired.
    created = datetime.now(UTC) - timedelta(hours=1)
    approval_id, clock = crash_after_the_claim(env, created)
    settings = get_settings()

    def sweep(at: datetime) -> list[str]:
        """Run the sweep at ``at``; the approval ids now on the queue (other tests' approvals too)."""
        ApprovalSweeper(
            wiring.approval_notifier().store,
            env.ddb,
            env.sqs,
            env.queue_url,
            settings.approval_ttl_hours,
            settings.renotify_after_seconds,
            clock=lambda: at,
        ).run()
        return [json.loads(r["body"])["approvalId"] for r in env.receive()]

    assert approval_id not in sweep(clock.now + timedelta(seconds=60))  # a live claim: someone may be publishing
    assert sweep(clock.now + timedelta(seconds=notifier_module.CLAIM_SECONDS + 1)).count(approval_id) == 1
    env.drain()  # the deployed handler, as the event source mapping runs it
    mine = [n for n in env.notifications() if n["message"]["approvalId"] == approval_id]
    assert len(mine) == 1
    assert env.approval(approval_id).notified_at
    assert approval_id not in sweep(clock.now + timedelta(hours=1))  # notified: never again
