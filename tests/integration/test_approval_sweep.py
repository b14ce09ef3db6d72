"""ApprovalSweepFunction on the template deployed into moto: stale approvals expire, un-notified ones are
re-sent, and APPROVED ones whose RefundFlow never started get it started (RefundFlow runs for real).

Approvals are written by the refund tool's own writer (PENDING + the amount reserved on the
order, one transaction) with ``created_at`` placed in the past; the sweeper runs on a fixed clock.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from devstack.stack import Stack
from support_agent import observability as obs
from support_agent import wiring
from support_agent.approvals import sweep as sweep_module
from support_agent.approvals.flow import start_flow
from support_agent.approvals.notifier import iso
from support_agent.config import get_settings
from support_agent.store.approvals import Approval, ApprovalStore
from support_agent.store.audit import AuditStore
from support_agent.store.customer_data import CustomerDataStore, Order
from support_agent.store.dynamo import to_item, to_values
from tests.integration.conftest import BASE_ENV, load_handler
from tests.support.approvals import put_pending_approval

CUSTOMER = 71
NOW = datetime(2030, 3, 1, 12, 0, 0, tzinfo=UTC)
_order_ids = itertools.count(71_001)


@dataclass
class Env:
    stack: Stack
    env: dict[str, str]
    ddb: Any
    sqs: Any

    @property
    def store(self) -> ApprovalStore:
        return ApprovalStore(
            self.ddb, self.env["APPROVALS_TABLE"], self.env["CUSTOMER_DATA_TABLE"], self.env["AUDIT_TABLE"]
        )

    def sweeper(
        self, now: datetime = NOW, store: ApprovalStore | None = None, **kw: Any
    ) -> sweep_module.ApprovalSweeper:
        settings = get_settings()
        return sweep_module.ApprovalSweeper(
            store or self.store,
            self.ddb,
            self.sqs,
            settings.approval_queue_url,
            settings.approval_ttl_hours,
            settings.renotify_after_seconds,
            clock=lambda: now,
            **{"sfn": self.sfn, "state_machine_arn": settings.refund_flow_arn, **kw},
        )

    @property
    def sfn(self) -> Any:
        return boto3.client("stepfunctions")

    def pending_approval(self, created_at: datetime, amount_cents: int = 18_900, notified: bool = False) -> str:
        approval_id = put_pending_approval(
            self.ddb, self.env, CUSTOMER, next(_order_ids), amount_cents, iso(created_at), "never arrived"
        )
        if notified:
            self.store.mark_notified(approval_id, iso(created_at + timedelta(seconds=1)))
        return approval_id

    def approved_approval(self, approved_at: datetime) -> str:
        """APPROVED by a lead whose request died before StartExecution: no execution exists."""
        approval_id = self.pending_approval(approved_at - timedelta(hours=2), notified=True)
        self.store.approve(approval_id, "lead-1", iso(approved_at))
        return approval_id

    def executions(self, approval_id: str) -> list[dict[str, Any]]:
        """RefundFlow executions of this approval (``<id>``, ``<id>-r<n>``)."""
        arn = self.env["REFUND_FLOW_ARN"]
        listed = self.sfn.list_executions(stateMachineArn=arn, maxResults=1000)["executions"]
        return [e for e in listed if e["name"].startswith(approval_id)]

    def settled(self, approval_id: str, seconds: float = 20) -> Approval:
        """The approval once none of its executions runs any more."""
        until = time.monotonic() + seconds
        while any(e["status"] == "RUNNING" for e in self.executions(approval_id)):
            assert time.monotonic() < until, "RefundFlow still running"
            time.sleep(0.05)
        return self.approval(approval_id)

    def break_reservation(self, approval_id: str) -> None:
        """The order changed underneath: RefundFlow's refund step fails the approval (asking the provider nothing)."""
        self.set_reserved(approval_id, 0)

    def set_reserved(self, approval_id: str, reserved: int) -> None:
        total = int(self.order(approval_id).total_cents)
        self.ddb.update_item(
            TableName=self.env["CUSTOMER_DATA_TABLE"],
            Key=to_item({"customer_id": CUSTOMER, "sk": f"ORDER#{self.approval(approval_id).order_id}"}),
            UpdateExpression="SET reserved_cents = :r, available_cents = :a",
            ExpressionAttributeValues=to_values({":r": reserved, ":a": total - reserved}),
        )

    def approval(self, approval_id: str) -> Approval:
        item = self.store.get(approval_id)
        assert item is not None
        return item

    def order(self, approval_id: str) -> Order:
        order = CustomerDataStore(self.ddb, self.env["CUSTOMER_DATA_TABLE"]).get_order(
            CUSTOMER, int(self.approval(approval_id).order_id)
        )
        assert order is not None
        return order

    def queued(self) -> list[dict[str, Any]]:
        """Bodies waiting on the ApprovalQueue (consumed)."""
        bodies = []
        url = self.env["APPROVAL_QUEUE_URL"]
        while messages := self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
            for m in messages:
                bodies.append(json.loads(m["Body"]))
                self.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        return bodies


@pytest.fixture
def env(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    function_env = stack.function_env("ApprovalSweepFunction")
    for key, value in {**BASE_ENV, **function_env}.items():
        monkeypatch.setenv(key, value)
    wiring.reset()
    ddb = boto3.client("dynamodb")
    # Each test sees only its own approvals: the sweep reads the whole PENDING index.
    table = function_env["APPROVALS_TABLE"]
    for page in ddb.get_paginator("scan").paginate(TableName=table, ProjectionExpression="approval_id"):
        for item in page["Items"]:
            ddb.delete_item(TableName=table, Key=item)
    e = Env(stack, function_env, ddb, boto3.client("sqs"))
    e.queued()
    yield e
    wiring.reset()


def test_the_function_environment(env: Env) -> None:
    assert env.env["APPROVAL_TTL_HOURS"] == "168"
    assert env.env["APPROVAL_QUEUE_URL"] == env.stack.outputs["ApprovalQueueUrl"]
    settings = get_settings()
    assert (settings.approval_ttl_hours, settings.renotify_after_seconds) == (168, 300)


def test_expiry_releases_the_reservation(env: Env) -> None:
    stale = env.pending_approval(NOW - timedelta(hours=168, seconds=1), notified=True)
    fresh = env.pending_approval(NOW - timedelta(hours=167, minutes=59), notified=True)

    result = env.sweeper().run()

    assert (result.expired, result.requeued, result.conflicts, result.errors) == (1, 0, 0, 0)
    expired = env.approval(stale)
    assert expired.status == "EXPIRED"
    assert (expired.decided_by, expired.decided_at) == ("system:sweep", iso(NOW))
    order = env.order(stale)
    assert (order.available_cents, order.reserved_cents, order.refunded_cents) == (18_900, 0, 0)
    audit = AuditStore(env.ddb, env.env["AUDIT_TABLE"]).list_stream(f"approval#{stale}")
    # The approval's stream: its request (the tool's reservation), then the sweep's decision.
    assert [(a["action"], a["actor"], a["outcome"]) for a in audit][1:] == [
        ("approval_expired", "system:sweep", "EXPIRED")
    ]
    assert audit[-1]["customer_id"] == CUSTOMER
    # The fresh one is untouched: still pending, its amount still reserved.
    assert env.approval(fresh).status == "PENDING"
    assert (env.order(fresh).available_cents, env.order(fresh).reserved_cents) == (0, 18_900)
    assert env.queued() == []

    # Sweeping again changes nothing (no double release).
    again = env.sweeper().run()
    assert (again.expired, again.scanned) == (0, 1)
    assert env.order(stale).available_cents == 18_900


def test_an_unnotified_old_pending_is_enqueued_again(env: Env) -> None:
    lost = env.pending_approval(NOW - timedelta(minutes=10))  # its send after the transaction failed
    in_flight = env.pending_approval(NOW - timedelta(minutes=1))  # the chat function's send may be on its way
    notified = env.pending_approval(NOW - timedelta(minutes=10), notified=True)

    result = env.sweeper().run()

    assert (result.expired, result.requeued) == (0, 1)
    assert env.queued() == [{"approvalId": lost}]
    for approval_id in (lost, in_flight, notified):
        assert env.approval(approval_id).status == "PENDING"


def test_a_lead_deciding_during_the_sweep_wins_without_a_double_release(env: Env) -> None:
    stale = env.pending_approval(NOW - timedelta(days=30))
    outer = env

    class LeadRejectsFirst(ApprovalStore):
        def release(self, approval_id: str, from_status: str, *args: Any, **kwargs: Any) -> Approval:
            if from_status == "PENDING" and args[0] == "EXPIRED":
                outer.store.release(approval_id, "PENDING", "REJECTED", "lead-1", "approval_rejected", iso(NOW))
            return super().release(approval_id, from_status, *args, **kwargs)

    racing = LeadRejectsFirst(
        env.ddb, env.env["APPROVALS_TABLE"], env.env["CUSTOMER_DATA_TABLE"], env.env["AUDIT_TABLE"]
    )
    result = env.sweeper(store=racing).run()

    assert (result.expired, result.conflicts, result.errors) == (0, 1, 0)
    assert env.approval(stale).status == "REJECTED"
    order = env.order(stale)
    assert (order.available_cents, order.reserved_cents, order.refunded_cents) == (18_900, 0, 0)


def test_each_run_is_bounded_and_the_next_one_continues(env: Env) -> None:
    stale = [env.pending_approval(NOW - timedelta(days=10, minutes=i)) for i in range(3)]

    first = env.sweeper(max_items=2).run()
    assert (first.expired, first.truncated) == (2, True)
    second = env.sweeper(max_items=2).run()
    assert (second.expired, second.truncated) == (1, False)
    assert {env.approval(a).status for a in stale} == {"EXPIRED"}


def test_the_scheduled_handler_sweeps_with_the_stack_settings(env: Env) -> None:
    now = datetime.now(UTC)
    stale = env.pending_approval(now - timedelta(hours=169), notified=True)
    lost = env.pending_approval(now - timedelta(minutes=6))
    handler = load_handler(env.stack, "ApprovalSweepFunction")
    event = {
        "version": "0",
        "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "time": iso(now),
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/sweep"],
        "detail": {},
    }

    out = handler(event, None)

    assert out == {
        "scanned": 2,
        "expired": 1,
        "requeued": 1,
        "conflicts": 0,
        "errors": 0,
        "truncated": False,
        "flows_started": 0,
    }
    assert env.approval(stale).status == "EXPIRED"
    assert env.queued() == [{"approvalId": lost}]


def test_a_failure_on_one_approval_does_not_stop_the_others_but_fails_the_run(env: Env) -> None:
    lost = [env.pending_approval(NOW - timedelta(minutes=10 + i)) for i in range(2)]
    stale = env.pending_approval(NOW - timedelta(days=8))

    class FlakySqs:
        calls = 0

        def send_message(self, **kwargs: Any) -> dict[str, Any]:
            FlakySqs.calls += 1
            if FlakySqs.calls == 1:
                raise RuntimeError("sqs unavailable")
            return dict(env.sqs.send_message(**kwargs))

    sweeper = env.sweeper()
    sweeper._sqs = FlakySqs()  # type: ignore[assignment]
    with pytest.raises(sweep_module.SweepIncomplete) as raised:
        sweeper.run()

    assert (raised.value.result.expired, raised.value.result.requeued, raised.value.result.errors) == (1, 1, 1)
    assert env.approval(stale).status == "EXPIRED"
    assert len(env.queued()) == 1
    assert all(env.approval(a).status == "PENDING" for a in lost)


# ------------------------------------------------------------------ APPROVED, RefundFlow never started


def test_the_function_may_start_refund_flow(env: Env) -> None:
    assert env.env["REFUND_FLOW_ARN"] == env.stack.state_machine_arn("RefundFlow")


def test_an_approved_approval_whose_flow_never_started_is_started_after_the_grace(env: Env) -> None:
    lost = env.approved_approval(NOW - timedelta(minutes=3))
    in_flight = env.approved_approval(NOW - timedelta(seconds=30))  # its lead's request may still start it

    result = env.sweeper().run()

    assert result.flows_started == 1
    assert [e["name"] for e in env.executions(lost)] == [lost]
    assert env.executions(in_flight) == []
    approval = env.settled(lost)
    assert approval.status == "REFUNDED"
    order = env.order(lost)
    assert (order.available_cents, order.reserved_cents, order.refunded_cents) == (0, 0, 18_900)
    # The next run finds nothing to start for it (REFUNDED), and the name would refuse a second run anyway.
    assert env.sweeper(now=NOW + timedelta(minutes=15)).run().flows_started == 1  # only in_flight, now past grace
    assert [e["name"] for e in env.executions(lost)] == [lost]
    assert env.settled(in_flight).status == "REFUNDED"


def test_a_retry_whose_flow_never_started_is_started_under_its_retry_name(env: Env) -> None:
    approval_id = env.approved_approval(NOW - timedelta(hours=1))
    env.break_reservation(approval_id)
    assert start_flow(env.sfn, get_settings().refund_flow_arn, approval_id)
    assert env.settled(approval_id).status == "FAILED"
    env.set_reserved(approval_id, 18_900)
    env.store.mark_retry(approval_id, "lead-1", iso(NOW - timedelta(minutes=5)))  # then the lead's request died

    assert env.sweeper().run().flows_started == 1

    assert env.settled(approval_id).status == "REFUNDED"
    assert sorted(e["name"] for e in env.executions(approval_id)) == [approval_id, f"{approval_id}-r1"]
    assert env.order(approval_id).refunded_cents == 18_900


def test_the_sweep_never_starts_a_second_execution_of_a_running_flow(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    from support_agent.refunds.step import RefundStep

    approval_id = env.approved_approval(NOW - timedelta(minutes=10))
    env.break_reservation(approval_id)
    held, step = threading.Event(), RefundStep.run

    def run_when_released(self: RefundStep, *args: Any, **kwargs: Any) -> dict[str, Any]:
        held.wait(20)  # the refund step is busy (a slow provider) while the sweep runs
        return step(self, *args, **kwargs)

    monkeypatch.setattr(RefundStep, "run", run_when_released)
    assert start_flow(env.sfn, get_settings().refund_flow_arn, approval_id)
    assert [e["status"] for e in env.executions(approval_id)] == ["RUNNING"]

    result = env.sweeper().run()

    assert (result.flows_started, result.errors) == (0, 0)
    assert [e["status"] for e in env.executions(approval_id)] == ["RUNNING"]
    held.set()
    assert env.settled(approval_id).status == "FAILED"
    assert len(env.executions(approval_id)) == 1


def test_an_approved_approval_no_start_can_settle_is_left_to_the_alarm(env: Env) -> None:
    """Its execution ended without settling it (here: started before the approval): the name is
    taken, so the sweep cannot start another; the oldest APPROVED age reports it."""
    approval_id = env.pending_approval(NOW - timedelta(hours=2), notified=True)
    assert start_flow(env.sfn, get_settings().refund_flow_arn, approval_id)
    assert env.settled(approval_id).status == "PENDING"  # the flow failed: ApprovalNotApproved
    env.store.approve(approval_id, "lead-1", iso(NOW - timedelta(minutes=40)))
    obs.metrics.clear_metrics()

    result = env.sweeper().run()

    assert (result.flows_started, result.errors) == (0, 0)
    assert env.approval(approval_id).status == "APPROVED"
    assert [e["status"] for e in env.executions(approval_id)] == ["FAILED"]
    emitted = {name: list(m["Value"]) for name, m in obs.metrics.metric_set.items()}
    assert emitted[obs.OLDEST_APPROVED_APPROVAL_AGE] == [40 * 60]
    obs.metrics.clear_metrics()


def test_no_approved_approval_reports_age_zero(env: Env) -> None:
    env.pending_approval(NOW - timedelta(hours=1), notified=True)
    obs.metrics.clear_metrics()
    env.sweeper().run()
    assert obs.metrics.metric_set[obs.OLDEST_APPROVED_APPROVAL_AGE]["Value"] == [0]
    obs.metrics.clear_metrics()
