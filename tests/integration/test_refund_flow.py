"""RefundFlow executed for real in moto, from statemachine/refund_flow.asl.json as the stack deploys it.

template.yaml is deployed under ``mock_aws`` with ``execute_state_machine`` on; the flow's task invokes
PaymentsFunction through moto's Lambda, which devstack.lambda_bridge dispatches to the function's
handler in this process (tests/integration/conftest.py). The handler refunds through the configured
provider: ``none`` (ledger only), or ``stripe`` against the simulated Stripe running in this process,
which counts every refund it makes. Each test seeds its own order (with its own payment intent) and
approval (PENDING → APPROVED, the amount reserved), starts executions named and fed by
support_agent.approvals.flow, and checks after every step: ``available + reserved + refunded = total``,
none negative, and never more than one provider refund per approval.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import boto3
import pytest

from devstack.seed import put_order
from devstack.simulated_stripe import TEST_KEY, Fault, SimulatedStripe, SimulatedStripeServer
from devstack.simulated_stripe import start as start_stripe
from devstack.stack import REPO_ROOT, Stack, load_template, translate
from support_agent import wiring
from support_agent.approvals.flow import execution_name, flow_input
from support_agent.ids import new_approval_id
from support_agent.store.dynamo import from_item, to_item, to_values
from tests.integration.conftest import deployed_stack

ASL_PATH = REPO_ROOT / "statemachine" / "refund_flow.asl.json"
CUSTOMER = 901  # not in the demo data
TOTAL = 20_000
AMOUNT = 12_000
POST = "POST /v1/refunds"
_orders = itertools.count(5001)


@pytest.fixture(scope="module")
def stripe_server() -> Iterator[SimulatedStripeServer]:
    with start_stripe() as running:
        yield running


@dataclass
class Flow:
    stack: Stack
    provider: str
    stripe: SimulatedStripe


@pytest.fixture(scope="module", params=["none", "stripe"])
def flow(request: pytest.FixtureRequest, stripe_server: SimulatedStripeServer) -> Iterator[Flow]:
    """The stack with PaymentProvider ``none`` or ``stripe`` (the simulated one: its URL is StripeApiBase)."""
    with deployed_stack({"PaymentProvider": request.param, "StripeApiBase": stripe_server.url}) as stack:
        # The key comes from the environment here (no secret ARN); short reads so a held answer times out soon.
        os.environ.update(STRIPE_API_KEY=TEST_KEY, STRIPE_READ_TIMEOUT="0.5", STRIPE_CONNECT_TIMEOUT="1")
        wiring.reset()
        yield Flow(stack, request.param, stripe_server.stripe)
    wiring.reset()


@pytest.fixture(autouse=True)
def _no_stale_faults(stripe_server: SimulatedStripeServer) -> Iterator[None]:
    yield
    stripe_server.stripe.faults.clear()


@pytest.fixture
def retry_waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Step Functions' Retry waits, recorded instead of slept (moto sleeps them for real)."""
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

    waits: list[float] = []
    monkeypatch.setattr(retrier_decl, "time", SimpleNamespace(sleep=waits.append))
    return waits


@dataclass
class Case:
    """One order with its own payment intent, and one approval reserving AMOUNT of it, in the deployed tables."""

    flow: Flow
    approval_id: str
    order_id: int

    @property
    def stack(self) -> Stack:
        return self.flow.stack

    @property
    def ddb(self) -> Any:
        return boto3.client("dynamodb")

    @property
    def intent(self) -> str:
        return f"pi_flow_{self.order_id}"

    def table(self, logical_id: str) -> str:
        return self.stack.physical_ids[logical_id]

    def order(self) -> dict[str, Any]:
        key = to_item({"customer_id": CUSTOMER, "sk": f"ORDER#{self.order_id}"})
        return from_item(self.ddb.get_item(TableName=self.table("CustomerDataTable"), Key=key)["Item"])

    def money(self) -> tuple[int, int, int]:
        """(available, reserved, refunded), after checking the invariant."""
        o = self.order()
        parts = (o["available_cents"], o["reserved_cents"], o["refunded_cents"])
        assert sum(parts) == o["total_cents"] and min(parts) >= 0, o
        return parts

    def approval(self) -> dict[str, Any]:
        key = to_item({"approval_id": self.approval_id})
        return from_item(self.ddb.get_item(TableName=self.table("ApprovalsTable"), Key=key)["Item"])

    def transition(self, from_status: str, to_status: str) -> None:
        """What the lead API does (PENDING → APPROVED, FAILED → APPROVED), conditionally."""
        self.ddb.update_item(
            TableName=self.table("ApprovalsTable"),
            Key=to_item({"approval_id": self.approval_id}),
            UpdateExpression="SET #st = :to, decided_by = :lead",
            ConditionExpression="#st = :from",
            ExpressionAttributeNames={"#st": "status"},
            ExpressionAttributeValues=to_values({":to": to_status, ":from": from_status, ":lead": "lead-1"}),
        )

    def refund_rows(self) -> list[dict[str, Any]]:
        out = self.ddb.query(
            TableName=self.table("CustomerDataTable"),
            KeyConditionExpression="customer_id = :c AND begins_with(sk, :p)",
            ExpressionAttributeValues=to_values({":c": CUSTOMER, ":p": f"REFUND#{self.approval_id}"}),
        )
        return [from_item(i) for i in out["Items"]]

    def audit(self) -> list[dict[str, Any]]:
        """RefundFlow's rows: the refund key's stream, and a refund that failed unstarted (the approval's)."""
        rows = []
        for stream in (f"refund#{self.approval_id}", f"approval#{self.approval_id}"):
            out = self.ddb.query(
                TableName=self.table("AuditTable"),
                KeyConditionExpression="#s = :s",
                ExpressionAttributeNames={"#s": "stream"},
                ExpressionAttributeValues=to_values({":s": stream}),
            )
            items = [from_item(i) for i in out["Items"]]
            rows += items if stream.startswith("refund#") else [r for r in items if r["action"] == "refund_failed"]
        return sorted(rows, key=lambda r: r["event_id"])  # ULIDs: time order

    def provider_refunds(self) -> list[dict[str, Any]]:
        """The refunds the simulated Stripe made on this case's payment intent (none with provider ``none``)."""
        return self.flow.stripe.refunds(self.intent)

    def posts(self) -> list[Any]:
        return [
            r for r in self.flow.stripe.requests if r.method == "POST" and r.params.get("payment_intent") == self.intent
        ]

    def run(self, retry: int = 0, name: str | None = None, timeout: float = 60.0) -> dict[str, Any]:
        """Start the execution ``<id>`` (``<id>-r<retry>``, or ``name``) and wait for it to end."""
        sfn = boto3.client("stepfunctions")
        started = sfn.start_execution(
            stateMachineArn=self.stack.state_machine_arn("RefundFlow"),
            name=name or execution_name(self.approval_id, retry),
            input=json.dumps(flow_input(self.approval_id)),
        )
        deadline = time.monotonic() + timeout
        while True:
            description: dict[str, Any] = sfn.describe_execution(executionArn=started["executionArn"])
            if description["status"] != "RUNNING":
                return description
            assert time.monotonic() < deadline, "execution still running"
            time.sleep(0.05)


def _seed(flow: Flow, approve: bool = True, paid: int = TOTAL) -> Case:
    """An order whose payment intent (``paid`` at the simulated Stripe) has AMOUNT reserved by an approval."""
    case = Case(flow, new_approval_id(), next(_orders))
    flow.stripe.add_payment_intent(case.intent, paid)
    ddb = boto3.client("dynamodb")
    put_order(  # an approval's reservation already made
        ddb,
        case.table("CustomerDataTable"),
        CUSTOMER,
        case.order_id,
        TOTAL,
        payment_intent=case.intent,
        available_cents=TOTAL - AMOUNT,
        reserved_cents=AMOUNT,
    )
    ddb.put_item(
        TableName=case.table("ApprovalsTable"),
        Item=to_item(
            {
                "approval_id": case.approval_id,
                "entity": "APPROVAL",
                "status": "PENDING",
                "customer_id": CUSTOMER,
                "order_id": case.order_id,
                "amount_cents": AMOUNT,
                "currency": "USD",
                "reason": "damaged",
                "conversation_id": "conv_01JF3Q0000000000000000000A",
                "tool_use_id": "toolu_1",
                "requested_by": "customer-901",
                "created_at": "2025-01-01T00:00:00Z",
            }
        ),
    )
    if approve:
        case.transition("PENDING", "APPROVED")
    assert case.money() == (TOTAL - AMOUNT, AMOUNT, 0)
    return case


@pytest.fixture
def case(flow: Flow) -> Case:
    return _seed(flow)


def stripe_only(flow: Flow) -> None:
    if flow.provider != "stripe":
        pytest.skip("a provider fault needs a provider")


# ------------------------------------------------------------------ executions


def test_approved_refund_is_made_once_at_the_provider(case: Case) -> None:
    execution = case.run()

    assert execution["status"] == "SUCCEEDED", execution
    output = json.loads(execution["output"])
    approval = case.approval()
    assert output == {
        "approvalId": case.approval_id,
        "status": "REFUNDED",
        "refundId": approval["refund_id"],
        "replayed": False,
    }
    assert approval["status"] == "REFUNDED" and approval["refunded_at"]
    assert (approval["refund_status"], approval["refund_provider"]) == ("SUCCEEDED", case.flow.provider)
    assert case.money() == (TOTAL - AMOUNT, 0, AMOUNT)
    (row,) = case.refund_rows()
    assert {k: row[k] for k in ("kind", "refund_key", "order_id", "amount_cents", "currency", "status", "attempt")} == {
        "kind": "approved",
        "refund_key": case.approval_id,
        "order_id": case.order_id,
        "amount_cents": AMOUNT,
        "currency": "USD",
        "status": "SUCCEEDED",
        "attempt": 1,
    }
    assert (row["payment_intent"], row["refund_id"], row["provider"]) == (
        case.intent,
        approval["refund_id"],
        case.flow.provider,
    )
    started, called = case.audit()
    assert (started["action"], started["actor"], started["outcome"]) == ("refund_started", "refund-flow", "SETTLING")
    assert (called["action"], called["actor"], called["outcome"]) == ("payment_refund", "refund-flow", "SUCCEEDED")
    assert called["request_id"] == case.approval_id  # the execution name
    assert {k: json.loads(called["output"])[k] for k in ("attempt_key", "refund_id", "amount_cents")} == {
        "attempt_key": f"{case.approval_id}#1",
        "refund_id": approval["refund_id"],
        "amount_cents": AMOUNT,
    }
    if case.flow.provider == "none":
        assert case.posts() == [] and case.provider_refunds() == []
        assert approval["refund_id"].startswith("ledger_")
    else:
        (made,) = case.provider_refunds()
        assert (made["id"], made["amount"], made["status"]) == (approval["refund_id"], AMOUNT, "succeeded")
        assert made["metadata"]["refund_key"] == case.approval_id and made["metadata"]["attempt"] == "1"
        (sent,) = case.posts()
        assert sent.headers["idempotency-key"] == f"{case.approval_id}#1"


def test_a_replayed_or_restarted_execution_makes_no_second_refund(case: Case) -> None:
    assert case.run()["status"] == "SUCCEEDED"
    before = (case.money(), case.refund_rows(), case.audit(), case.approval(), case.provider_refunds())
    posts = len(case.posts())

    for execution in (case.run(retry=1), case.run(name=f"{case.approval_id}-x1")):
        assert execution["status"] == "SUCCEEDED", execution
        assert json.loads(execution["output"])["replayed"] is True

    assert (case.money(), case.refund_rows(), case.audit(), case.approval(), case.provider_refunds()) == before
    assert len(case.posts()) == posts  # a REFUNDED approval is not even asked about again


def test_a_timeout_after_the_refund_is_repeated_with_the_same_key(case: Case) -> None:
    stripe_only(case.flow)
    case.flow.stripe.inject(POST, Fault.TIMEOUT_AFTER, hold_seconds=2)  # longer than the 0.5 s read timeout

    execution = case.run()

    assert execution["status"] == "SUCCEEDED", execution
    assert case.approval()["status"] == "REFUNDED"
    assert len(case.provider_refunds()) == 1
    first, again = case.posts()
    assert first.headers["idempotency-key"] == again.headers["idempotency-key"] == f"{case.approval_id}#1"
    assert again.replayed
    assert case.money() == (TOTAL - AMOUNT, 0, AMOUNT)


def test_a_saved_500_after_the_refund_is_looked_up_and_found(case: Case) -> None:
    stripe_only(case.flow)
    case.flow.stripe.inject(POST, Fault.ERROR_AFTER)  # made, then a 500 Stripe saves and replays

    execution = case.run()

    assert execution["status"] == "SUCCEEDED", execution
    (made,) = case.provider_refunds()
    assert case.approval()["refund_id"] == made["id"] and case.approval()["status"] == "REFUNDED"
    assert case.money() == (TOTAL - AMOUNT, 0, AMOUNT)


def test_an_unknown_outcome_stays_settling_never_failed(case: Case, retry_waits: list[float]) -> None:
    stripe_only(case.flow)
    case.flow.stripe.inject(POST, Fault.ERROR_UNSAVED, times=100)  # Stripe's edge answers 500 to every attempt

    execution = case.run()

    assert execution["status"] == "SUCCEEDED", execution
    assert json.loads(execution["output"]) == {
        "approvalId": case.approval_id,
        "status": "SETTLING",
        "refundId": None,
        "replayed": False,
    }
    assert len(retry_waits) == 3 and all(0 <= w <= 8 for w in retry_waits)  # Retry's MaxAttempts, jittered
    assert case.approval()["status"] == "SETTLING"
    (row,) = case.refund_rows()
    assert (row["status"], row["attempt"]) == ("SETTLING", 1)
    assert case.money() == (TOTAL - AMOUNT, AMOUNT, 0)  # still reserved
    assert case.provider_refunds() == []
    posts = case.posts()
    assert len(posts) == 4 * 3  # 4 invocations, each 1 attempt + 2 retries of the Stripe client
    assert {p.headers["idempotency-key"] for p in posts} == {f"{case.approval_id}#1"}
    actions = [r["action"] for r in case.audit()]
    assert actions == ["refund_started"] + ["payment_refund"] * 4

    # Stripe answers again; an execution restarted for the approval finishes the same attempt.
    case.flow.stripe.faults.clear()
    restarted = case.run(name=f"{case.approval_id}-x1")

    assert restarted["status"] == "SUCCEEDED", restarted
    assert json.loads(restarted["output"])["status"] == "REFUNDED"
    (made,) = case.provider_refunds()
    assert made["metadata"]["attempt"] == "1"
    assert case.approval()["status"] == "REFUNDED" and case.approval()["refund_id"] == made["id"]
    assert case.money() == (TOTAL - AMOUNT, 0, AMOUNT)


def test_a_definitive_refusal_fails_visibly_then_a_lead_retry_uses_attempt_2(flow: Flow) -> None:
    stripe_only(flow)
    case = _seed(flow, paid=AMOUNT - 1)  # Stripe holds less than the approved amount: amount_too_large

    execution = case.run()

    assert (execution["status"], execution["error"]) == ("FAILED", "RefundFailed")
    approval = case.approval()
    assert approval["status"] == "FAILED" and approval["failed_at"]
    assert approval["failure_error"] == "amount_too_large"
    assert case.money() == (TOTAL - AMOUNT, AMOUNT, 0)  # the reservation is kept for the lead
    (row,) = case.refund_rows()
    assert (row["status"], row["attempt"], row["failure_code"]) == ("FAILED", 1, "amount_too_large")
    assert case.provider_refunds() == []

    # The payment can be refunded now (e.g. the intent was corrected); the lead retries: execution <id>-r1.
    flow.stripe.add_payment_intent(case.intent, TOTAL)
    case.transition("FAILED", "APPROVED")
    retried = case.run(retry=1)

    assert retried["status"] == "SUCCEEDED", retried
    assert case.approval()["status"] == "REFUNDED"
    assert case.money() == (TOTAL - AMOUNT, 0, AMOUNT)
    (row,) = case.refund_rows()
    assert (row["status"], row["attempt"]) == ("SUCCEEDED", 2)
    (made,) = case.provider_refunds()
    assert made["metadata"]["attempt"] == "2"
    assert [p.headers["idempotency-key"] for p in case.posts()][-1] == f"{case.approval_id}#2"
    assert [(r["action"], r["outcome"], r.get("request_id")) for r in case.audit()] == [
        ("refund_started", "SETTLING", None),
        ("payment_refund", "FAILED", case.approval_id),
        ("refund_started", "SETTLING", None),
        ("payment_refund", "SUCCEEDED", f"{case.approval_id}-r1"),
    ]


def test_an_order_that_lost_its_reservation_fails_before_the_provider_is_asked(case: Case) -> None:
    """A refund made now could never be recorded (SUCCEEDED moves reserved -> refunded): nothing is asked."""
    orders = case.table("CustomerDataTable")
    key = to_item({"customer_id": CUSTOMER, "sk": f"ORDER#{case.order_id}"})
    moved = "SET available_cents = :t, reserved_cents = :z"
    case.ddb.update_item(
        TableName=orders, Key=key, UpdateExpression=moved, ExpressionAttributeValues=to_values({":t": TOTAL, ":z": 0})
    )

    execution = case.run()

    assert (execution["status"], execution["error"]) == ("FAILED", "RefundFailed")
    approval = case.approval()
    assert (approval["status"], approval["failure_error"]) == ("FAILED", "reservation_missing")
    assert case.refund_rows() == [] and case.posts() == [] and case.provider_refunds() == []
    assert case.money() == (TOTAL, 0, 0)
    ((action, outcome),) = [(r["action"], r["outcome"]) for r in case.audit()]
    assert (action, outcome) == ("refund_failed", "FAILED")

    # The order is put right; the lead retries: attempt 1, since no attempt was ever made.
    restore = "SET available_cents = :a, reserved_cents = :r"
    values = to_values({":a": TOTAL - AMOUNT, ":r": AMOUNT})
    case.ddb.update_item(TableName=orders, Key=key, UpdateExpression=restore, ExpressionAttributeValues=values)
    case.transition("FAILED", "APPROVED")
    assert case.run(retry=1)["status"] == "SUCCEEDED"
    assert case.approval()["status"] == "REFUNDED"
    (row,) = case.refund_rows()
    assert (row["status"], row["attempt"]) == ("SUCCEEDED", 1)
    assert case.money() == (TOTAL - AMOUNT, 0, AMOUNT)
    assert len(case.provider_refunds()) == (1 if case.flow.provider == "stripe" else 0)


def test_an_approval_not_approved_or_unknown_changes_nothing(flow: Flow) -> None:
    pending = _seed(flow, approve=False)
    execution = pending.run()
    assert (execution["status"], execution["error"]) == ("FAILED", "ApprovalNotApproved")
    assert "PENDING" in execution["cause"]
    assert pending.approval()["status"] == "PENDING"
    assert pending.money() == (TOTAL - AMOUNT, AMOUNT, 0)
    assert pending.refund_rows() == [] and pending.audit() == [] and pending.posts() == []

    unknown = Case(flow, new_approval_id(), pending.order_id)
    execution = unknown.run()
    assert (execution["status"], execution["error"]) == ("FAILED", "ApprovalNotFound")


# ------------------------------------------------------------------ the deployed machine is the repo's


def test_the_stack_and_the_tests_use_the_same_state_machine(flow: Flow) -> None:
    stack = flow.stack
    sfn, iam, lam = boto3.client("stepfunctions"), boto3.client("iam"), boto3.client("lambda")
    arn = stack.state_machine_arn("RefundFlow")
    assert arn == stack.physical_ids["RefundFlow"] == stack.outputs["RefundFlowArn"]
    deployed = sfn.describe_state_machine(stateMachineArn=arn)
    assert deployed["name"] == stack.outputs["RefundFlowName"]
    assert [m["name"] for m in sfn.list_state_machines()["stateMachines"]].count(deployed["name"]) == 1
    assert deployed["type"] == "STANDARD"
    role_id = stack.template["Resources"]["RefundFlow"]["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    assert deployed["roleArn"] == iam.get_role(RoleName=stack.physical_ids[role_id])["Role"]["Arn"]
    # The repo's ASL with the deployed PaymentsFunction's ARN substituted, nothing else.
    function_arn = lam.get_function(FunctionName=stack.physical_ids["PaymentsFunction"])["Configuration"]["FunctionArn"]
    assert deployed["definition"] == ASL_PATH.read_text().replace("${PaymentsFunctionArn}", function_arn)
    assert "${" not in deployed["definition"]
    # Whatever starts the flow is configured with this machine.
    starters = {
        logical_id: stack.function_env(logical_id)["REFUND_FLOW_ARN"]
        for logical_id, resource in stack.template["Resources"].items()
        if resource["Type"] == "AWS::Lambda::Function"
        and "REFUND_FLOW_ARN" in resource["Properties"].get("Environment", {}).get("Variables", {})
    }
    assert starters, "no function starts RefundFlow"
    assert set(starters.values()) == {arn}
    # The refund step refunds with the same provider settings as the chat's direct refunds.
    payments, chat = stack.function_env("PaymentsFunction"), stack.function_env("ChatFunction")
    for name in ("PAYMENT_PROVIDER", "STRIPE_API_BASE", "STRIPE_API_KEY_SECRET_ARN", "CUSTOMER_DATA_TABLE"):
        assert payments[name] == chat[name], name
    assert payments["PAYMENT_PROVIDER"] == flow.provider


# ------------------------------------------------------------------ the definition, statically


def _asl() -> dict[str, Any]:
    return dict(json.loads(ASL_PATH.read_text()))


def test_the_template_wires_the_asl_file() -> None:
    resource = load_template()["Resources"]["RefundFlow"]
    assert resource["Type"] == "AWS::Serverless::StateMachine"
    props = resource["Properties"]
    assert props["Type"] == "STANDARD"
    assert (REPO_ROOT / props["DefinitionUri"]) == ASL_PATH
    assert set(re.findall(r"\$\{(\w+)\}", ASL_PATH.read_text())) == {"PaymentsFunctionArn"}
    assert props["DefinitionSubstitutions"] == {"PaymentsFunctionArn": {"Fn::GetAtt": ["PaymentsFunction", "Arn"]}}


def test_the_only_task_invokes_payments_function_and_the_role_grants_only_that() -> None:
    tasks = {name: s for name, s in _asl()["States"].items() if s["Type"] == "Task"}
    assert set(tasks) == {"Refund"}
    task = tasks["Refund"]
    assert task["Resource"] == "arn:aws:states:::lambda:invoke"
    assert task["Parameters"] == {
        "FunctionName": "${PaymentsFunctionArn}",
        "Payload": {"approvalId.$": "$.approvalId", "execution.$": "$$.Execution.Name"},
    }
    assert task["OutputPath"] == "$.Payload"
    template = translate(load_template())
    role_id = template["Resources"]["RefundFlow"]["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    statements = [
        s for p in template["Resources"][role_id]["Properties"]["Policies"] for s in p["PolicyDocument"]["Statement"]
    ]
    assert [(s["Effect"], s["Action"], s["Resource"]) for s in statements] == [
        ("Allow", "lambda:InvokeFunction", {"Fn::GetAtt": ["PaymentsFunction", "Arn"]})
    ]


def test_an_unknown_outcome_is_retried_then_left_settling_never_failed() -> None:
    states = _asl()["States"]
    task = states["Refund"]
    (unknown,) = [r for r in task["Retry"] if r["ErrorEquals"] == ["PaymentOutcomeUnknown"]]
    assert unknown["MaxAttempts"] >= 2 and unknown["JitterStrategy"] == "FULL" and unknown["BackoffRate"] > 1
    # Every wait together stays well inside a lead's patience and far below a day (Stripe keeps keys 24 h).
    waits = [
        min(unknown["IntervalSeconds"] * unknown["BackoffRate"] ** n, unknown["MaxDelaySeconds"])
        for n in range(unknown["MaxAttempts"])
    ]
    assert sum(waits) <= 30
    service = {e for r in task["Retry"] for e in r["ErrorEquals"]} - {"PaymentOutcomeUnknown"}
    assert service == {
        "Lambda.ServiceException",
        "Lambda.AWSLambdaException",
        "Lambda.SdkClientException",
        "Lambda.TooManyRequestsException",
    }
    catches = {e: c["Next"] for c in task["Catch"] for e in c["ErrorEquals"]}
    assert "States.ALL" not in catches  # nothing else is turned into a quiet success or a FAILED approval
    assert states[catches["PaymentOutcomeUnknown"]]["Parameters"]["status"] == "SETTLING"
    assert states[states[catches["PaymentOutcomeUnknown"]]["Next"]]["Type"] == "Succeed"
    assert states[catches["ApprovalNotFound"]] == {
        "Type": "Fail",
        "Error": "ApprovalNotFound",
        "CausePath": "$.error.Cause",
    }
    assert states[catches["ApprovalNotApproved"]]["Error"] == "ApprovalNotApproved"
    outcome = {c["StringEquals"]: c["Next"] for c in states[task["Next"]]["Choices"]}
    assert states[outcome["FAILED"]] == {**states[outcome["FAILED"]], "Type": "Fail", "Error": "RefundFailed"}
    assert states[outcome["REFUNDED"]]["Type"] == states[outcome["SETTLING"]]["Type"] == "Succeed"
    # No state writes DynamoDB itself any more: PaymentsFunction owns the ledger and the audit rows.
    assert "dynamodb" not in ASL_PATH.read_text()
