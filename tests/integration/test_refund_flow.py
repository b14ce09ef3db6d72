"""RefundFlow executed for real in moto, from statemachine/refund_flow.asl.json as the stack deploys it.

template.yaml is deployed by devstack.stack under ``mock_aws`` with ``execute_state_machine`` on, so
every ``aws-sdk:dynamodb`` task runs against the stack's tables. Each test seeds its own order and
approval (PENDING → APPROVED, the amount reserved) with plain DynamoDB calls, starts executions
named and fed by support_agent.approvals.flow, and checks the money after every step:
``available + reserved + refunded = total``, none negative.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto import mock_aws

from devstack.stack import REPO_ROOT, Stack, deploy, load_template, translate
from support_agent.approvals.flow import execution_name, flow_input
from support_agent.ids import new_approval_id
from support_agent.store.dynamo import from_item, to_item, to_values

ASL_PATH = REPO_ROOT / "statemachine" / "refund_flow.asl.json"
CUSTOMER = 901  # not in the demo data
TOTAL = 20_000
AMOUNT = 12_000
_orders = itertools.count(5001)


@pytest.fixture(scope="module")
def flow_stack() -> Iterator[Stack]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.delenv("AWS_ENDPOINT_URL", raising=False)
        mp.delenv("AWS_PROFILE", raising=False)
        with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
            yield deploy()


@dataclass
class Case:
    """One order with one approval reserving AMOUNT of it, in the deployed tables."""

    stack: Stack
    approval_id: str
    order_id: int

    @property
    def ddb(self) -> Any:
        return boto3.client("dynamodb")

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

    def set_money(self, available: int, reserved: int) -> None:
        self.ddb.update_item(
            TableName=self.table("CustomerDataTable"),
            Key=to_item({"customer_id": CUSTOMER, "sk": f"ORDER#{self.order_id}"}),
            UpdateExpression="SET available_cents = :av, reserved_cents = :re",
            ExpressionAttributeValues=to_values({":av": available, ":re": reserved}),
        )

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
        out = self.ddb.query(
            TableName=self.table("AuditTable"),
            KeyConditionExpression="#s = :s",
            ExpressionAttributeNames={"#s": "stream"},
            ExpressionAttributeValues=to_values({":s": f"approval#{self.approval_id}"}),
        )
        return [from_item(i) for i in out["Items"]]

    def run(self, retry: int = 0, timeout: float = 30.0) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start the execution ``<id>`` or ``<id>-r<retry>`` and wait for it: (description, input)."""
        sfn = boto3.client("stepfunctions")
        payload = flow_input(self.approval_id)
        started = sfn.start_execution(
            stateMachineArn=self.stack.state_machine_arn("RefundFlow"),
            name=execution_name(self.approval_id, retry),
            input=json.dumps(payload),
        )
        deadline = time.monotonic() + timeout
        while True:
            description: dict[str, Any] = sfn.describe_execution(executionArn=started["executionArn"])
            if description["status"] != "RUNNING":
                return description, payload
            assert time.monotonic() < deadline, "execution still running"
            time.sleep(0.05)


def _seed(stack: Stack, approve: bool = True) -> Case:
    case = Case(stack, new_approval_id(), next(_orders))
    ddb = boto3.client("dynamodb")
    ddb.put_item(
        TableName=case.table("CustomerDataTable"),
        Item=to_item(
            {
                "customer_id": CUSTOMER,
                "sk": f"ORDER#{case.order_id}",
                "order_id": case.order_id,
                "status": "DELIVERED",
                "currency": "USD",
                "total_cents": TOTAL,
                "available_cents": TOTAL - AMOUNT,
                "reserved_cents": AMOUNT,
                "refunded_cents": 0,
            }
        ),
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
def case(flow_stack: Stack) -> Case:
    return _seed(flow_stack)


# ------------------------------------------------------------------ executions


def test_approved_refund_completes_once(case: Case) -> None:
    execution, payload = case.run()

    assert execution["status"] == "SUCCEEDED", execution
    assert json.loads(execution["output"]) == {"approvalId": case.approval_id, "status": "REFUNDED", "replayed": False}
    approval = case.approval()
    assert approval["status"] == "REFUNDED" and approval["refunded_at"]
    assert case.money() == (TOTAL - AMOUNT, 0, AMOUNT)
    (row,) = case.refund_rows()
    assert row == {
        "customer_id": CUSTOMER,
        "sk": f"REFUND#{case.approval_id}",
        "kind": "approved",
        "order_id": case.order_id,
        "amount_cents": AMOUNT,
        "currency": "USD",
        "approval_id": case.approval_id,
        "conversation_id": approval["conversation_id"],
        "status": "REFUNDED",
        "created_at": row["created_at"],
    }
    (audit,) = case.audit()
    assert audit["event_id"] == payload["eventIds"]["completed"]
    assert {k: audit[k] for k in ("action", "actor", "outcome", "customer_id", "approval_id", "conversation_id")} == {
        "action": "refund_completed",
        "actor": "refund-flow",
        "outcome": "REFUNDED",
        "customer_id": CUSTOMER,
        "approval_id": case.approval_id,
        "conversation_id": approval["conversation_id"],
    }
    assert audit["request_id"] == case.approval_id  # the execution name
    assert audit["created_at"] == row["created_at"] == approval["refunded_at"]
    assert json.loads(audit["output"]) == {"order_id": case.order_id, "amount_cents": AMOUNT, "currency": "USD"}


def test_a_replayed_execution_succeeds_and_changes_nothing(case: Case) -> None:
    first, _ = case.run()
    assert first["status"] == "SUCCEEDED"
    before = (case.money(), case.refund_rows(), case.audit(), case.approval())

    replay, _ = case.run(retry=1)

    assert replay["status"] == "SUCCEEDED", replay
    assert json.loads(replay["output"])["replayed"] is True
    assert (case.money(), case.refund_rows(), case.audit(), case.approval()) == before
    assert len(case.refund_rows()) == 1


def test_an_order_changed_underneath_fails_visibly_then_a_retry_refunds(case: Case) -> None:
    case.set_money(available=TOTAL - AMOUNT + 100, reserved=AMOUNT - 100)  # less reserved than approved
    before = case.money()

    execution, payload = case.run()

    assert execution["status"] == "FAILED", execution
    assert execution["error"] == "RefundFailed"
    assert "ConditionalCheckFailed" in execution["cause"]
    approval = case.approval()
    assert approval["status"] == "FAILED" and approval["failed_at"]
    assert approval["failure_error"] == "DynamoDb.TransactionCanceledException"
    assert case.money() == before
    assert case.refund_rows() == []
    (audit,) = case.audit()
    assert audit["event_id"] == payload["eventIds"]["failed"]
    assert (audit["action"], audit["actor"], audit["outcome"]) == ("refund_failed", "refund-flow", "FAILED")
    assert audit["customer_id"] == CUSTOMER and audit["approval_id"] == case.approval_id
    output = json.loads(audit["output"])
    assert output["attempts"] == 3  # the first try and two bounded retries
    assert output["error"] == "DynamoDb.TransactionCanceledException"
    assert (output["order_id"], output["amount_cents"]) == (case.order_id, AMOUNT)

    # Retry after FAILED: the order is put right, a lead retries, execution <id>-r1.
    case.set_money(available=TOTAL - AMOUNT, reserved=AMOUNT)
    case.transition("FAILED", "APPROVED")
    retried, retry_payload = case.run(retry=1)

    assert retried["status"] == "SUCCEEDED", retried
    assert json.loads(retried["output"])["replayed"] is False
    assert case.approval()["status"] == "REFUNDED"
    assert case.money() == (TOTAL - AMOUNT, 0, AMOUNT)
    assert len(case.refund_rows()) == 1
    audit_rows = sorted(case.audit(), key=lambda r: r["event_id"])  # ULIDs: time order
    assert [(r["action"], r["request_id"]) for r in audit_rows] == [
        ("refund_failed", case.approval_id),
        ("refund_completed", f"{case.approval_id}-r1"),
    ]
    assert audit_rows[1]["event_id"] == retry_payload["eventIds"]["completed"]


def test_an_approval_not_approved_or_unknown_changes_nothing(flow_stack: Stack) -> None:
    pending = _seed(flow_stack, approve=False)
    execution, _ = pending.run()
    assert (execution["status"], execution["error"]) == ("FAILED", "ApprovalNotApproved")
    assert pending.approval()["status"] == "PENDING"
    assert pending.money() == (TOTAL - AMOUNT, AMOUNT, 0)
    assert pending.refund_rows() == [] and pending.audit() == []

    unknown = Case(flow_stack, new_approval_id(), pending.order_id)
    execution, _ = unknown.run()
    assert (execution["status"], execution["error"]) == ("FAILED", "ApprovalNotFound")


# ------------------------------------------------------------------ the deployed machine is the repo's


def test_the_stack_and_the_tests_use_the_same_state_machine(flow_stack: Stack) -> None:
    sfn, iam = boto3.client("stepfunctions"), boto3.client("iam")
    arn = flow_stack.state_machine_arn("RefundFlow")
    assert arn == flow_stack.physical_ids["RefundFlow"] == flow_stack.outputs["RefundFlowArn"]
    deployed = sfn.describe_state_machine(stateMachineArn=arn)
    assert deployed["name"] == flow_stack.outputs["RefundFlowName"]
    assert [m["name"] for m in sfn.list_state_machines()["stateMachines"]].count(deployed["name"]) == 1
    assert deployed["type"] == "STANDARD"
    role_id = flow_stack.template["Resources"]["RefundFlow"]["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    assert deployed["roleArn"] == iam.get_role(RoleName=flow_stack.physical_ids[role_id])["Role"]["Arn"]
    # The repo's ASL with the stack's physical table names substituted, nothing else.
    expected = ASL_PATH.read_text()
    for name in ("ApprovalsTable", "CustomerDataTable", "AuditTable"):
        expected = expected.replace("${" + name + "}", flow_stack.physical_ids[name])
    assert deployed["definition"] == expected
    assert "${" not in deployed["definition"]
    # Whatever starts the flow is configured with this machine.
    starters = {
        logical_id: flow_stack.function_env(logical_id)["REFUND_FLOW_ARN"]
        for logical_id, resource in flow_stack.template["Resources"].items()
        if resource["Type"] == "AWS::Lambda::Function"
        and "REFUND_FLOW_ARN" in resource["Properties"].get("Environment", {}).get("Variables", {})
    }
    assert starters, "no function starts RefundFlow"
    assert set(starters.values()) == {arn}


# ------------------------------------------------------------------ the definition, statically

_TABLE = re.compile(r"^\$\{(\w+)\}$")
_TRANSACT_ACTIONS = {"Put": "PutItem", "Update": "UpdateItem", "ConditionCheck": "ConditionCheckItem"}


def _asl() -> dict[str, Any]:
    return dict(json.loads(ASL_PATH.read_text()))


def test_the_template_wires_the_asl_file() -> None:
    resource = load_template()["Resources"]["RefundFlow"]
    assert resource["Type"] == "AWS::Serverless::StateMachine"
    props = resource["Properties"]
    assert props["Type"] == "STANDARD"
    assert (REPO_ROOT / props["DefinitionUri"]) == ASL_PATH
    placeholders = set(re.findall(r"\$\{(\w+)\}", ASL_PATH.read_text()))
    assert set(props["DefinitionSubstitutions"]) == placeholders
    assert props["DefinitionSubstitutions"] == {name: {"Ref": name} for name in placeholders}


def test_the_role_grants_exactly_what_the_tasks_call() -> None:
    """Derive (IAM action, table) from every DynamoDB task of the ASL; the role must match it."""
    used: set[tuple[str, str]] = set()
    for state in _asl()["States"].values():
        if state["Type"] != "Task":
            continue
        resource = state["Resource"]
        assert resource.startswith("arn:aws:states:::aws-sdk:dynamodb:"), resource
        api = resource.rsplit(":", 1)[1]
        params = state["Parameters"]
        if api == "getItem":
            used.add(("dynamodb:GetItem", _table(params["TableName"])))
        else:
            assert api == "transactWriteItems", api
            for item in params["TransactItems"]:
                ((kind, op),) = item.items()
                used.add((f"dynamodb:{_TRANSACT_ACTIONS[kind]}", _table(op["TableName"])))
    template = translate(load_template())
    role_id = template["Resources"]["RefundFlow"]["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    granted: set[tuple[str, str]] = set()
    for policy in template["Resources"][role_id]["Properties"]["Policies"]:
        for statement in policy["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            table = statement["Resource"]["Fn::GetAtt"][0]
            granted |= {(action, table) for action in actions}
    assert granted == used


def _table(placeholder: str) -> str:
    match = _TABLE.match(placeholder)
    assert match, placeholder
    return match.group(1)


def test_every_write_is_conditional_and_cancellations_are_caught() -> None:
    states = _asl()["States"]
    for name, state in states.items():
        if state["Type"] != "Task":
            continue
        retried = {e for r in state.get("Retry", []) for e in r["ErrorEquals"]}
        assert "DynamoDb.ThrottlingException" in retried, name
        assert "DynamoDb.ProvisionedThroughputExceededException" in retried, name
        for item in state["Parameters"].get("TransactItems", []):
            ((kind, op),) = item.items()
            assert op["ConditionExpression"], (name, kind)
            if kind == "Put":
                assert op["ConditionExpression"].startswith("attribute_not_exists("), (name, op)
    caught = {e for c in states["Refund"]["Catch"] for e in c["ErrorEquals"]}
    assert "DynamoDb.TransactionCanceledException" in caught
    assert states["AfterCancel"]["Type"] == "Choice"
