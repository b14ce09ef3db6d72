"""Property 3, the refund flow: kill the lead's approve between its steps, crash the refund step, replay
executions, race them.

On the template deployed into moto with RefundFlow executing from the repo's ASL; its task runs
PaymentsFunction's handler in-process (devstack.lambda_bridge). An approval is raised by the chat
function's own tool (the amount reserved), then:

* the approve request dies before `StartExecution` (APPROVED, no flow running) or right after it (the flow
  runs, the lead never hears): approving again finishes the refund, once;
* the refund step dies after the provider answered, before the outcome is recorded (the approval stays
  SETTLING): a restarted execution asks again with the same attempt key and records it, once;
* RefundFlow is replayed under other execution names, one after another and eight at once: one refund;
* after each scenario: one refund row (attempt 1), the money invariant, the approval REFUNDED, one audit
  row for the decision, one for the refund's start and one for the provider call that settled it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from devstack.seed import put_order
from devstack.stack import Stack
from support_agent.approvals.flow import execution_name, flow_input
from support_agent.auth import Principal
from support_agent.config import load_settings
from support_agent.store.approvals import Approval
from support_agent.tools.registry import ToolContext
from support_agent.wiring import LeadServices, build_lead_services, build_registry
from tests.reliability.checks import World, check_money
from tests.reliability.figures import count
from tests.support.threads import run_together

CUSTOMER = 7
_orders = itertools.count(61_000)


class Killed(BaseException):
    """The approve request's process died at this point."""


class StepCrashed(Exception):
    """PaymentsFunction's invocation died here (Step Functions sees a task failure of this type)."""


@pytest.fixture(scope="module")
def env(stack: Stack) -> dict[str, str]:
    return {
        **stack.function_env("ChatFunction"),
        **stack.function_env("ApprovalsFunction"),
        "APPROVAL_WAIT_SECONDS": "10",
    }


def raise_approval(env: dict[str, str]) -> tuple[str, int, World]:
    """A fresh order and an approval over the threshold, raised by request_refund as the chat function does."""
    cfg = load_settings(env)
    ddb = boto3.client("dynamodb")
    order_id, total = next(_orders), 12_000
    put_order(ddb, cfg.customer_data_table, CUSTOMER, order_id, total)
    ctx = ToolContext(Principal("customer-7", "customer", 7), 7, f"conv_flow{order_id}", 1, "toolu_1", "req", "now")
    out = build_registry(cfg, ddb, boto3.client("sqs")).execute(
        "request_refund", {"order_id": order_id, "amount_cents": 9000, "reason": "crash test"}, ctx
    )
    assert out.result["status"] == "PENDING_APPROVAL", out.result
    return out.result["approval_id"], order_id, World.of_settings(ddb, cfg)


def lead(env: dict[str, str], sfn: Any = None) -> LeadServices:
    return build_lead_services(load_settings(env), boto3.client("dynamodb"), sfn or boto3.client("stepfunctions"))


@contextlib.contextmanager
def killed_at_start_execution(sfn: Any, when: str) -> Iterator[None]:
    def die(**_: Any) -> None:
        raise Killed(f"{when} StartExecution")

    event = f"{'before' if when == 'before' else 'after'}-call.sfn.StartExecution"
    sfn.meta.events.register(event, die, unique_id="rel-kill")
    try:
        yield
    finally:
        sfn.meta.events.unregister(event, unique_id="rel-kill")


def settle(env: dict[str, str], approval_id: str, seconds: float = 15.0) -> Approval:
    """Wait until no execution for this approval is still running; the approval as it ends."""
    sfn = boto3.client("stepfunctions")
    arn = env["REFUND_FLOW_ARN"]
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        running = [
            e
            for e in sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]
            if e["name"].startswith(approval_id)
        ]
        if not running:
            break
        time.sleep(0.05)
    approval = lead(env).approvals.get(approval_id)
    assert approval is not None
    return approval


def verify(env: dict[str, str], world: World, approval_id: str, order_id: int) -> None:
    approval = settle(env, approval_id)
    assert approval.status == "REFUNDED", approval
    check_money(world, CUSTOMER, [order_id])
    rows = [r for r in world.customer_rows(CUSTOMER, "REFUND#apr_") if r["approval_id"] == approval_id]
    assert len(rows) == 1, f"{len(rows)} refund rows for one approval"
    assert (rows[0]["status"], rows[0]["attempt"]) == ("SUCCEEDED", 1), rows[0]
    order = world.order(CUSTOMER, order_id)
    assert order["refunded_cents"] == 9000 and order["reserved_cents"] == 0
    # The approval's stream (its decisions) and its refund key's (the ledger's rows).
    rows = world.audit_rows(f"approval#{approval_id}") + world.audit_rows(f"refund#{approval_id}")
    actions = [r["action"] for r in rows]
    assert actions.count("approval_approved") == 1, actions
    assert actions.count("refund_started") == 1, actions
    settled = [r for r in world.audit_rows(f"refund#{approval_id}") if r["action"] == "payment_refund"]
    assert [r["outcome"] for r in settled][-1:] == ["SUCCEEDED"], settled


@pytest.mark.parametrize("when", ["before", "after"])
def test_approve_killed_around_start_execution_then_approved_again(env: dict[str, str], when: str) -> None:
    approval_id, order_id, world = raise_approval(env)
    sfn = boto3.client("stepfunctions")
    with killed_at_start_execution(sfn, when), pytest.raises(Killed):
        lead(env, sfn).decisions.approve(approval_id, "lead-1")
    state = settle(env, approval_id)
    assert state.status == ("APPROVED" if when == "before" else "REFUNDED")
    decision = lead(env).decisions.approve(approval_id, "lead-1")  # the lead clicks again
    assert decision.approval.status == "REFUNDED"
    verify(env, world, approval_id, order_id)
    count("3-refund-flow", approve_killed=1)


def test_refund_step_killed_before_its_record_then_restarted(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from support_agent.refunds.ledger import RefundLedger

    approval_id, order_id, world = raise_approval(env)
    record, crashes = RefundLedger.record, []

    def crash_once(self: RefundLedger, *args: Any, **kwargs: Any) -> Any:
        if not crashes:
            crashes.append(args[0].attempt_key)
            raise StepCrashed("after the provider call, before the record")
        return record(self, *args, **kwargs)

    monkeypatch.setattr(RefundLedger, "record", crash_once)
    lead(env).decisions.approve(approval_id, "lead-1")
    assert settle(env, approval_id).status == "SETTLING"  # the execution failed; nothing recorded
    sfn = boto3.client("stepfunctions")
    (first,) = [
        e for e in sfn.list_executions(stateMachineArn=env["REFUND_FLOW_ARN"])["executions"] if e["name"] == approval_id
    ]
    assert sfn.describe_execution(executionArn=first["executionArn"])["error"] == "StepCrashed"
    sfn.start_execution(
        stateMachineArn=env["REFUND_FLOW_ARN"],
        name=f"{approval_id}-restart",
        input=json.dumps(flow_input(approval_id)),
    )
    verify(env, world, approval_id, order_id)
    assert crashes == [f"{approval_id}#1"]
    count("3-refund-flow", refund_step_crashed=1)


def test_replayed_and_concurrent_executions_refund_once(env: dict[str, str]) -> None:
    approval_id, order_id, world = raise_approval(env)
    assert lead(env).decisions.approve(approval_id, "lead-1").approval.status == "REFUNDED"
    sfn = boto3.client("stepfunctions")
    arn = env["REFUND_FLOW_ARN"]
    names = itertools.count(1)

    def start() -> None:
        name = f"{execution_name(approval_id)}-x{next(names)}"
        boto3.client("stepfunctions").start_execution(
            stateMachineArn=arn, name=name, input=json.dumps(flow_input(approval_id))
        )

    for _ in range(3):  # one after another
        start()
        settle(env, approval_id)
    run_together([start] * 8)  # and all at once
    verify(env, world, approval_id, order_id)
    executions = [
        e for e in sfn.list_executions(stateMachineArn=arn)["executions"] if e["name"].startswith(approval_id)
    ]
    assert len(executions) == 12
    count("3-refund-flow", replayed_executions=11)
