"""template.yaml deployed into moto by devstack.stack: the resources exist and are wired together."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from devstack.stack import Stack, deploy
from tests.support.routes import CHAT_ROUTES

SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:anthropic-key-AbCdEf"


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """One deployment for the module (about a second); tests only read it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.delenv("AWS_ENDPOINT_URL", raising=False)
        mp.delenv("AWS_PROFILE", raising=False)
        with mock_aws():
            yield deploy({"Transparency": "verbose", "MaxIterations": "6"})


def _key_schema(desc: Any) -> list[tuple[str, str]]:
    return [(k["AttributeName"], k["KeyType"]) for k in desc["KeySchema"]]


EXPECTED_TABLES = {
    "ConversationsTable": (
        [("conversation_id", "HASH"), ("seq", "RANGE")],
        {
            "by_customer": [("customer_id", "HASH"), ("updated_at", "RANGE")],
            "turns_running": [("running", "HASH"), ("lease_check_at", "RANGE")],
            "outcomes_due": [("outcome_due", "HASH"), ("quiet_check_at", "RANGE")],
            "outcomes_by_day": [("quiet_day", "HASH"), ("quiet_at", "RANGE")],
        },
    ),
    "CustomerDataTable": (
        [("customer_id", "HASH"), ("sk", "RANGE")],
        {
            "unsettled": [("unsettled", "HASH"), ("attempt_started_at", "RANGE")],
            "ledger_by_created": [("ledger", "HASH"), ("created_at", "RANGE")],
        },
    ),
    "ApprovalsTable": (
        [("approval_id", "HASH")],
        {
            "by_status": [("status", "HASH"), ("created_at", "RANGE")],
            "by_created": [("entity", "HASH"), ("created_at", "RANGE")],
        },
    ),
    "AuditTable": (
        [("stream", "HASH"), ("event_id", "RANGE")],
        {"by_customer": [("customer_id", "HASH"), ("event_id", "RANGE")]},
    ),
    "ConnectionsTable": (
        [("pk", "HASH"), ("sk", "RANGE")],
        {"subscribers": [("conversation_id", "HASH"), ("pk", "RANGE")]},
    ),
}


@pytest.mark.parametrize("table_id", sorted(EXPECTED_TABLES))
def test_table_exists_with_keys_and_indexes(stack: Stack, table_id: str) -> None:
    name = stack.physical_ids[table_id]
    assert stack.outputs[f"{table_id.removesuffix('Table')}TableName"] == name
    table = boto3.client("dynamodb").describe_table(TableName=name)["Table"]
    keys, indexes = EXPECTED_TABLES[table_id]
    assert _key_schema(table) == keys
    assert {g["IndexName"]: _key_schema(g) for g in table.get("GlobalSecondaryIndexes", [])} == indexes
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"


def test_queue_and_dead_letter_queue(stack: Stack) -> None:
    sqs = boto3.client("sqs")
    queue = sqs.get_queue_attributes(QueueUrl=stack.outputs["ApprovalQueueUrl"], AttributeNames=["All"])
    dlq = sqs.get_queue_attributes(QueueUrl=stack.outputs["ApprovalDLQUrl"], AttributeNames=["All"])
    attrs, dlq_attrs = queue["Attributes"], dlq["Attributes"]
    assert attrs["VisibilityTimeout"] == "180"
    assert attrs["RedrivePolicy"].replace(" ", "") == (
        f'{{"deadLetterTargetArn":"{dlq_attrs["QueueArn"]}","maxReceiveCount":5}}'
    )
    assert dlq_attrs["MessageRetentionPeriod"] == str(14 * 24 * 3600)
    assert stack.physical_ids["ApprovalQueue"] == stack.outputs["ApprovalQueueUrl"]


def test_turn_queue_and_its_dead_letter_queue(stack: Stack) -> None:
    """Long turns: the queue the chat function hands them to, and where the worker's failures end up."""
    sqs = boto3.client("sqs")
    queue = sqs.get_queue_attributes(QueueUrl=stack.physical_ids["TurnQueue"], AttributeNames=["All"])["Attributes"]
    dlq = sqs.get_queue_attributes(QueueUrl=stack.physical_ids["TurnDLQ"], AttributeNames=["All"])["Attributes"]
    assert queue["VisibilityTimeout"] == "5400"
    assert queue["RedrivePolicy"].replace(" ", "") == (
        f'{{"deadLetterTargetArn":"{dlq["QueueArn"]}","maxReceiveCount":3}}'
    )
    chat, sweep = stack.function_env("ChatFunction"), stack.function_env("TurnSweepFunction")
    assert chat["TURN_QUEUE_URL"] == sweep["TURN_QUEUE_URL"] == stack.physical_ids["TurnQueue"]
    assert sweep["TURN_DLQ_URL"] == stack.physical_ids["TurnDLQ"]
    assert (chat["SYNC_TURN_SECONDS"], chat["MODEL_CALL_BUDGET_SECONDS"], chat["TURN_MAX_SECONDS"]) == (
        "20",
        "8",
        "300",
    )
    worker = stack.function_env("TurnWorkerFunction")
    assert (worker["TURN_MAX_SECONDS"], worker["POWERTOOLS_SERVICE_NAME"]) == ("300", "turn_worker")
    assert worker["CONVERSATIONS_TABLE"] == stack.physical_ids["ConversationsTable"]
    config = boto3.client("lambda").get_function_configuration(FunctionName=stack.physical_ids["TurnWorkerFunction"])
    assert config["Timeout"] == 900


def test_chat_function_environment_resolves_to_the_stack(stack: Stack) -> None:
    env = stack.function_env("ChatFunction")
    assert all(isinstance(v, str) for v in env.values()), env
    assert env["CONVERSATIONS_TABLE"] == stack.physical_ids["ConversationsTable"]
    assert env["CUSTOMER_DATA_TABLE"] == stack.physical_ids["CustomerDataTable"]
    assert env["APPROVALS_TABLE"] == stack.physical_ids["ApprovalsTable"]
    assert env["AUDIT_TABLE"] == stack.physical_ids["AuditTable"]
    assert env["APPROVAL_QUEUE_URL"] == stack.outputs["ApprovalQueueUrl"]
    # Parameters passed in, and defaults for the rest.
    assert env["TRANSPARENCY"] == "verbose"
    assert env["MAX_ITERATIONS"] == "6"
    assert env["REFUND_THRESHOLD_CENTS"] == "5000"
    assert env["MODEL_ID"] == "claude-sonnet-4-5"
    assert env["ANTHROPIC_API_KEY_SECRET_ARN"] == ""
    assert env["JWT_ISSUER"] == "support-agent-local"
    assert env["POWERTOOLS_SERVICE_NAME"] == "chat"


def test_chat_function_configuration(stack: Stack) -> None:
    config = boto3.client("lambda").get_function_configuration(FunctionName=stack.physical_ids["ChatFunction"])
    assert config["Runtime"] == "python3.13"
    assert config["Timeout"] == 29
    assert config["Handler"] == "app.handler"
    code_dir, handler = stack.function_handler("ChatFunction")
    assert code_dir.name == "chat" and handler == "app.handler"


def test_routes_come_from_the_template(stack: Stack) -> None:
    routes = {(r.method, r.path, r.function) for r in stack.routes}
    assert {(method, path, "ChatFunction") for method, path in CHAT_ROUTES} <= routes


def test_only_what_moto_cannot_deploy_is_skipped(stack: Stack) -> None:
    deployed_types = {
        stack.template["Resources"][logical_id]["Type"]
        for logical_id in stack.skipped
        if logical_id in stack.template["Resources"]
    }
    assert deployed_types <= {
        "AWS::ApiGatewayV2::Api",
        "AWS::ApiGatewayV2::Stage",
        "AWS::ApiGatewayV2::Integration",  # the WebSocket API's (SocketFunction deploys; devstack serves its routes)
        "AWS::ApiGatewayV2::Route",
        "AWS::ApiGatewayV2::RouteResponse",  # the keepalive's, answered by API Gateway (devstack serves it)
        "AWS::ApiGatewayV2::IntegrationResponse",
        "AWS::Lambda::Permission",
        # moto would consume the queue itself and run the placeholder code in Docker; the
        # notifier tests play the mapping on messages received from the deployed queue.
        "AWS::Lambda::EventSourceMapping",
        # moto's CloudFormation skips alarms (tests/unit/test_alarms.py checks them on the template);
        # the dashboard refers to them and to the HTTP API.
        "AWS::CloudWatch::Alarm",
        "AWS::CloudWatch::Dashboard",
        # moto's CloudFormation does not deploy bucket policies (test_template checks the TLS-only deny).
        "AWS::S3::BucketPolicy",
    }
    assert "Outputs.ApiUrl" in stack.skipped
    assert "OpsTopic" in stack.physical_ids  # the alarms' topic itself deploys
    for logical_id, resource in stack.template["Resources"].items():
        if resource["Type"].startswith(("AWS::DynamoDB::", "AWS::SQS::", "AWS::IAM::", "AWS::Lambda::Function")):
            assert logical_id in stack.physical_ids, logical_id


def test_deployed_role_policy_matches_the_template(stack: Stack) -> None:
    iam = boto3.client("iam")
    role = stack.physical_ids[stack.template["Resources"]["ChatFunction"]["Properties"]["Role"]["Fn::GetAtt"][0]]
    (name,) = iam.list_role_policies(RoleName=role)["PolicyNames"]
    document = iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
    statements = document["Statement"]
    assert None not in statements  # the Fn::If/AWS::NoValue secret statement is gone, not null
    assert "secretsmanager" not in str(statements)
    resources = {s["Sid"]: s["Resource"] for s in statements}
    table_arn = boto3.client("dynamodb").describe_table(TableName=stack.physical_ids["AuditTable"])["Table"]["TableArn"]
    assert resources["AuditAppendOnly"] == table_arn
    assert resources["ConversationsByCustomer"].endswith(
        f"{stack.physical_ids['ConversationsTable']}/index/by_customer"
    )
    # The same statements, as role_policies gives them from the translated template.
    assert [s.get("Sid") for s in stack.role_policies("ChatFunction") if "Sid" in s] == [s["Sid"] for s in statements]


def test_secret_statement_is_deployed_when_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        stack = deploy({"AnthropicApiKeySecretArn": SECRET_ARN}, stack_name="with-secret")
        role = stack.physical_ids["ChatFunctionRole"]
        iam = boto3.client("iam")
        (name,) = iam.list_role_policies(RoleName=role)["PolicyNames"]
        statements = iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]["Statement"]
        secret = [s for s in statements if s.get("Sid") == "AnthropicApiKey"]
        assert secret == [
            {
                "Sid": "AnthropicApiKey",
                "Effect": "Allow",
                "Action": "secretsmanager:GetSecretValue",
                "Resource": SECRET_ARN,
            }
        ]
        assert stack.function_env("ChatFunction")["ANTHROPIC_API_KEY_SECRET_ARN"] == SECRET_ARN
