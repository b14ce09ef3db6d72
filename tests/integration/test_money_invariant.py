"""Property: whatever sequence of requests and decisions happens, per order
``available + reserved + refunded = total``, none negative, one refund row per approval, and a
refund above the threshold never completes without a lead's approval.

Runs on the deployed template with RefundFlow executing in moto.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from datetime import UTC, datetime

import boto3
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from devstack.stack import Stack
from support_agent.approvals.flow import execution_name, flow_input
from support_agent.auth import Principal
from support_agent.config import load_settings
from support_agent.errors import ServiceError
from support_agent.store.approvals import StateConflict
from support_agent.store.dynamo import to_item
from support_agent.tools.registry import ToolContext
from support_agent.wiring import build_lead_services, build_registry


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


ORDER_IDS = itertools.count(50_000)
TOTAL = 12_000
THRESHOLD = 5_000


def make_machine(stack: Stack) -> type[RuleBasedStateMachine]:
    env = {**stack.function_env("ChatFunction"), **stack.function_env("ApprovalsFunction")}
    cfg = load_settings({**env, "APPROVAL_WAIT_SECONDS": "8"})
    ddb, sqs = boto3.client("dynamodb"), boto3.client("sqs")
    registry = build_registry(cfg, ddb, sqs)
    lead = build_lead_services(cfg, ddb)
    table = cfg.customer_data_table
    sfn = boto3.client("stepfunctions")

    class Money(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.order_id = next(ORDER_IDS)
            ddb.put_item(
                TableName=table,
                Item=to_item(
                    {
                        "customer_id": 7,
                        "sk": f"ORDER#{self.order_id}",
                        "order_id": self.order_id,
                        "status": "DELIVERED",
                        "total_cents": TOTAL,
                        "currency": "USD",
                        "available_cents": TOTAL,
                        "reserved_cents": 0,
                        "refunded_cents": 0,
                        "items": [],
                    }
                ),
            )
            self.approvals: list[str] = []
            self.approved_by_lead: set[str] = set()
            self.calls = itertools.count(1)

        def order(self) -> dict[str, int]:
            item = ddb.get_item(
                TableName=table, Key=to_item({"customer_id": 7, "sk": f"ORDER#{self.order_id}"}), ConsistentRead=True
            )["Item"]
            return {
                k: int(item[k]["N"]) for k in ("total_cents", "available_cents", "reserved_cents", "refunded_cents")
            }

        @rule(amount=st.integers(min_value=-100, max_value=TOTAL + 2000))
        def request(self, amount: int) -> None:
            n = next(self.calls)
            ctx = ToolContext(
                Principal("customer-7", "customer", 7),
                7,
                f"conv_prop{self.order_id}",
                n,
                f"toolu_{n}",
                "req",
                _now(),  # the real clock: approve refuses approvals older than their TTL
            )
            out = registry.execute(
                "request_refund", {"order_id": self.order_id, "amount_cents": amount, "reason": "property"}, ctx
            )
            if not out.is_error and out.result["status"] == "PENDING_APPROVAL":
                self.approvals.append(out.result["approval_id"])

        def _pick(self, data: st.DataObject) -> str | None:
            return data.draw(st.sampled_from(self.approvals)) if self.approvals else None

        @rule(data=st.data())
        def approve(self, data: st.DataObject) -> None:
            if (aid := self._pick(data)) is None:
                return
            try:
                decision = lead.decisions.approve(aid, "lead-1")
            except ServiceError:
                return
            self.approved_by_lead.add(aid)
            assert decision.approval["status"] in ("APPROVED", "REFUNDED", "FAILED")

        @rule(data=st.data())
        def reject(self, data: st.DataObject) -> None:
            if (aid := self._pick(data)) is not None:
                with contextlib.suppress(ServiceError):
                    lead.decisions.reject(aid, "lead-1", "no")

        @rule(data=st.data())
        def expire(self, data: st.DataObject) -> None:
            if (aid := self._pick(data)) is not None:
                with contextlib.suppress(StateConflict):
                    lead.approvals.release(aid, "PENDING", "EXPIRED", "system:sweep", "approval_expired", _now())

        @rule(data=st.data())
        def replay(self, data: st.DataObject) -> None:
            """Start RefundFlow again for any approval, as a redelivery or a confused operator would."""
            if (aid := self._pick(data)) is None:
                return
            arn = sfn.start_execution(
                stateMachineArn=cfg.refund_flow_arn,
                name=f"{execution_name(aid)}-x{next(self.calls)}",
                input=json.dumps(flow_input(aid)),
            )["executionArn"]
            until = time.monotonic() + 15
            while sfn.describe_execution(executionArn=arn)["status"] == "RUNNING" and time.monotonic() < until:
                time.sleep(0.05)

        @rule(data=st.data())
        def retry_or_release(self, data: st.DataObject) -> None:
            if (aid := self._pick(data)) is None:
                return
            action = data.draw(st.sampled_from(["retry", "release"]))
            with contextlib.suppress(ServiceError):
                getattr(lead.decisions, action)(aid, "lead-1")

        @invariant()
        def money_adds_up(self) -> None:
            o = self.order()
            assert o["available_cents"] + o["reserved_cents"] + o["refunded_cents"] == o["total_cents"], o
            assert min(o.values()) >= 0, o
            approved_refunds = 0
            for aid in self.approvals:
                rows = ddb.query(
                    TableName=table,
                    KeyConditionExpression="customer_id = :c AND sk = :s",
                    ExpressionAttributeValues={":c": {"N": "7"}, ":s": {"S": f"REFUND#{aid}"}},
                )
                assert rows["Count"] <= 1
                if rows["Count"]:
                    assert aid in self.approved_by_lead, "refund above the threshold completed without a lead"
                    approved_refunds += int(rows["Items"][0]["amount_cents"]["N"])
            direct = ddb.query(
                TableName=table,
                KeyConditionExpression="customer_id = :c AND begins_with(sk, :p)",
                ExpressionAttributeValues={":c": {"N": "7"}, ":p": {"S": f"REFUND#conv_prop{self.order_id}#"}},
            )
            direct_sum = sum(int(i["amount_cents"]["N"]) for i in direct["Items"] if i["kind"]["S"] == "direct")
            assert direct_sum <= THRESHOLD
            assert o["refunded_cents"] == approved_refunds + direct_sum

    return Money


def test_money_invariant_over_any_sequence(stack: Stack) -> None:
    machine = make_machine(stack)
    machine.TestCase.settings = settings(
        max_examples=12, stateful_step_count=8, deadline=None, suppress_health_check=list(HealthCheck)
    )
    machine.TestCase().runTest()
