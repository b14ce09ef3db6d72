"""ApprovalSweepFunction on the template deployed into moto: stale approvals expire, un-notified ones are re-sent.

Approvals are written by the refund tool's own writer (PENDING + the amount reserved on the
order, one transaction) with ``created_at`` placed in the past; the sweeper runs on a fixed clock.
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
from support_agent.approvals import sweep as sweep_module
from support_agent.approvals.notifier import iso
from support_agent.config import get_settings
from support_agent.store.approvals import ApprovalStore
from support_agent.store.audit import AuditStore
from support_agent.store.customer_data import CustomerDataStore
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
            **kw,
        )

    def pending_approval(self, created_at: datetime, amount_cents: int = 18_900, notified: bool = False) -> str:
        approval_id = put_pending_approval(
            self.ddb, self.env, CUSTOMER, next(_order_ids), amount_cents, iso(created_at), "never arrived"
        )
        if notified:
            assert self.store.claim_notification(approval_id, iso(created_at + timedelta(seconds=1)))
        return approval_id

    def approval(self, approval_id: str) -> dict[str, Any]:
        item = self.store.get(approval_id)
        assert item is not None
        return item

    def order(self, approval_id: str) -> dict[str, Any]:
        order = CustomerDataStore(self.ddb, self.env["CUSTOMER_DATA_TABLE"]).get_order(
            CUSTOMER, int(self.approval(approval_id)["order_id"])
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
    assert expired["status"] == "EXPIRED"
    assert (expired["decided_by"], expired["decided_at"]) == ("system:sweep", iso(NOW))
    order = env.order(stale)
    assert (order["available_cents"], order["reserved_cents"], order["refunded_cents"]) == (18_900, 0, 0)
    audit = AuditStore(env.ddb, env.env["AUDIT_TABLE"]).list_stream(f"approval#{stale}")
    assert [(a["action"], a["actor"], a["outcome"]) for a in audit] == [("approval_expired", "system:sweep", "EXPIRED")]
    assert audit[0]["customer_id"] == CUSTOMER
    # The fresh one is untouched: still pending, its amount still reserved.
    assert env.approval(fresh)["status"] == "PENDING"
    assert (env.order(fresh)["available_cents"], env.order(fresh)["reserved_cents"]) == (0, 18_900)
    assert env.queued() == []

    # Sweeping again changes nothing (no double release).
    again = env.sweeper().run()
    assert (again.expired, again.scanned) == (0, 1)
    assert env.order(stale)["available_cents"] == 18_900


def test_an_unnotified_old_pending_is_enqueued_again(env: Env) -> None:
    lost = env.pending_approval(NOW - timedelta(minutes=10))  # its send after the transaction failed
    in_flight = env.pending_approval(NOW - timedelta(minutes=1))  # the chat function's send may be on its way
    notified = env.pending_approval(NOW - timedelta(minutes=10), notified=True)

    result = env.sweeper().run()

    assert (result.expired, result.requeued) == (0, 1)
    assert env.queued() == [{"approvalId": lost}]
    for approval_id in (lost, in_flight, notified):
        assert env.approval(approval_id)["status"] == "PENDING"


def test_a_lead_deciding_during_the_sweep_wins_without_a_double_release(env: Env) -> None:
    stale = env.pending_approval(NOW - timedelta(days=30))
    outer = env

    class LeadRejectsFirst(ApprovalStore):
        def release(self, approval_id: str, from_status: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
            if from_status == "PENDING" and args[0] == "EXPIRED":
                outer.store.release(approval_id, "PENDING", "REJECTED", "lead-1", "approval_rejected", iso(NOW))
            return super().release(approval_id, from_status, *args, **kwargs)

    racing = LeadRejectsFirst(
        env.ddb, env.env["APPROVALS_TABLE"], env.env["CUSTOMER_DATA_TABLE"], env.env["AUDIT_TABLE"]
    )
    result = env.sweeper(store=racing).run()

    assert (result.expired, result.conflicts, result.errors) == (0, 1, 0)
    assert env.approval(stale)["status"] == "REJECTED"
    order = env.order(stale)
    assert (order["available_cents"], order["reserved_cents"], order["refunded_cents"]) == (18_900, 0, 0)


def test_each_run_is_bounded_and_the_next_one_continues(env: Env) -> None:
    stale = [env.pending_approval(NOW - timedelta(days=10, minutes=i)) for i in range(3)]

    first = env.sweeper(max_items=2).run()
    assert (first.expired, first.truncated) == (2, True)
    second = env.sweeper(max_items=2).run()
    assert (second.expired, second.truncated) == (1, False)
    assert {env.approval(a)["status"] for a in stale} == {"EXPIRED"}


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

    assert out == {"scanned": 2, "expired": 1, "requeued": 1, "conflicts": 0, "errors": 0, "truncated": False}
    assert env.approval(stale)["status"] == "EXPIRED"
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
    assert env.approval(stale)["status"] == "EXPIRED"
    assert len(env.queued()) == 1
    assert all(env.approval(a)["status"] == "PENDING" for a in lost)
