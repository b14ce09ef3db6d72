"""template.yaml: lint, the shape docs/ARCHITECTURE.md describes, and least privilege checked statically (rule 7).

The IAM check works on the template as samtranslator translates it, i.e. on the roles AWS will
create: every statement of every function role is expanded into (action, target) pairs, and the
set must EQUAL the one allowed below. Adding a permission anywhere fails this test until the
allowed set here is changed too, in review.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cfnlint
import pytest
from cfnlint.api import lint_file

from devstack.stack import REPO_ROOT, TEMPLATE_PATH, http_routes, translate
from tests.support.routes import CHAT_ROUTES

Pair = tuple[str, str]  # (iam action, target) where target is a logical id, "<id>/index/<name>" or "param:<name>"


def resources_of_type(template: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == type_}


# ------------------------------------------------------------------ lint and basics


def test_cfn_lint_is_clean() -> None:
    matches = lint_file(TEMPLATE_PATH)
    assert [str(m) for m in matches] == []


def test_python_runtime_and_architecture(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    assert sam["Parameters"]["Architecture"]["Default"] == "arm64"
    assert sam["Parameters"]["Architecture"]["AllowedValues"] == ["arm64", "x86_64"]
    functions = resources_of_type(cfn, "AWS::Lambda::Function")
    assert functions
    for name, fn in functions.items():
        runtime = fn["Properties"]["Runtime"]
        match = re.fullmatch(r"python3\.(\d+)", runtime)
        assert match and int(match.group(1)) >= 12, f"{name}: {runtime}"
        assert fn["Properties"]["Architectures"] == [{"Ref": "Architecture"}], name
        assert fn["Properties"]["TracingConfig"] == {"Mode": "Active"}, name
        assert fn["Properties"]["Layers"] == [{"Ref": _layer_id(cfn)}], name


def _layer_id(cfn: dict[str, Any]) -> str:
    (layer_id,) = resources_of_type(cfn, "AWS::Lambda::LayerVersion")
    return layer_id


def test_layer_builds_for_the_runtime_and_architecture(sam: dict[str, Any]) -> None:
    layer = sam["Resources"]["CommonLayer"]
    runtime = sam["Globals"]["Function"]["Runtime"]
    assert layer["Properties"]["ContentUri"] == "layers/common/"
    assert layer["Properties"]["CompatibleRuntimes"] == [runtime]
    assert layer["Metadata"]["BuildMethod"] == runtime
    # The layer's compiled wheels (pydantic-core, cryptography) follow the Architecture parameter:
    # sam build resolves it in Metadata (tests/smoke/test_built_artifacts.py builds both).
    assert layer["Metadata"]["BuildArchitecture"] == {"Ref": "Architecture"}


def test_layer_requirements_mirror_the_project_dependencies() -> None:
    def names(specs: list[str]) -> set[str]:
        return {re.split(r"[\[<>=!~ ;]", s.strip(), maxsplit=1)[0].lower() for s in specs}

    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    lines = (REPO_ROOT / "layers/common/requirements.txt").read_text().splitlines()
    layer = [line for line in lines if line.strip() and not line.startswith("#")]
    # boto3 ships with the Lambda runtime.
    assert names(layer) == names(pyproject["project"]["dependencies"]) - {"boto3"}


def test_chat_function(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    fn = cfn["Resources"]["ChatFunction"]["Properties"]
    assert fn["Timeout"] <= 29  # API Gateway's integration limit (rule 4)
    assert fn["Handler"] == "app.handler"
    assert sam["Resources"]["ChatFunction"]["Properties"]["CodeUri"] == "functions/chat/"
    env = fn["Environment"]["Variables"]
    assert {
        "CONVERSATIONS_TABLE": {"Ref": "ConversationsTable"},
        "CUSTOMER_DATA_TABLE": {"Ref": "CustomerDataTable"},
        "APPROVALS_TABLE": {"Ref": "ApprovalsTable"},
        "AUDIT_TABLE": {"Ref": "AuditTable"},
        "APPROVAL_QUEUE_URL": {"Ref": "ApprovalQueue"},
        "MODEL_ID": {"Ref": "ModelId"},
        "ANTHROPIC_BASE_URL": {"Ref": "AnthropicBaseUrl"},
        "ANTHROPIC_API_KEY_SECRET_ARN": {"Ref": "AnthropicApiKeySecretArn"},
        "LLM_PROVIDER": {"Ref": "LlmProvider"},
        "OPENAI_BASE_URL": {"Ref": "OpenAiBaseUrl"},
        "OPENAI_API_KEY_SECRET_ARN": {"Ref": "AnthropicApiKeySecretArn"},
        "REFUND_THRESHOLD_CENTS": {"Ref": "RefundThresholdCents"},
        "MAX_ITERATIONS": {"Ref": "MaxIterations"},
        "JWT_ISSUER": {"Ref": "JwtIssuer"},
        "JWT_AUDIENCE": {"Ref": "JwtAudience"},
        "JWT_JWKS_URL": {"Ref": "JwtJwksUrl"},
        "JWT_SECRET": {"Ref": "JwtSecret"},
        "TRANSPARENCY": {"Ref": "Transparency"},
        "POWERTOOLS_SERVICE_NAME": "chat",
    }.items() <= env.items()


def test_parameters(sam: dict[str, Any]) -> None:
    params = sam["Parameters"]
    defaults = {name: p.get("Default") for name, p in params.items()}
    assert {
        "ModelId": "claude-sonnet-4-5",
        "AnthropicBaseUrl": "https://api.anthropic.com",
        "AnthropicApiKeySecretArn": "",
        "LlmProvider": "anthropic",
        "OpenAiBaseUrl": "https://api.openai.com/v1",
        "BedrockInferenceProfileArn": "",
        "BedrockModelArns": "",
        "RefundThresholdCents": 5000,
        "MaxIterations": 8,
        "JwtIssuer": "support-agent-local",
        "JwtAudience": "support-agent",
        "JwtJwksUrl": "",
        "JwtSecret": "",
        "Transparency": "quiet",
    }.items() <= defaults.items()
    assert params["JwtSecret"]["NoEcho"] is True
    assert params["Transparency"]["AllowedValues"] == ["verbose", "quiet"]
    assert params["LlmProvider"]["AllowedValues"] == ["anthropic", "openai", "bedrock"]
    assert params["BedrockModelArns"]["Type"] == "CommaDelimitedList"


def test_routes_and_api(sam: dict[str, Any]) -> None:
    routes = {(r.method, r.path, r.function) for r in http_routes(sam)}
    assert {(method, path, "ChatFunction") for method, path in CHAT_ROUTES} <= routes
    for event in sam["Resources"]["ChatFunction"]["Properties"]["Events"].values():
        assert event["Properties"]["ApiId"] == {"Ref": "HttpApi"}  # throttled, CORS-configured API
    api = sam["Resources"]["HttpApi"]["Properties"]
    assert api["DefaultRouteSettings"]["ThrottlingBurstLimit"]
    assert api["DefaultRouteSettings"]["ThrottlingRateLimit"]
    assert api["CorsConfiguration"]["AllowOrigins"] == {"Ref": "AllowedOrigins"}


# ------------------------------------------------------------------ data (ARCHITECTURE.md, "Data")

TABLES: dict[str, dict[str, Any]] = {
    "ConversationsTable": {
        "keys": [("conversation_id", "S", "HASH"), ("seq", "N", "RANGE")],
        "indexes": {
            "by_customer": [("customer_id", "N", "HASH"), ("updated_at", "S", "RANGE")],
            # sparse: turn records of handed-over turns while they run (store/turns.py, the turn sweep)
            "turns_running": [("running", "S", "HASH"), ("lease_check_at", "N", "RANGE")],
            # sparse: headers of conversations whose outcome is due a (re)check (outcomes/store.py)
            "outcomes_due": [("outcome_due", "S", "HASH"), ("quiet_check_at", "N", "RANGE")],
            # sparse: outcome items by the UTC day they went quiet (the daily rollup, reports/sources.py)
            "outcomes_by_day": [("quiet_day", "S", "HASH"), ("quiet_at", "S", "RANGE")],
        },
    },
    "CustomerDataTable": {
        "keys": [("customer_id", "N", "HASH"), ("sk", "S", "RANGE")],
        "indexes": {  # sparse: refund ledger rows only (refunds/ledger.py)
            "unsettled": [("unsettled", "S", "HASH"), ("attempt_started_at", "S", "RANGE")],
            "ledger_by_created": [("ledger", "S", "HASH"), ("created_at", "S", "RANGE")],
        },
    },
    "ApprovalsTable": {
        "keys": [("approval_id", "S", "HASH")],
        "indexes": {
            "by_status": [("status", "S", "HASH"), ("created_at", "S", "RANGE")],
            "by_created": [("entity", "S", "HASH"), ("created_at", "S", "RANGE")],
        },
    },
    "AuditTable": {
        "keys": [("stream", "S", "HASH"), ("event_id", "S", "RANGE")],
        "indexes": {"by_customer": [("customer_id", "N", "HASH"), ("event_id", "S", "RANGE")]},
    },
    "ConnectionsTable": {  # the WebSocket's state (sockets/connections.py)
        "keys": [("pk", "S", "HASH"), ("sk", "S", "RANGE")],
        # sparse: live subscriptions only, a conversation's connections (what is pushed goes to each)
        "indexes": {"subscribers": [("conversation_id", "S", "HASH"), ("pk", "S", "RANGE")]},
    },
}


def test_exactly_the_designed_tables(cfn: dict[str, Any]) -> None:
    assert set(resources_of_type(cfn, "AWS::DynamoDB::Table")) == set(TABLES)


@pytest.mark.parametrize("table_id", sorted(TABLES))
def test_table(cfn: dict[str, Any], table_id: str) -> None:
    props = cfn["Resources"][table_id]["Properties"]
    expected = TABLES[table_id]
    types = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}

    def schema(key_schema: list[dict[str, str]]) -> list[tuple[str, str, str]]:
        return [(k["AttributeName"], types[k["AttributeName"]], k["KeyType"]) for k in key_schema]

    assert schema(props["KeySchema"]) == expected["keys"]
    indexes = {g["IndexName"]: g for g in props.get("GlobalSecondaryIndexes", [])}
    assert set(indexes) == set(expected["indexes"])
    for name, keys in expected["indexes"].items():
        assert schema(indexes[name]["KeySchema"]) == keys
        assert indexes[name]["Projection"] == {"ProjectionType": "ALL"}
    assert "LocalSecondaryIndexes" not in props
    # Every attribute defined is used by a key (CloudFormation rejects the rest anyway).
    used = {k for k, _, _ in expected["keys"]} | {k for ks in expected["indexes"].values() for k, _, _ in ks}
    assert set(types) == used
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["SSESpecification"] == {"SSEEnabled": True}
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}


def test_conversations_ttl_is_for_rate_counters(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    ttl = cfn["Resources"]["ConversationsTable"]["Properties"]["TimeToLiveSpecification"]
    assert ttl == {"AttributeName": "expires_at", "Enabled": True}
    # The turn limit is a template parameter, reaching the chat function only.
    param = sam["Parameters"]["TurnsPerMinute"]
    assert (param["Type"], param["Default"], param["MinValue"]) == ("Number", 10, 1)
    env = cfn["Resources"]["ChatFunction"]["Properties"]["Environment"]["Variables"]
    assert env["TURNS_PER_MINUTE"] == {"Ref": "TurnsPerMinute"}


def test_erasure_is_a_lead_route_that_cannot_delete(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    routes = {(r.method, r.path): r.function for r in http_routes(sam)}
    assert routes[("POST", "/api/customers/{id}/erase")] == "ApprovalsFunction"
    lead = granted_pairs(cfn, "ApprovalsFunction")
    # GetItem/PutItem: only on `note#` items, the decisions' notifications (tests/unit/test_notifications_iam.py).
    assert {a for a, t in lead if t == "ConversationsTable"} == {
        "dynamodb:UpdateItem",
        "dynamodb:Query",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
    }
    for function_id in ("ChatFunction", "ApprovalsFunction"):
        actions = {a for a, _ in granted_pairs(cfn, function_id)}
        assert not actions & {"dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "dynamodb:DeleteTable"}, function_id
    chat = granted_pairs(cfn, "ChatFunction")
    assert {a for a, t in chat if t == "AuditTable"} == {"dynamodb:PutItem"}


def test_audit_table_is_append_only_and_kept(cfn: dict[str, Any]) -> None:
    audit = cfn["Resources"]["AuditTable"]
    assert "TimeToLiveSpecification" not in audit["Properties"]
    assert audit["DeletionPolicy"] == "Retain"
    assert audit["UpdateReplacePolicy"] == "Retain"


def test_sealed_heads_bucket_is_locked_in_compliance_mode_and_kept(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    bucket = cfn["Resources"]["AuditSealBucket"]
    props = bucket["Properties"]
    assert (bucket["DeletionPolicy"], bucket["UpdateReplacePolicy"]) == ("Retain", "Retain")
    assert props["ObjectLockEnabled"] is True
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert props["ObjectLockConfiguration"] == {
        "ObjectLockEnabled": "Enabled",
        "Rule": {"DefaultRetention": {"Mode": "COMPLIANCE", "Days": {"Ref": "AuditSealRetentionDays"}}},
    }
    assert sam["Parameters"]["AuditSealRetentionDays"]["Default"] == 400
    assert all(props["PublicAccessBlockConfiguration"].values())
    statements = cfn["Resources"]["AuditSealBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    (deny,) = [x for x in statements if x["Sid"] == "TlsOnly"]
    assert (deny["Effect"], deny["Condition"]) == ("Deny", {"Bool": {"aws:SecureTransport": "false"}})


def test_the_sealed_heads_bucket_refuses_a_put_over_an_existing_key(cfn: dict[str, Any]) -> None:
    """Issue 30 finding 6: Object Lock keeps each version, yet a new version of a sealed key could still be put.
    The bucket denies every PutObject (a copy and a multipart part included: they are s3:PutObject too) without
    ``If-None-Match: *``, to every principal, the seal function's role and the root user alike. moto ignores
    bucket-policy conditions: the writer's header is tested against moto (tests/unit/test_sealed_heads.py)."""
    statements = cfn["Resources"]["AuditSealBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    (deny,) = [x for x in statements if x["Sid"] == "NoPutOverASealedKey"]
    assert (deny["Effect"], deny["Principal"], deny["Action"]) == ("Deny", "*", "s3:PutObject")
    assert deny["Resource"] == {"Fn::Sub": "${AuditSealBucket.Arn}/*"}
    # StringNotEquals also matches a request without the header (an absent key never equals "*").
    assert deny["Condition"] == {"StringNotEquals": {"s3:if-none-match": "*"}}
    assert not [x for x in statements if x["Effect"] == "Allow"]  # nothing in the bucket policy lifts it


def test_seal_and_watcher_each_map_the_audit_stream(cfn: dict[str, Any]) -> None:
    audit = cfn["Resources"]["AuditTable"]["Properties"]
    assert audit["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    mappings = {
        m["Properties"]["FunctionName"]["Ref"]: m["Properties"]
        for m in cfn["Resources"].values()
        if m["Type"] == "AWS::Lambda::EventSourceMapping"
        and m["Properties"]["EventSourceArn"] == {"Fn::GetAtt": ["AuditTable", "StreamArn"]}
    }
    assert set(mappings) == {"AuditWatcherFunction", "AuditSealFunction"}
    seal = mappings["AuditSealFunction"]
    assert seal["FilterCriteria"] == {"Filters": [{"Pattern": '{"eventName": ["INSERT"]}'}]}
    assert seal["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert seal["DestinationConfig"]["OnFailure"]["Destination"] == {"Fn::GetAtt": ["AuditSealDLQ", "Arn"]}
    assert "FilterCriteria" not in mappings["AuditWatcherFunction"]  # the watcher must see MODIFY and REMOVE
    env = cfn["Resources"]["ApprovalsFunction"]["Properties"]["Environment"]["Variables"]
    assert env["AUDIT_SEAL_BUCKET"] == {"Ref": "AuditSealBucket"}


def test_socket_push_maps_the_conversations_stream_alone(cfn: dict[str, Any]) -> None:
    """Keys only (the pusher reads the feed); its own mapping, partial batch failures, bounded retries, a DLQ;
    a TTL removal is no event; the feed it reads is the readers' (TRANSPARENCY), so quiet mode holds."""
    table = cfn["Resources"]["ConversationsTable"]["Properties"]
    assert table["StreamSpecification"] == {"StreamViewType": "KEYS_ONLY"}
    (mapping,) = [
        m["Properties"]
        for m in cfn["Resources"].values()
        if m["Type"] == "AWS::Lambda::EventSourceMapping"
        and m["Properties"]["EventSourceArn"] == {"Fn::GetAtt": ["ConversationsTable", "StreamArn"]}
    ]
    assert mapping["FunctionName"] == {"Ref": "SocketPushFunction"}
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["BisectBatchOnFunctionError"] is True and 0 < mapping["MaximumRetryAttempts"] <= 5
    assert mapping["DestinationConfig"]["OnFailure"]["Destination"] == {"Fn::GetAtt": ["SocketPushDLQ", "Arn"]}
    assert mapping["FilterCriteria"] == {"Filters": [{"Pattern": '{"eventName": ["INSERT", "MODIFY"]}'}]}
    assert cfn["Resources"]["SocketPushDLQ"]["Properties"]["SqsManagedSseEnabled"] is True
    for function in ("SocketPushFunction", "SocketFunction", "EventsFunction"):
        env = cfn["Resources"][function]["Properties"]["Environment"]["Variables"]
        assert env["TRANSPARENCY"] == {"Ref": "Transparency"}, function


def test_approval_queue_has_a_dead_letter_queue(cfn: dict[str, Any]) -> None:
    queue = cfn["Resources"]["ApprovalQueue"]["Properties"]
    dlq = cfn["Resources"]["ApprovalDLQ"]["Properties"]
    assert queue["VisibilityTimeout"] == 180
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": ["ApprovalDLQ", "Arn"]},
        "maxReceiveCount": 5,
    }
    assert queue["SqsManagedSseEnabled"] is True
    assert dlq["MessageRetentionPeriod"] == 14 * 24 * 3600
    assert dlq["SqsManagedSseEnabled"] is True


def test_approval_notifier_consumes_the_approval_queue(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    fn = cfn["Resources"]["ApprovalNotifierFunction"]["Properties"]
    assert sam["Resources"]["ApprovalNotifierFunction"]["Properties"]["CodeUri"] == "functions/approval_notifier/"
    assert fn["Handler"] == "app.handler"
    assert fn["Environment"]["Variables"]["LEADS_TOPIC_ARN"] == {"Ref": "LeadsTopic"}
    # AWS: a queue feeding Lambda needs a visibility timeout of at least six times the function's.
    assert cfn["Resources"]["ApprovalQueue"]["Properties"]["VisibilityTimeout"] >= 6 * fn["Timeout"]
    queue_arn = {"Fn::GetAtt": ["ApprovalQueue", "Arn"]}
    mappings = [
        m["Properties"]
        for m in resources_of_type(cfn, "AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["EventSourceArn"] == queue_arn
    ]
    assert len(mappings) == 1, "exactly one consumer of the ApprovalQueue"
    (mapping,) = mappings
    assert mapping["FunctionName"] == {"Ref": "ApprovalNotifierFunction"}
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert 1 <= mapping["BatchSize"] <= 10
    # A SAM SQS event would attach AWSLambdaSQSQueueExecutionRole (Resource "*").
    for name, resource in sam["Resources"].items():
        for event in resource.get("Properties", {}).get("Events", {}).values():
            assert event["Type"] != "SQS", f"{name}: declare the event source mapping instead"
    topic = cfn["Resources"]["LeadsTopic"]
    assert topic["Type"] == "AWS::SNS::Topic"
    assert topic["Properties"]["KmsMasterKeyId"] == "alias/aws/sns"
    assert sam["Outputs"]["LeadsTopicArn"]["Value"] == {"Ref": "LeadsTopic"}


def test_the_notifier_cannot_write_orders(cfn: dict[str, Any]) -> None:
    granted = granted_pairs(cfn, "ApprovalNotifierFunction")
    assert {t for _, t in granted if t.startswith("CustomerDataTable")} == set()
    assert {a for a, t in granted if a.startswith("dynamodb:")} == {"dynamodb:GetItem", "dynamodb:UpdateItem"}
    assert {t for a, t in granted if a.startswith("dynamodb:")} == {"ApprovalsTable"}


def test_approval_sweep_runs_on_a_schedule(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    fn = cfn["Resources"]["ApprovalSweepFunction"]["Properties"]
    assert sam["Resources"]["ApprovalSweepFunction"]["Properties"]["CodeUri"] == "functions/approval_sweep/"
    assert fn["Handler"] == "app.handler"
    assert fn["Environment"]["Variables"]["APPROVAL_TTL_HOURS"] == {"Ref": "ApprovalTtlHours"}
    assert sam["Parameters"]["ApprovalTtlHours"]["Default"] == 168
    rules = [
        r["Properties"]
        for r in resources_of_type(cfn, "AWS::Events::Rule").values()
        if any(t["Arn"] == {"Fn::GetAtt": ["ApprovalSweepFunction", "Arn"]} for t in r["Properties"]["Targets"])
    ]
    assert [r["ScheduleExpression"] for r in rules] == ["rate(15 minutes)"]
    (permission,) = [
        p["Properties"]
        for p in resources_of_type(cfn, "AWS::Lambda::Permission").values()
        if p["Properties"]["FunctionName"] == {"Ref": "ApprovalSweepFunction"}
    ]
    assert permission["Principal"] == "events.amazonaws.com"


def _log_group_of(cfn: dict[str, Any], function: str) -> dict[str, Any]:
    group = cfn["Resources"][f"{function}LogGroup"]["Properties"]
    assert group["LogGroupName"] == {"Fn::Sub": f"/aws/lambda/${{{function}}}"}
    assert group["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    return dict(group)


def test_turn_timing_relations(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    """A long turn's times fit inside each other: the synchronous part inside API Gateway's request, the
    handed-over part inside the worker's timeout, a message's visibility around the worker's retries."""
    from support_agent.config import Settings

    params = sam["Parameters"]
    sync, most, budget = params["SyncTurnSeconds"], params["TurnMaxSeconds"], params["ModelCallBudgetSeconds"]
    assert (sync["Type"], sync["Default"], sync["MinValue"], sync["MaxValue"]) == ("Number", 20, 1, 25)
    assert (most["Type"], most["Default"], most["MinValue"], most["MaxValue"]) == ("Number", 300, 30, 840)
    assert (budget["Type"], budget["Default"], budget["MinValue"]) == ("Number", 8, 1)
    chat = cfn["Resources"]["ChatFunction"]["Properties"]
    worker = cfn["Resources"]["TurnWorkerFunction"]["Properties"]
    queue = cfn["Resources"]["TurnQueue"]["Properties"]
    # The longest handed-over turn leaves the worker a minute to store its end; 900 s is Lambda's maximum.
    assert worker["Timeout"] == 900
    assert worker["Timeout"] >= most["MaxValue"] + 60
    # AWS: a queue feeding Lambda needs a visibility timeout of at least six times the function's.
    assert queue["VisibilityTimeout"] >= 6 * worker["Timeout"]
    # The synchronous part ends inside the chat function (29 s, under API Gateway's 30), a model call started
    # at its last moment (SyncTurnSeconds less the budget left) included.
    assert chat["Timeout"] == 29
    assert chat["Timeout"] > sync["MaxValue"]
    assert sync["Default"] + budget["Default"] <= chat["Timeout"]
    # The worker keeps its lease by renewing it: one lease is shorter than the worker may run.
    settings = Settings()
    assert settings.lease_seconds < worker["Timeout"]
    # The code's defaults are the template's (a function reading no variable behaves as deployed).
    assert (settings.sync_turn_seconds, settings.model_call_budget_seconds, settings.turn_max_seconds) == (
        sync["Default"],
        budget["Default"],
        most["Default"],
    )
    # Three failed deliveries, then the DLQ (the turn sweep ends those turns failed).
    assert queue["RedrivePolicy"] == {"deadLetterTargetArn": {"Fn::GetAtt": ["TurnDLQ", "Arn"]}, "maxReceiveCount": 3}
    env = chat["Environment"]["Variables"]
    assert {
        "TURN_QUEUE_URL": {"Ref": "TurnQueue"},
        "SYNC_TURN_SECONDS": {"Ref": "SyncTurnSeconds"},
        "MODEL_CALL_BUDGET_SECONDS": {"Ref": "ModelCallBudgetSeconds"},
        "TURN_MAX_SECONDS": {"Ref": "TurnMaxSeconds"},
    }.items() <= env.items()


def test_turn_worker_consumes_the_turn_queue(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    """The worker runs the chat function's loop: the same environment (less what only a hand-over needs), one
    turn per invocation from its own mapping, no alias or SnapStart, no route."""
    props = sam["Resources"]["TurnWorkerFunction"]["Properties"]
    assert (props["CodeUri"], props["Handler"]) == ("functions/turn_worker/", "app.handler")
    assert not {"AutoPublishAlias", "SnapStart", "Events"} & set(props)
    fn = cfn["Resources"]["TurnWorkerFunction"]["Properties"]
    chat = cfn["Resources"]["ChatFunction"]["Properties"]
    assert fn.get("MemorySize") == chat.get("MemorySize") == sam["Globals"]["Function"]["MemorySize"]
    env, chat_env = fn["Environment"]["Variables"], chat["Environment"]["Variables"]
    only_chat = {"TURN_QUEUE_URL", "SYNC_TURN_SECONDS", "POWERTOOLS_SERVICE_NAME", "RATINGS_PER_MINUTE"}
    assert {k: v for k, v in env.items() if k != "POWERTOOLS_SERVICE_NAME"} == {
        k: v for k, v in chat_env.items() if k not in only_chat
    }
    assert env["POWERTOOLS_SERVICE_NAME"] == "turn_worker"
    assert env["TURN_MAX_SECONDS"] == {"Ref": "TurnMaxSeconds"}
    mappings = [
        m["Properties"]
        for m in resources_of_type(cfn, "AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["EventSourceArn"] == {"Fn::GetAtt": ["TurnQueue", "Arn"]}
    ]
    assert len(mappings) == 1, "exactly one consumer of the TurnQueue"
    (mapping,) = mappings
    assert mapping["FunctionName"] == {"Ref": "TurnWorkerFunction"}
    assert (mapping["BatchSize"], mapping["FunctionResponseTypes"]) == (1, ["ReportBatchItemFailures"])
    queue, dlq = cfn["Resources"]["TurnQueue"]["Properties"], cfn["Resources"]["TurnDLQ"]["Properties"]
    assert queue["SqsManagedSseEnabled"] is True and dlq["SqsManagedSseEnabled"] is True
    assert dlq["MessageRetentionPeriod"] == 14 * 24 * 3600
    _log_group_of(cfn, "TurnWorkerFunction")
    # Only the chat function hands turns over and only the sweep sends them again.
    senders = {f for f, pairs in ALLOWED.items() if ("sqs:SendMessage", "TurnQueue") in pairs}
    assert senders == {"ChatFunction", "TurnSweepFunction"}


def test_turn_sweep_runs_every_minute_over_the_sparse_index(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    indexes = {
        g["IndexName"]: g for g in cfn["Resources"]["ConversationsTable"]["Properties"]["GlobalSecondaryIndexes"]
    }
    running = indexes["turns_running"]
    assert running["KeySchema"] == [
        {"AttributeName": "running", "KeyType": "HASH"},
        {"AttributeName": "lease_check_at", "KeyType": "RANGE"},
    ]
    assert running["Projection"] == {"ProjectionType": "ALL"}
    readers = {f for f, pairs in ALLOWED.items() if any(t.endswith("/index/turns_running") for _, t in pairs)}
    assert readers == {"TurnSweepFunction"}
    props = sam["Resources"]["TurnSweepFunction"]["Properties"]
    assert (props["CodeUri"], props["Handler"], props["Timeout"], props["MemorySize"]) == (
        "functions/turn_sweep/",
        "app.handler",
        60,
        256,
    )
    env = cfn["Resources"]["TurnSweepFunction"]["Properties"]["Environment"]["Variables"]
    assert {
        "TURN_QUEUE_URL": {"Ref": "TurnQueue"},
        "TURN_DLQ_URL": {"Ref": "TurnDLQ"},
        "CONVERSATIONS_TABLE": {"Ref": "ConversationsTable"},
        "POWERTOOLS_SERVICE_NAME": "turn_sweep",
    }.items() <= env.items()
    rules = [
        r["Properties"]
        for r in resources_of_type(cfn, "AWS::Events::Rule").values()
        if any(t["Arn"] == {"Fn::GetAtt": ["TurnSweepFunction", "Arn"]} for t in r["Properties"]["Targets"])
    ]
    assert [r["ScheduleExpression"] for r in rules] == ["rate(1 minute)"]
    _log_group_of(cfn, "TurnSweepFunction")


def test_payments_function_is_refund_flows_task(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    """PaymentsFunction: its own code, the layer (test_python_runtime_and_architecture), a timeout that
    holds Stripe's retries, its log group kept like the others', and only RefundFlow invokes it."""
    props = sam["Resources"]["PaymentsFunction"]["Properties"]
    assert (props["CodeUri"], props["Handler"]) == ("functions/payments/", "app.handler")
    assert (REPO_ROOT / props["CodeUri"] / "app.py").is_file()
    fn = cfn["Resources"]["PaymentsFunction"]["Properties"]
    # Every Stripe attempt of one call (connect + read timeouts, the backoff cap between them) fits in the
    # deadline the handler gives itself, which ends MARGIN_MS before Lambda's timeout to record the outcome.
    from support_agent.config import Settings

    margin_ms = load_handler_module("functions/payments/app.py").MARGIN_MS
    s = Settings()
    one_call = (s.stripe_max_retries + 1) * (s.stripe_connect_timeout + s.stripe_read_timeout + 4)
    assert fn["Timeout"] - margin_ms / 1000 >= one_call, (fn["Timeout"], margin_ms, one_call)
    env = fn["Environment"]["Variables"]
    assert env["POWERTOOLS_SERVICE_NAME"] == "payments"
    assert "REFUND_FLOW_ARN" not in env  # it cannot start a flow (nor may it: test_role_grants_...)
    group = cfn["Resources"]["PaymentsFunctionLogGroup"]["Properties"]
    assert group["LogGroupName"] == {"Fn::Sub": "/aws/lambda/${PaymentsFunction}"}
    assert group["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    invokers = {
        k
        for k, r in cfn["Resources"].items()
        if "lambda:InvokeFunction" in json.dumps(r) and "PaymentsFunction" in json.dumps(r) and k != "PaymentsFunction"
    }
    assert invokers == {_role_id(cfn, "RefundFlow")}
    assert not [
        e for e in props.get("Events", {}).values() if e.get("Type") in ("HttpApi", "Api", "Schedule", "SQS")
    ], "the refund step is reached only through RefundFlow"


def load_handler_module(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("payments_app_under_test", REPO_ROOT / path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_outputs(sam: dict[str, Any]) -> None:
    assert {
        "ApiUrl",
        "ConversationsTableName",
        "CustomerDataTableName",
        "ApprovalsTableName",
        "AuditTableName",
        "ApprovalQueueUrl",
        "ApprovalDLQUrl",
    } <= set(sam["Outputs"])


# ------------------------------------------------------------------ what the template scanner asks (checkov)

# Principals whose invocations are asynchronous: Lambda retries a failed event twice, then drops it without a DLQ.
ASYNC_PRINCIPALS = {"events.amazonaws.com", "scheduler.amazonaws.com", "sns.amazonaws.com", "s3.amazonaws.com"}
SCHEDULED = (
    "TurnSweepFunction",
    "ApprovalSweepFunction",
    "PaymentSweepFunction",
    "ReconcileFunction",
    "OutcomeSweepFunction",
    "DailyRollupFunction",
)


def test_every_asynchronously_invoked_function_keeps_the_runs_it_gave_up_on(cfn: dict[str, Any]) -> None:
    """Each function invoked asynchronously has a dead-letter queue (encrypted, kept 14 days) and runs one at a time;
    none other has one (the rest are invoked synchronously: the API, queue and stream mappings, RefundFlow)."""
    invoked = {
        p["Properties"]["FunctionName"]["Ref"]
        for p in resources_of_type(cfn, "AWS::Lambda::Permission").values()
        if p["Properties"]["Principal"] in ASYNC_PRINCIPALS
    }
    assert invoked == set(SCHEDULED)
    functions = resources_of_type(cfn, "AWS::Lambda::Function")
    assert {k for k, f in functions.items() if "DeadLetterConfig" in f["Properties"]} == invoked
    for function_id in invoked:
        props = functions[function_id]["Properties"]
        assert props["DeadLetterConfig"] == {"TargetArn": {"Fn::GetAtt": ["ScheduledRunsDLQ", "Arn"]}}
        assert props["ReservedConcurrentExecutions"] == 1  # a run still going is not doubled by the next
        assert SCHEDULED_RUN_LOST in ALLOWED[function_id]
    dlq = cfn["Resources"]["ScheduledRunsDLQ"]["Properties"]
    assert dlq == {"MessageRetentionPeriod": 14 * 24 * 3600, "SqsManagedSseEnabled": True}


def test_reserved_concurrency_caps_what_could_starve_the_rest(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    """Capped: the long-polled feed, the customers' assistants (/mcp), the public webhook, one run of each schedule.
    Reservations come out of the account's limit (AWS keeps 100 unreserved): their total stays modest."""
    functions = resources_of_type(cfn, "AWS::Lambda::Function")
    reserved = {
        k: f["Properties"]["ReservedConcurrentExecutions"]
        for k, f in functions.items()
        if "ReservedConcurrentExecutions" in f["Properties"]
    }
    assert reserved == {
        "EventsFunction": {"Ref": "EventsReservedConcurrency"},
        "McpFunction": {"Ref": "McpReservedConcurrency"},
        "PaymentsWebhookFunction": 10,
        **{f: 1 for f in SCHEDULED},
    }
    params = sam["Parameters"]
    total = sum(params[v["Ref"]]["Default"] if isinstance(v, dict) else v for v in reserved.values())
    assert total <= 50, total


def test_api_access_log(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    """One JSON line per request into a log group kept LogRetentionDays: no body, query string, path or
    authorization header (the route's template and the status say what happened)."""
    settings = sam["Resources"]["HttpApi"]["Properties"]["AccessLogSettings"]
    assert settings["DestinationArn"] == {"Fn::GetAtt": ["HttpApiAccessLogGroup", "Arn"]}
    fields = json.loads(settings["Format"])
    assert fields["requestId"] == "$context.requestId"  # API Gateway refuses a format without it
    assert {"ip", "routeKey", "status", "integrationError"} <= set(fields)
    leaky = ("authorization", "body", "querystring", "path", "header")
    assert not [v for v in fields.values() if any(word in v.lower() for word in leaky)], fields
    (stage,) = (s for k, s in resources_of_type(cfn, "AWS::ApiGatewayV2::Stage").items() if k != "WebSocketStage")
    assert stage["Properties"]["AccessLogSettings"] == settings
    group = cfn["Resources"]["HttpApiAccessLogGroup"]["Properties"]
    assert group["RetentionInDays"] == {"Ref": "LogRetentionDays"}


def test_every_log_group_expires_and_every_queue_is_encrypted(cfn: dict[str, Any]) -> None:
    """What the scanner's skips of CKV_AWS_158 and CKV_AWS_27 rely on: logs kept LogRetentionDays, every queue
    encrypted at rest by SQS."""
    groups = resources_of_type(cfn, "AWS::Logs::LogGroup")
    assert len(groups) == len(resources_of_type(cfn, "AWS::Lambda::Function")) + 2  # and the two APIs' access logs
    assert all(g["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"} for g in groups.values())
    queues = resources_of_type(cfn, "AWS::SQS::Queue")
    assert queues and all(q["Properties"]["SqsManagedSseEnabled"] is True for q in queues.values())


def _operations_section(title: str) -> str:
    text = (REPO_ROOT / "docs/OPERATIONS.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_every_scanner_skip_says_why_and_is_listed_in_operations(sam: dict[str, Any]) -> None:
    """checkov reads a skip from the resource's Metadata: each names one check once, with a reason (a sentence, not a
    label), and docs/OPERATIONS.md's table of skips lists every check skipped and no other."""
    skips = {
        k: r["Metadata"]["checkov"]["skip"] for k, r in sam["Resources"].items() if "checkov" in r.get("Metadata", {})
    }
    assert skips
    skipped: set[str] = set()
    for resource, entries in skips.items():
        ids = [e["id"] for e in entries]
        assert len(ids) == len(set(ids)), resource
        for entry in entries:
            assert set(entry) == {"id", "comment"} and re.fullmatch(r"CKV_AWS_\d+", entry["id"]), (resource, entry)
            assert len(entry["comment"]) >= 60 and entry["comment"].endswith((".", ")")), (resource, entry)
            skipped.add(entry["id"])
    table = re.findall(r"^\| `(CKV_AWS_\d+)`", _operations_section("The template scanner"), re.MULTILINE)
    assert set(table) == skipped


# ------------------------------------------------------------------ least privilege (rules 6, 7)

# ConditionCheckItem on the Conversations table only: the lease fence every money write of a turn carries
# (`ConversationStore.lease_check`); on the other tables no transaction of the chat function has one.
_DDB_RW = ("GetItem", "Query", "PutItem", "UpdateItem")

# Outside MCP servers' service credentials: the secrets under the stack's name's mcp/ prefix (a wildcard the
# operator fills, named in MCP_SERVERS), only while McpServers is set (checked below).
MCP_SECRETS_ARN = "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:${AWS::StackName}/mcp/*"
MCP_SECRETS = "secret:<stack>/mcp/*"

# The support policy's SSM parameter (docs/POLICY.md), by its ARN built from the parameter's name (``Ref`` is the
# name, ``/<stack>/support-policy``): its newest version and its history, on that one parameter only.
POLICY_PARAMETER_ARN = "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter${SupportPolicyParameter}"
POLICY_PARAMETER = "SupportPolicyParameter"

# Posting to the WebSocket API's connections (@connections), on its own stage only.
CONNECTIONS_ARN = (
    "arn:${AWS::Partition}:execute-api:${AWS::Region}:${AWS::AccountId}:${WebSocketApi}/${Stage}/POST/@connections/*"
)
CONNECTIONS = "WebSocketApi/<stage>/POST/@connections"
# A turn's text deltas (sockets/deltas.py): the conversation's subscribed connections, and posting to them.
REPLY_DELTAS: set[Pair] = {
    ("dynamodb:Query", "ConnectionsTable/index/subscribers"),
    ("execute-api:ManageConnections", CONNECTIONS),
}
POLICY_READS: set[Pair] = {(f"ssm:{a}", POLICY_PARAMETER) for a in ("GetParameter", "GetParameterHistory")}
# The functions whose tools decide actions under the policy (ChatFunction also serves the confirm/decline routes).
POLICY_READERS = {"ChatFunction", "TurnWorkerFunction", "McpFunction"}

# A scheduled (asynchronously invoked) function's run that failed its retries: the Lambda service puts its event on
# ScheduledRunsDLQ under the function's role (SAM's DeadLetterQueue adds the statement); no code sends there.
SCHEDULED_RUN_LOST: Pair = ("sqs:SendMessage", "ScheduledRunsDLQ")

ALLOWED: dict[str, set[Pair]] = {
    "ChatFunction": {
        *{(f"dynamodb:{a}", "ConversationsTable") for a in _DDB_RW},
        ("dynamodb:ConditionCheckItem", "ConversationsTable"),
        ("dynamodb:Query", "ConversationsTable/index/by_customer"),
        *{(f"dynamodb:{a}", "CustomerDataTable") for a in _DDB_RW},
        *{(f"dynamodb:{a}", "ApprovalsTable") for a in ("GetItem", "PutItem")},
        ("dynamodb:PutItem", "AuditTable"),
        ("sqs:SendMessage", "ApprovalQueue"),
        ("sqs:SendMessage", "TurnQueue"),  # a turn longer than SyncTurnSeconds is handed over
        ("secretsmanager:GetSecretValue", MCP_SECRETS),
        # Only when the parameter is set (Fn::If on HasAnthropicApiKeySecret, checked below).
        ("secretsmanager:GetSecretValue", "param:AnthropicApiKeySecretArn"),
        # Only when StripeApiKeySecretArn is set (Fn::If on HasStripeApiKeySecret, checked below).
        ("secretsmanager:GetSecretValue", "param:StripeApiKeySecretArn"),
        # Only when LlmProvider is bedrock: the profile and the models it routes to (checked below).
        ("bedrock:InvokeModel", "param:BedrockInferenceProfileArn"),
        ("bedrock:InvokeModel", "param:BedrockModelArns"),
        *POLICY_READS,
        *REPLY_DELTAS,
    },
    # The rest of a handed-over turn: the chat function's loop and tools, so its grants, less sending to
    # TurnQueue and the by_customer index (only the conversation list reads it), plus what its own event
    # source mapping polls with (on TurnQueue only); its ConditionCheck is the money writes' lease fence and
    # the take-over's check of the turn record.
    "TurnWorkerFunction": {
        *{(f"dynamodb:{a}", "ConversationsTable") for a in _DDB_RW},
        ("dynamodb:ConditionCheckItem", "ConversationsTable"),
        *{(f"dynamodb:{a}", "CustomerDataTable") for a in _DDB_RW},
        *{(f"dynamodb:{a}", "ApprovalsTable") for a in ("GetItem", "PutItem")},
        ("dynamodb:PutItem", "AuditTable"),
        ("sqs:SendMessage", "ApprovalQueue"),
        *{(f"sqs:{a}", "TurnQueue") for a in ("ReceiveMessage", "DeleteMessage", "GetQueueAttributes")},
        ("secretsmanager:GetSecretValue", MCP_SECRETS),
        ("secretsmanager:GetSecretValue", "param:AnthropicApiKeySecretArn"),
        ("secretsmanager:GetSecretValue", "param:StripeApiKeySecretArn"),
        ("bedrock:InvokeModel", "param:BedrockInferenceProfileArn"),
        ("bedrock:InvokeModel", "param:BedrockModelArns"),
        *POLICY_READS,
        *REPLY_DELTAS,
    },
    # The turn sweep: handed-over turns through the sparse index (no Scan), the conversation's header and the
    # turn record (GetItem, conditional UpdateItem), the turn sent again, TurnDLQ's turns read and deleted. No
    # PutItem but its `turn.failed` notification's (LeadingKeys `note#*`), no Query on the table itself, nothing
    # on customer data, approvals or audit.
    "TurnSweepFunction": {
        ("dynamodb:Query", "ConversationsTable/index/turns_running"),
        ("dynamodb:GetItem", "ConversationsTable"),
        ("dynamodb:UpdateItem", "ConversationsTable"),
        ("dynamodb:PutItem", "ConversationsTable"),
        ("sqs:SendMessage", "TurnQueue"),
        ("sqs:ReceiveMessage", "TurnDLQ"),
        ("sqs:DeleteMessage", "TurnDLQ"),
        SCHEDULED_RUN_LOST,
    },
    # The MCP server: the registry's tools for the customer's own assistant, so the chat function's tool grants
    # (orders, refunds, approvals, the approval queue, audit rows, Stripe's key when set), its own rate counter,
    # audit stream head and hand-off in the Conversations table (read and update; no Query: it lists nothing), and
    # none of the turn's: no TurnQueue, no model, no LLM secrets.
    "McpFunction": {
        *{(f"dynamodb:{a}", "ConversationsTable") for a in ("GetItem", "UpdateItem")},
        *{(f"dynamodb:{a}", "CustomerDataTable") for a in _DDB_RW},
        *{(f"dynamodb:{a}", "ApprovalsTable") for a in ("GetItem", "PutItem")},
        ("dynamodb:PutItem", "AuditTable"),
        ("sqs:SendMessage", "ApprovalQueue"),
        ("secretsmanager:GetSecretValue", "param:StripeApiKeySecretArn"),
        *POLICY_READS,
    },
    # The event feed reads the conversation (header, messages, turn records, notifications), counts the reader's
    # polls and holds a waiting poll's slot (UpdateItem on `rate#` and `poll#` items only, LeadingKeys); it writes
    # nothing else, anywhere. A staff member's feed reads the hand-off first (do they hold it?).
    "EventsFunction": {
        ("dynamodb:GetItem", "ConversationsTable"),
        ("dynamodb:Query", "ConversationsTable"),
        ("dynamodb:UpdateItem", "ConversationsTable"),
        ("dynamodb:GetItem", "ApprovalsTable"),
        ("dynamodb:PutItem", "ConnectionsTable"),  # POST /api/ws-ticket: `ticket#` items only (KEY_PREFIXES)
    },
    # The WebSocket's routes: its own table's items (no DeleteItem, no index: pushing reads `subscribers`), the
    # conversation's header (`conv_` only), a person's hand-off, and posting to this API's stage's connections.
    "SocketFunction": {
        *{(f"dynamodb:{a}", "ConnectionsTable") for a in _DDB_RW},
        ("dynamodb:GetItem", "ConversationsTable"),
        ("dynamodb:Query", "ConversationsTable"),  # a subscribe's backlog: the feed (KEY_PREFIXES)
        ("dynamodb:GetItem", "ApprovalsTable"),
        ("execute-api:ManageConnections", CONNECTIONS),
    },
    # Stored events pushed: the Conversations stream read, the feed's reads (KEY_PREFIXES), a conversation's
    # subscribers (the index), a subscription's cursor claimed and a gone connection ended (`conn#`, `owner#`
    # UpdateItem; its subscriptions found by Query), posts to this API's stage, a batch given up on described.
    "SocketPushFunction": {
        *{
            (f"dynamodb:{a}", "ConversationsTable.StreamArn")
            for a in ("DescribeStream", "GetShardIterator", "GetRecords")
        },
        ("dynamodb:GetItem", "ConversationsTable"),
        ("dynamodb:Query", "ConversationsTable"),
        ("dynamodb:Query", "ConnectionsTable/index/subscribers"),
        ("dynamodb:UpdateItem", "ConnectionsTable"),
        ("dynamodb:Query", "ConnectionsTable"),
        ("execute-api:ManageConnections", CONNECTIONS),
        ("sqs:SendMessage", "SocketPushDLQ"),
    },
    # Claim-then-publish; nothing on CustomerData (the notifier cannot write orders). The SQS
    # actions are what its own event source mapping polls with, on the ApprovalQueue only.
    "ApprovalNotifierFunction": {
        ("dynamodb:GetItem", "ApprovalsTable"),
        ("dynamodb:UpdateItem", "ApprovalsTable"),
        ("sns:Publish", "ref:LeadsTopic"),
        *{(f"sqs:{a}", "ApprovalQueue") for a in ("ReceiveMessage", "DeleteMessage", "GetQueueAttributes")},
    },
    # Expire (release: approval + order + audit row in one transaction), re-enqueue, and start the
    # RefundFlow of an APPROVED approval whose StartExecution failed (same name: never twice).
    "ApprovalSweepFunction": {
        ("dynamodb:Query", "ApprovalsTable/index/by_status"),
        ("dynamodb:GetItem", "ApprovalsTable"),
        ("dynamodb:UpdateItem", "ApprovalsTable"),
        ("dynamodb:UpdateItem", "CustomerDataTable"),
        ("dynamodb:PutItem", "AuditTable"),
        ("sqs:SendMessage", "ApprovalQueue"),
        ("states:StartExecution", "ref:RefundFlow"),
        # Its decisions announced in the conversation's feed: `note#` items only (LeadingKeys, checked in
        # tests/unit/test_notifications_iam.py).
        *{(f"dynamodb:{a}", "ConversationsTable") for a in ("GetItem", "PutItem", "UpdateItem")},
        SCHEDULED_RUN_LOST,
    },
    # The outcome sweep: the due headers (no Scan), a conversation's facts (header, messages, turns, ratings, its
    # refund rows and proposals, approvals and hand-offs), the outcome item put, the header's follow-up.
    "OutcomeSweepFunction": {
        ("dynamodb:Query", "ConversationsTable/index/outcomes_due"),
        ("dynamodb:GetItem", "ConversationsTable"),
        ("dynamodb:Query", "ConversationsTable"),
        ("dynamodb:PutItem", "ConversationsTable"),
        ("dynamodb:UpdateItem", "ConversationsTable"),
        ("dynamodb:Query", "CustomerDataTable"),
        ("dynamodb:GetItem", "ApprovalsTable"),
        SCHEDULED_RUN_LOST,
    },
    # The daily rollup: three time-ordered indexes read (no Scan), its own day items updated.
    "DailyRollupFunction": {
        ("dynamodb:Query", "ConversationsTable/index/outcomes_by_day"),
        ("dynamodb:Query", "CustomerDataTable/index/ledger_by_created"),
        ("dynamodb:Query", "ApprovalsTable/index/by_created"),
        ("dynamodb:UpdateItem", "ConversationsTable"),
        SCHEDULED_RUN_LOST,
    },
    # The payment sweep: the unsettled index (no Scan), the row re-read and settled with the order's money,
    # an approved refund's approval SETTLING -> REFUNDED | FAILED, audit rows. No PutItem on CustomerData
    # (it never creates a row), no Query on the table itself, no StartExecution.
    "PaymentSweepFunction": {
        ("dynamodb:Query", "CustomerDataTable/index/unsettled"),
        ("dynamodb:GetItem", "CustomerDataTable"),
        ("dynamodb:UpdateItem", "CustomerDataTable"),
        ("dynamodb:UpdateItem", "ApprovalsTable"),
        ("dynamodb:PutItem", "AuditTable"),
        # Its decisions announced in the conversation's feed: `note#` items only (LeadingKeys, checked in
        # tests/unit/test_notifications_iam.py).
        *{(f"dynamodb:{a}", "ConversationsTable") for a in ("GetItem", "PutItem", "UpdateItem")},
        # Only when StripeApiKeySecretArn is set (Fn::If on HasStripeApiKeySecret, checked below).
        ("secretsmanager:GetSecretValue", "param:StripeApiKeySecretArn"),
        SCHEDULED_RUN_LOST,
    },
    # The audit watcher reads the audit table's stream (what its event source mapping polls with) and
    # describes a batch it gave up on to its on-failure queue. No table access of any kind.
    "AuditWatcherFunction": {
        *{(f"dynamodb:{a}", "AuditTable.StreamArn") for a in ("DescribeStream", "GetShardIterator", "GetRecords")},
        ("sqs:SendMessage", "AuditWatcherDLQ"),
    },
    # The seal function reads the audit table's stream and puts heads (reading one back when a replay's put is
    # refused, 412): no listing, no delete, no retention or configuration change, no table access.
    "AuditSealFunction": {
        *{(f"dynamodb:{a}", "AuditTable.StreamArn") for a in ("DescribeStream", "GetShardIterator", "GetRecords")},
        ("s3:PutObject", "AuditSealBucket/heads/*"),
        ("s3:GetObject", "AuditSealBucket/heads/*"),
        ("sqs:SendMessage", "AuditSealDLQ"),
    },
    # Reconciliation reads only: ledger rows by creation time (the index, no Scan), a row by its key, the
    # Stripe key. No write of any kind.
    "ReconcileFunction": {
        ("dynamodb:Query", "CustomerDataTable/index/ledger_by_created"),
        ("dynamodb:GetItem", "CustomerDataTable"),
        # Only when StripeApiKeySecretArn is set (Fn::If on HasStripeApiKeySecret, checked below).
        ("secretsmanager:GetSecretValue", "param:StripeApiKeySecretArn"),
        SCHEDULED_RUN_LOST,
    },
    # The lead's API: conditional decisions (approval + audit row, plus the order when money is
    # released), hand-off close (ticket + conversation header), audit reads, and starting RefundFlow.
    # It cannot write refund rows or touch orders beyond releasing a reservation.
    "ApprovalsFunction": {
        ("dynamodb:GetItem", "ApprovalsTable"),
        ("dynamodb:UpdateItem", "ApprovalsTable"),
        ("dynamodb:PutItem", "ApprovalsTable"),  # a cancellation's refund rejected: the hand-off it opens
        ("dynamodb:Query", "ApprovalsTable/index/by_status"),
        ("dynamodb:Query", "ApprovalsTable/index/by_created"),
        ("dynamodb:UpdateItem", "CustomerDataTable"),
        ("dynamodb:GetItem", "CustomerDataTable"),  # audit verification: a refund key's head (its ledger row)
        ("dynamodb:Query", "CustomerDataTable"),  # a hand-off's brief and transcript: its conversation's refunds
        # Hand-off close, and erasure: find a customer's conversations, tombstone their messages
        # with UpdateItem under the turn lease (no DeleteItem anywhere: docs/RETENTION.md).
        ("dynamodb:UpdateItem", "ConversationsTable"),
        ("dynamodb:Query", "ConversationsTable"),
        ("dynamodb:Query", "ConversationsTable/index/by_customer"),
        ("dynamodb:PutItem", "AuditTable"),
        ("dynamodb:Query", "AuditTable"),
        ("dynamodb:Query", "AuditTable/index/by_customer"),
        ("states:StartExecution", "ref:RefundFlow"),
        # Its decisions announced in the conversation's feed: `note#` items only (LeadingKeys, checked in
        # tests/unit/test_notifications_iam.py); UpdateItem is granted above as well. A person's reply: the header
        # read and the message put (`conv_`), its Idempotency-Key (`idem#handoff#`): KEY_PREFIXES below.
        ("dynamodb:GetItem", "ConversationsTable"),
        ("dynamodb:PutItem", "ConversationsTable"),
        # Audit verification: the latest sealed head (its versions listed under the heads/ prefix, one read).
        ("s3:ListBucketVersions", "AuditSealBucket"),
        ("s3:GetObjectVersion", "AuditSealBucket/heads/*"),
        # Only when StripeApiKeySecretArn is set (Fn::If on HasStripeApiKeySecret, checked below).
        ("secretsmanager:GetSecretValue", "param:StripeApiKeySecretArn"),
    },
    # The state machine's role: its one task invokes the refund step, nothing else (no DynamoDB).
    "RefundFlow": {
        ("lambda:InvokeFunction", "PaymentsFunction"),
    },
    # RefundFlow's refund step: read the approval and the ledger row (and the order's payment intent),
    # then transactions authorised per item: APPROVED -> SETTLING with the REQUESTED row, the audit row
    # and the order's reservation checked; the outcome moving the row, the order and the approval. No
    # Query, no DeleteItem, no StartExecution.
    "PaymentsFunction": {
        ("dynamodb:GetItem", "ApprovalsTable"),
        ("dynamodb:UpdateItem", "ApprovalsTable"),
        ("dynamodb:GetItem", "CustomerDataTable"),
        ("dynamodb:PutItem", "CustomerDataTable"),
        ("dynamodb:UpdateItem", "CustomerDataTable"),
        ("dynamodb:ConditionCheckItem", "CustomerDataTable"),
        ("dynamodb:PutItem", "AuditTable"),
        # Its decisions announced in the conversation's feed: `note#` items only (LeadingKeys, checked in
        # tests/unit/test_notifications_iam.py).
        *{(f"dynamodb:{a}", "ConversationsTable") for a in ("GetItem", "PutItem", "UpdateItem")},
        # Only when StripeApiKeySecretArn is set (Fn::If on HasStripeApiKeySecret, checked below).
        ("secretsmanager:GetSecretValue", "param:StripeApiKeySecretArn"),
    },
    # Records what a signed event says: the row, the order, the dedupe item, the approval, the audit row.
    # Never calls Stripe (no API key); the webhook secret only when StripeWebhookSecretArn is set.
    "PaymentsWebhookFunction": {
        ("dynamodb:GetItem", "CustomerDataTable"),
        ("dynamodb:PutItem", "CustomerDataTable"),
        ("dynamodb:UpdateItem", "CustomerDataTable"),
        ("dynamodb:UpdateItem", "ApprovalsTable"),
        ("dynamodb:PutItem", "AuditTable"),
        # Its decisions announced in the conversation's feed: `note#` items only (LeadingKeys, checked in
        # tests/unit/test_notifications_iam.py).
        *{(f"dynamodb:{a}", "ConversationsTable") for a in ("GetItem", "PutItem", "UpdateItem")},
        ("secretsmanager:GetSecretValue", "param:StripeWebhookSecretArn"),
    },
}
# What SAM attaches for logs and Tracing: Active; nothing else may be attached.
ALLOWED_MANAGED = {
    "RefundFlow": set(),  # no logging or tracing configuration: nothing attached
    "ChatFunction": {
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    },
    "ApprovalsFunction": {
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    },
    # No AWSLambdaSQSQueueExecutionRole (sqs on Resource "*"): the mapping is declared by hand.
    "ApprovalNotifierFunction": {
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    },
    "ApprovalSweepFunction": {
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    },
    "PaymentsFunction": {
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    },
    "PaymentSweepFunction": {
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    },
    "OutcomeSweepFunction": {
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    },
    "DailyRollupFunction": {
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    },
    "ReconcileFunction": {
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    },
    # No AWSLambdaDynamoDBExecutionRole (stream actions on Resource "*"): the mapping is declared by hand.
    "AuditWatcherFunction": {
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    },
    "PaymentsWebhookFunction": {
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    },
    "AuditSealFunction": {
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    },
    # No AWSLambdaSQSQueueExecutionRole (sqs on Resource "*"): the mapping is declared by hand.
    "TurnWorkerFunction": {
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    },
    "TurnSweepFunction": {
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    },
    "EventsFunction": {
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    },
    "McpFunction": {
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    },
    "SocketFunction": {
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    },
    # No AWSLambdaDynamoDBExecutionRole (stream actions on Resource "*"): the mapping is declared by hand.
    "SocketPushFunction": {
        "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
        "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
    },
}


def _known_iam_actions() -> dict[str, set[str]]:
    """service prefix -> lower-case action names, from cfn-lint's copy of the IAM action reference."""
    path = Path(cfnlint.__file__).parent / "data" / "AdditionalSpecs" / "Policies.json"
    data = json.loads(path.read_text())
    return {service: {a.lower() for a in spec["Actions"]} for service, spec in data.items()}


KNOWN_ACTIONS = _known_iam_actions()


def is_iam_action(action: str) -> bool:
    service, _, name = action.partition(":")
    return name.lower() in KNOWN_ACTIONS.get(service, set())


def _target(resource: Any, parameters: set[str]) -> str:
    """A statement's Resource as a logical target, or fail on a form this evaluator doesn't know."""
    if isinstance(resource, str):
        return resource
    if set(resource) == {"Fn::GetAtt"} and resource["Fn::GetAtt"][1] == "Arn":
        return str(resource["Fn::GetAtt"][0])
    if set(resource) == {"Fn::GetAtt"} and resource["Fn::GetAtt"][1] == "StreamArn":
        return f"{resource['Fn::GetAtt'][0]}.StreamArn"
    if set(resource) == {"Ref"}:
        name = resource["Ref"]
        return f"param:{name}" if name in parameters else f"ref:{name}"
    if set(resource) == {"Fn::Sub"} and isinstance(resource["Fn::Sub"], str):
        m = re.fullmatch(r"\$\{(\w+)\.Arn\}(/.*)?", resource["Fn::Sub"])
        if m:
            return m.group(1) + (m.group(2) or "")
        if resource["Fn::Sub"] == MCP_SECRETS_ARN:
            return MCP_SECRETS
        if resource["Fn::Sub"] == POLICY_PARAMETER_ARN:
            return POLICY_PARAMETER
        if resource["Fn::Sub"] == CONNECTIONS_ARN:
            return CONNECTIONS
    raise AssertionError(f"resource form the IAM evaluator does not understand: {resource!r}")


def _statements(node: Any) -> Iterator[dict[str, Any]]:
    """Statements of a Statement list, taking BOTH branches of Fn::If (the widest grant)."""
    if isinstance(node, list):
        for item in node:
            yield from _statements(item)
    elif isinstance(node, dict) and set(node) == {"Fn::If"}:
        _, if_true, if_false = node["Fn::If"]
        yield from _statements(if_true)
        yield from _statements(if_false)
    elif isinstance(node, dict) and node != {"Ref": "AWS::NoValue"}:
        yield node


def _role_documents(cfn: dict[str, Any], role_id: str) -> Iterator[dict[str, Any]]:
    role = cfn["Resources"][role_id]["Properties"]
    for policy in role.get("Policies", []):
        yield policy["PolicyDocument"]
    for resource in cfn["Resources"].values():  # stand-alone policies attached to the role
        is_policy = resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
        if is_policy and {"Ref": role_id} in resource["Properties"].get("Roles", []):
            yield resource["Properties"]["PolicyDocument"]


def _role_id(cfn: dict[str, Any], logical_id: str) -> str:
    """The role of a function (``Role``) or a state machine (``RoleArn``): ``Fn::GetAtt <role>.Arn``."""
    props = cfn["Resources"][logical_id]["Properties"]
    return str((props.get("Role") or props["RoleArn"])["Fn::GetAtt"][0])


def granted_pairs(cfn: dict[str, Any], function_id: str) -> set[Pair]:
    """Every (action, target) the function's role allows, Fn::If expanded to both branches."""
    role_id = _role_id(cfn, function_id)
    parameters = set(cfn.get("Parameters", {}))
    pairs: set[Pair] = set()
    for document in _role_documents(cfn, role_id):
        for statement in _statements(document["Statement"]):
            assert statement["Effect"] in ("Allow", "Deny")
            assert not {"NotAction", "NotResource", "NotPrincipal"} & set(statement), statement
            if statement["Effect"] == "Deny":
                continue
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            targets = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            pairs |= {(a, _target(r, parameters)) for a in actions for r in targets}
    return pairs


def _function_ids(cfn: dict[str, Any]) -> list[str]:
    """Everything that runs with a role of its own: functions and state machines."""
    types = ("AWS::Lambda::Function", "AWS::StepFunctions::StateMachine")
    return sorted(k for t in types for k in resources_of_type(cfn, t))


def test_every_function_has_an_allowed_set(cfn: dict[str, Any]) -> None:
    assert _function_ids(cfn) == sorted(ALLOWED)


@pytest.mark.parametrize("function_id", sorted(ALLOWED))
def test_role_grants_exactly_the_allowed_pairs(cfn: dict[str, Any], function_id: str) -> None:
    granted = granted_pairs(cfn, function_id)
    assert granted - ALLOWED[function_id] == set(), "granted beyond the allowed set"
    assert ALLOWED[function_id] - granted == set(), "allowed set names pairs the role lacks"


@pytest.mark.parametrize("function_id", sorted(ALLOWED))
def test_role_trust_and_managed_policies(cfn: dict[str, Any], function_id: str) -> None:
    role = cfn["Resources"][_role_id(cfn, function_id)]["Properties"]
    assert set(role.get("ManagedPolicyArns", [])) == ALLOWED_MANAGED[function_id]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Effect"] == "Allow"
    is_state_machine = cfn["Resources"][function_id]["Type"] == "AWS::StepFunctions::StateMachine"
    service = "states.amazonaws.com" if is_state_machine else "lambda.amazonaws.com"
    assert trust["Principal"] == {"Service": [service]}
    assert trust["Action"] == ["sts:AssumeRole"]


def test_role_statements_have_a_policy_version(cfn: dict[str, Any]) -> None:
    for function_id in _function_ids(cfn):
        for document in _role_documents(cfn, _role_id(cfn, function_id)):
            assert document["Version"] == "2012-10-17"


@pytest.mark.parametrize("function_id", sorted(ALLOWED))
def test_forbidden_grants(cfn: dict[str, Any], function_id: str) -> None:
    granted = granted_pairs(cfn, function_id)
    for action, target in granted:
        # The wildcards: the sealed heads' key prefix in the seal bucket, the MCP credentials' name prefix.
        assert "*" not in action and "*" not in target.removesuffix("/heads/*").removesuffix("/mcp/*"), (action, target)
        if target == MCP_SECRETS:
            assert action == "secretsmanager:GetSecretValue"
        if action.startswith("ssm:") or target == POLICY_PARAMETER:  # the policy: read, never written
            assert (action, target) in POLICY_READS, (action, target)
        if target.startswith("AuditSealBucket"):  # sealed heads: put (the seal function) or read, nothing else
            assert action in ("s3:PutObject", "s3:GetObject", "s3:GetObjectVersion", "s3:ListBucketVersions"), (
                action,
                target,
            )
        assert is_iam_action(action), f"{action} is not an IAM action"
        assert action not in {"dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "dynamodb:TransactWriteItems"}
        if target == "AuditTable.StreamArn":  # the table's change stream: read it, nothing else
            assert action in ("dynamodb:DescribeStream", "dynamodb:GetShardIterator", "dynamodb:GetRecords")
        elif target.startswith("AuditTable"):  # append-only (rule 6): write PutItem, read Query, nothing else
            assert action in ("dynamodb:PutItem", "dynamodb:Query"), (action, target)
    for forbidden in ("UpdateItem", "DeleteItem", "BatchWriteItem"):
        assert (f"dynamodb:{forbidden}", "AuditTable") not in granted


# ------------------------------------------------------------------ item-level least privilege (dynamodb:LeadingKeys)

# The Conversations table holds every kind of item, each under a partition-key prefix of its own: a conversation's
# header and messages under its id (`conv_…`, ids.py), turn records `turn#` and idempotency keys `idem#`
# (store/turns.py), notifications `note#` (store/notifications.py), rate counters `rate#` (store/ratelimit.py:
# `rate#reads#…` for reads, `rate#mcp#…` for MCP calls), the MCP holder `mcp#` (mcp/our_tools.py, store/handoffs.py),
# the event feed's waiting slots `poll#` (store/polls.py).
# A role whose code uses only some of them holds each of these actions on the table only under
# `ForAllValues:StringLike` `dynamodb:LeadingKeys` with exactly the prefixes below (each followed by `*`), never
# table-wide. The runtime test checks the keys the code really used against the same declaration
# (tests/reliability/test_least_privilege_runtime.py). The functions not named here use every family (the chat
# loop, the worker) or none (they hold no item action on the table).
KEY_PREFIXES: dict[str, dict[str, dict[str, set[str]]]] = {
    # Its customer's holder (audit head, open hand-off) and its MCP rate counter; never a conversation's items.
    "McpFunction": {
        "ConversationsTable": {"dynamodb:GetItem": {"mcp#"}, "dynamodb:UpdateItem": {"mcp#", "rate#mcp#"}},
    },
    # The header (is the lease held?), the turn record and the notification counter read; the turn record and the
    # counter updated; the `turn.failed` notification put.
    "TurnSweepFunction": {
        "ConversationsTable": {
            "dynamodb:GetItem": {"conv_", "turn#", "note#"},
            "dynamodb:UpdateItem": {"turn#", "note#"},
            "dynamodb:PutItem": {"note#"},
        },
    },
    # A conversation's facts read (header, messages, turn records, ratings, its outcome), the outcome put, the
    # header's follow-up (outcomes/store.py).
    "OutcomeSweepFunction": {
        "ConversationsTable": {
            "dynamodb:GetItem": {"conv_", "turn#", "rating#", "outcome#"},
            "dynamodb:Query": {"conv_", "turn#", "rating#", "outcome#"},
            "dynamodb:PutItem": {"outcome#"},
            "dynamodb:UpdateItem": {"conv_"},
        },
    },
    # Its day items only (`rollup#daily`, reports/store.py).
    "DailyRollupFunction": {"ConversationsTable": {"dynamodb:UpdateItem": {"rollup#"}}},
    # The reader's counter (`rate#reads#<customer>#<minute>`) and its waiting slots (`poll#<customer>`, store/polls.py).
    # And a new WebSocket ticket (`ticket#<sha256>`, sockets/connections.py) put.
    "EventsFunction": {
        "ConversationsTable": {"dynamodb:UpdateItem": {"rate#reads#", "poll#"}},
        "ConnectionsTable": {"dynamodb:PutItem": {"ticket#"}},
    },
    # A subscribe reads the conversation's header, and its backlog the feed: the items the feed reads.
    "SocketFunction": {
        "ConversationsTable": {"dynamodb:GetItem": {"conv_"}, "dynamodb:Query": {"conv_", "turn#", "note#"}}
    },
    # The feed's reads (the header, messages, turn records, notifications); in its own table, the subscriptions'
    # cursors and a gone connection's end (`conn#`), its owner's count (`owner#`).
    "SocketPushFunction": {
        "ConversationsTable": {"dynamodb:GetItem": {"conv_"}, "dynamodb:Query": {"conv_", "turn#", "note#"}},
        "ConnectionsTable": {"dynamodb:UpdateItem": {"conn#", "owner#"}, "dynamodb:Query": {"conn#"}},
    },
    # The functions announcing decisions in a conversation's feed (tests/unit/test_notifications_iam.py).
    **{
        f: {"ConversationsTable": {f"dynamodb:{a}": {"note#"} for a in ("GetItem", "PutItem", "UpdateItem")}}
        for f in ("ApprovalSweepFunction", "PaymentsFunction", "PaymentsWebhookFunction", "PaymentSweepFunction")
    },
    # The lead API's notifications, and a person's reply (store/takeover.py): the header read and the message put,
    # the reply's Idempotency-Key read and created. Its UpdateItem and Query stay table-wide (UNBOUNDED_ITEM_ACTIONS).
    "ApprovalsFunction": {
        "ConversationsTable": {f"dynamodb:{a}": {"note#", "conv_", "idem#handoff#"} for a in ("GetItem", "PutItem")}
    },
}
# Item actions a function named above holds on the whole table, and why.
UNBOUNDED_ITEM_ACTIONS: dict[str, set[str]] = {
    # Hand-off close (a header, or an MCP holder) and erasure (every item of a customer's conversations).
    "ApprovalsFunction": {"dynamodb:UpdateItem", "dynamodb:Query"},
    # Reads only: the conversation's header, messages, turn records and notifications (the feed).
    "EventsFunction": {"dynamodb:GetItem", "dynamodb:Query"},
}
_ITEM_ACTIONS = {
    f"dynamodb:{a}" for a in ("GetItem", "PutItem", "UpdateItem", "DeleteItem", "ConditionCheckItem", "Query")
}


def _allow_statements_on(cfn: dict[str, Any], function_id: str, table: str) -> list[dict[str, Any]]:
    """The role's Allow statements naming ``table`` itself (not an index)."""
    parameters = set(cfn.get("Parameters", {}))
    found = []
    for document in _role_documents(cfn, _role_id(cfn, function_id)):
        for statement in _statements(document["Statement"]):
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            if statement["Effect"] == "Allow" and table in {_target(r, parameters) for r in resources}:
                found.append(statement)
    return found


def _statement_actions(statement: dict[str, Any]) -> set[str]:
    return set(statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]])


def _leading_key_prefixes(statement: dict[str, Any]) -> set[str] | None:
    """The prefixes a statement's ``dynamodb:LeadingKeys`` condition allows (None: no condition). Only
    ``ForAllValues:StringLike`` with ``prefix*`` patterns is accepted: a ``ForAnyValue`` or an inner ``*`` would
    let other keys through."""
    condition = statement.get("Condition")
    if condition is None:
        return None
    assert condition.keys() == {"ForAllValues:StringLike"}, condition
    assert condition["ForAllValues:StringLike"].keys() == {"dynamodb:LeadingKeys"}, condition
    patterns = condition["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]
    patterns = patterns if isinstance(patterns, list) else [patterns]
    assert all(p.endswith("*") and not set(p[:-1]) & set("*?") and p != "*" for p in patterns), patterns
    return {p[:-1] for p in patterns}


@pytest.mark.parametrize("function_id", sorted(KEY_PREFIXES))
def test_prefixed_items_are_granted_only_under_their_leading_keys(cfn: dict[str, Any], function_id: str) -> None:
    """Each declared action on the table is granted only under LeadingKeys, with exactly the declared prefixes
    (per action: a statement granting two actions grants both on its prefixes), and no other item action is held
    on the whole table (except those UNBOUNDED_ITEM_ACTIONS names)."""
    for table, declared in KEY_PREFIXES[function_id].items():
        bound: dict[str, set[str]] = {}
        unbounded: set[str] = set()
        for statement in _allow_statements_on(cfn, function_id, table):
            prefixes = _leading_key_prefixes(statement)
            for action in _statement_actions(statement) & _ITEM_ACTIONS:
                if prefixes is None:
                    unbounded.add(action)
                else:
                    bound.setdefault(action, set()).update(prefixes)
        assert not unbounded & declared.keys(), f"{function_id}: {unbounded & declared.keys()} on the whole {table}"
        allowed_unbounded = UNBOUNDED_ITEM_ACTIONS.get(function_id, set()) if table == "ConversationsTable" else set()
        assert unbounded == allowed_unbounded, f"{function_id}: {unbounded} table-wide on {table}"
        bound = {a: p for a, p in bound.items() if a not in unbounded}  # a bound grant beside a table-wide one
        assert bound == declared, f"{function_id} on {table}: granted {bound}, declared {declared}"


def test_the_declared_prefixes_are_the_keys_the_stores_build() -> None:
    """Every declared prefix starts the key its store builds, and no family's pattern takes another's key (IAM's
    StringLike: ``*`` is any run of characters)."""
    import fnmatch

    from support_agent.ids import new_conversation_id
    from support_agent.mcp.our_tools import stream_of
    from support_agent.outcomes.store import outcome_key
    from support_agent.reports.store import PARTITION as ROLLUPS
    from support_agent.sockets.connections import connection_key, owner_key, ticket_key
    from support_agent.store.notifications import partition
    from support_agent.store.polls import partition as poll_partition
    from support_agent.store.ratelimit import counter_key
    from support_agent.store.ratings import partition as rating_partition
    from support_agent.store.takeover import _key_partition as reply_key
    from support_agent.store.turns import TurnStore, new_turn_id

    cid = new_conversation_id()
    built = {
        "conv_": cid,
        "turn#": TurnStore._turn_key(cid, new_turn_id())["conversation_id"],
        "note#": partition(cid),
        "rate#reads#": counter_key(7, 29_000_000, "reads"),
        "rate#mcp#": counter_key(7, 29_000_000, "mcp"),
        "mcp#": stream_of(7),
        "poll#": poll_partition(7),
        "idem#handoff#": reply_key("hof_01JF3R0000000000000000000Z", "a-key"),
        "rating#": rating_partition(cid),
        "outcome#": outcome_key(cid)["conversation_id"],
        "rollup#": ROLLUPS,
        "ticket#": ticket_key("a-ticket"),
        "conn#": connection_key("a-connection"),
        "owner#": owner_key("customer:7"),
    }
    declared = {
        p for tables in KEY_PREFIXES.values() for actions in tables.values() for ps in actions.values() for p in ps
    }
    assert declared == set(built)
    for prefix, key in built.items():
        assert key.startswith(prefix), (prefix, key)
        others = {k for p, k in built.items() if fnmatch.fnmatchcase(k, f"{prefix}*")}
        assert others == {key}, (prefix, others)  # no prefix reaches another family's keys


def test_the_action_list_knows_what_is_and_is_not_an_iam_action() -> None:
    assert is_iam_action("dynamodb:ConditionCheckItem")
    assert is_iam_action("sqs:SendMessage")
    assert is_iam_action("secretsmanager:GetSecretValue")
    # The TransactWriteItems API is authorised per item as PutItem/UpdateItem/ConditionCheckItem.
    assert not is_iam_action("dynamodb:TransactWriteItems")
    assert not is_iam_action("dynamodb:PutItems")


def test_secret_access_only_when_a_secret_is_configured(cfn: dict[str, Any]) -> None:
    assert cfn["Conditions"]["HasAnthropicApiKeySecret"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "AnthropicApiKeySecretArn"}, ""]}]
    }
    role_id = cfn["Resources"]["ChatFunction"]["Properties"]["Role"]["Fn::GetAtt"][0]
    raw = [s for doc in _role_documents(cfn, role_id) for s in doc["Statement"]]
    secret = [s for s in raw if "secretsmanager" in json.dumps(s) and "AnthropicApiKeySecretArn" in json.dumps(s)]
    assert len(secret) == 1
    condition, if_true, if_false = secret[0]["Fn::If"]
    assert condition == "HasAnthropicApiKeySecret"
    assert if_true["Resource"] == {"Ref": "AnthropicApiKeySecretArn"}
    assert if_false == {"Ref": "AWS::NoValue"}


@pytest.mark.parametrize("function_id", ["ChatFunction", "TurnWorkerFunction"])
def test_mcp_credentials_only_to_the_loops_functions_and_only_when_servers_are_configured(
    sam: dict[str, Any], cfn: dict[str, Any], function_id: str
) -> None:
    assert sam["Parameters"]["McpServers"]["Default"] == ""
    assert cfn["Conditions"]["HasMcpServers"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "McpServers"}, ""]}]}
    env = cfn["Resources"][function_id]["Properties"]["Environment"]["Variables"]
    assert env["MCP_SERVERS"] == {"Ref": "McpServers"}
    assert env["TOOL_MODE"] == {"Ref": "ToolMode"}
    assert env["MCP_REFRESH_SECONDS"] == {"Ref": "McpRefreshSeconds"}
    raw = [s for doc in _role_documents(cfn, _role_id(cfn, function_id)) for s in doc["Statement"]]
    (secret,) = [s for s in raw if "/mcp/*" in json.dumps(s)]
    condition, if_true, if_false = secret["Fn::If"]
    assert (condition, if_false) == ("HasMcpServers", {"Ref": "AWS::NoValue"})
    assert (if_true["Action"], if_true["Resource"]) == ("secretsmanager:GetSecretValue", {"Fn::Sub": MCP_SECRETS_ARN})
    holders = {f for f, pairs in ALLOWED.items() if ("secretsmanager:GetSecretValue", MCP_SECRETS) in pairs}
    assert holders == {"ChatFunction", "TurnWorkerFunction"}


@pytest.mark.parametrize(
    "function_id",
    [
        "ChatFunction",
        "TurnWorkerFunction",
        "ApprovalsFunction",
        "PaymentsFunction",
        "PaymentSweepFunction",
        "ReconcileFunction",
        "McpFunction",
    ],
)
def test_stripe_key_and_provider_reach_the_refunding_functions(
    sam: dict[str, Any], cfn: dict[str, Any], function_id: str
) -> None:
    """The functions that will refund (and reconciliation, which reads refunds) get PAYMENT_PROVIDER and the
    secret's ARN, and may read that secret only when one is configured (the other functions never)."""
    params = sam["Parameters"]
    assert (params["PaymentProvider"]["Default"], params["PaymentProvider"]["AllowedValues"]) == (
        "none",
        ["none", "stripe"],
    )
    assert params["StripeApiKeySecretArn"]["Default"] == ""
    assert params["StripeApiBase"]["Default"] == "https://api.stripe.com"
    assert cfn["Conditions"]["HasStripeApiKeySecret"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "StripeApiKeySecretArn"}, ""]}]
    }
    env = cfn["Resources"][function_id]["Properties"]["Environment"]["Variables"]
    assert env["PAYMENT_PROVIDER"] == {"Ref": "PaymentProvider"}
    assert env["STRIPE_API_KEY_SECRET_ARN"] == {"Ref": "StripeApiKeySecretArn"}
    assert env["STRIPE_API_BASE"] == {"Ref": "StripeApiBase"}
    raw = [s for doc in _role_documents(cfn, _role_id(cfn, function_id)) for s in doc["Statement"]]
    (secret,) = [s for s in raw if "StripeApiKeySecretArn" in json.dumps(s)]
    condition, if_true, if_false = secret["Fn::If"]
    assert (condition, if_false) == ("HasStripeApiKeySecret", {"Ref": "AWS::NoValue"})
    assert (if_true["Action"], if_true["Resource"]) == (
        "secretsmanager:GetSecretValue",
        {"Ref": "StripeApiKeySecretArn"},
    )
    others = {f for f in ALLOWED if ("secretsmanager:GetSecretValue", "param:StripeApiKeySecretArn") in ALLOWED[f]}
    assert others == {
        "ChatFunction",
        "TurnWorkerFunction",  # a handed-over turn's tools refund as the chat function's do
        "ApprovalsFunction",
        "PaymentsFunction",
        "PaymentSweepFunction",
        "ReconcileFunction",  # reads refunds only (reconciliation)
        "McpFunction",  # request_refund over MCP refunds as the chat function's tool does
    }


def test_the_webhook_secret_reaches_only_the_webhook_function(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    """Only PaymentsWebhookFunction gets the signing secret's ARN, and may read it only when one is set."""
    assert sam["Parameters"]["StripeWebhookSecretArn"]["Default"] == ""
    assert cfn["Conditions"]["HasStripeWebhookSecret"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "StripeWebhookSecretArn"}, ""]}]
    }
    functions = {k: v for k, v in cfn["Resources"].items() if v["Type"] == "AWS::Lambda::Function"}
    holders = {k for k, v in functions.items() if "StripeWebhookSecretArn" in json.dumps(v)}
    assert holders == {"PaymentsWebhookFunction"}
    env = functions["PaymentsWebhookFunction"]["Properties"]["Environment"]["Variables"]
    assert env["STRIPE_WEBHOOK_SECRET_ARN"] == {"Ref": "StripeWebhookSecretArn"}
    assert "STRIPE_API_KEY_SECRET_ARN" not in env  # it never calls Stripe
    raw = [s for doc in _role_documents(cfn, _role_id(cfn, "PaymentsWebhookFunction")) for s in doc["Statement"]]
    (secret,) = [s for s in raw if "StripeWebhookSecretArn" in json.dumps(s)]
    condition, if_true, if_false = secret["Fn::If"]
    assert (condition, if_false) == ("HasStripeWebhookSecret", {"Ref": "AWS::NoValue"})
    assert (if_true["Action"], if_true["Resource"]) == (
        "secretsmanager:GetSecretValue",
        {"Ref": "StripeWebhookSecretArn"},
    )


def test_bedrock_access_only_for_the_bedrock_provider_and_scoped(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    """bedrock:InvokeModel on exactly the profile and the model ARNs, and only when LlmProvider is
    bedrock; with a profile, the models only through it (bedrock:InferenceProfileArn)."""
    assert cfn["Conditions"]["UseBedrock"] == {"Fn::Equals": [{"Ref": "LlmProvider"}, "bedrock"]}
    assert cfn["Conditions"]["UseBedrockProfile"] == {
        "Fn::And": [
            {"Condition": "UseBedrock"},
            {"Fn::Not": [{"Fn::Equals": [{"Ref": "BedrockInferenceProfileArn"}, ""]}]},
        ]
    }
    role_id = cfn["Resources"]["ChatFunction"]["Properties"]["Role"]["Fn::GetAtt"][0]
    raw = [s for doc in _role_documents(cfn, role_id) for s in doc["Statement"]]
    profile, models = [s for s in raw if "bedrock:" in json.dumps(s)]
    condition, if_true, if_false = profile["Fn::If"]
    assert (condition, if_false) == ("UseBedrockProfile", {"Ref": "AWS::NoValue"})
    assert (if_true["Action"], if_true["Resource"]) == ("bedrock:InvokeModel", {"Ref": "BedrockInferenceProfileArn"})
    condition, through_profile, otherwise = models["Fn::If"]
    assert condition == "UseBedrockProfile"
    assert through_profile["Resource"] == {"Ref": "BedrockModelArns"}
    assert through_profile["Condition"] == {
        "StringEquals": {"bedrock:InferenceProfileArn": {"Ref": "BedrockInferenceProfileArn"}}
    }
    condition, direct, nothing = otherwise["Fn::If"]
    assert (condition, nothing) == ("UseBedrock", {"Ref": "AWS::NoValue"})
    assert (direct["Action"], direct["Resource"]) == ("bedrock:InvokeModel", {"Ref": "BedrockModelArns"})
    # The model id the function invokes is the granted profile (or the first granted model).
    env = cfn["Resources"]["ChatFunction"]["Properties"]["Environment"]["Variables"]
    assert env["BEDROCK_MODEL_ID"] == {
        "Fn::If": [
            "UseBedrockProfile",
            {"Ref": "BedrockInferenceProfileArn"},
            {"Fn::If": ["UseBedrock", {"Fn::Select": [0, {"Ref": "BedrockModelArns"}]}, ""]},
        ]
    }
    # CloudFormation refuses a bedrock stack without model ARNs.
    rule = sam["Rules"]["BedrockNeedsModelArns"]
    assert rule["RuleCondition"] == {"Fn::Equals": [{"Ref": "LlmProvider"}, "bedrock"]}
    assert rule["Assertions"][0]["Assert"] == {
        "Fn::Not": [{"Fn::Equals": [{"Fn::Join": ["", {"Ref": "BedrockModelArns"}]}, ""]}]
    }
    assert {a for a, _ in granted_pairs(cfn, "ApprovalsFunction")} & {"bedrock:InvokeModel"} == set()


def test_the_evaluator_catches_an_added_permission(sam: dict[str, Any]) -> None:
    widened = copy.deepcopy(sam)
    policies = widened["Resources"]["ChatFunction"]["Properties"]["Policies"]
    policies[0]["Statement"].append(
        {"Effect": "Allow", "Action": "dynamodb:UpdateItem", "Resource": {"Fn::GetAtt": ["AuditTable", "Arn"]}}
    )
    granted = granted_pairs(translate(widened), "ChatFunction")
    assert granted - ALLOWED["ChatFunction"] == {("dynamodb:UpdateItem", "AuditTable")}


def test_no_broad_sam_policy_templates(sam: dict[str, Any]) -> None:
    for name, resource in sam["Resources"].items():
        if resource["Type"] == "AWS::Serverless::Function":
            for policy in resource["Properties"].get("Policies", []):
                assert isinstance(policy, dict) and "Statement" in policy, f"{name}: {policy!r}"


def test_snapstart_is_a_parameter_on_the_chat_function(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    param = sam["Parameters"]["EnableSnapStart"]
    assert param["Default"] == "false" and param["AllowedValues"] == ["true", "false"]
    assert sam["Conditions"]["SnapStartEnabled"] == {"Fn::Equals": [{"Ref": "EnableSnapStart"}, "true"]}
    props = cfn["Resources"]["ChatFunction"]["Properties"]
    assert props["SnapStart"] == {"ApplyOn": {"Fn::If": ["SnapStartEnabled", "PublishedVersions", "None"]}}
    assert resources_of_type(cfn, "AWS::Lambda::Alias")  # SnapStart only applies to published versions
    # the API invokes the alias, so requests reach the snapshotted versions
    permissions = resources_of_type(cfn, "AWS::Lambda::Permission")
    chat = [p for k, p in permissions.items() if k.startswith("ChatFunction")]
    assert chat and all(p["Properties"]["FunctionName"] == {"Ref": "ChatFunctionAliaslive"} for p in chat)


def test_the_local_stack_strips_snapstart_and_the_alias(sam: dict[str, Any]) -> None:
    from devstack.stack import _remove_unsupported_function_properties

    for_moto = copy.deepcopy(sam)
    removed = _remove_unsupported_function_properties(for_moto)
    assert {"ChatFunction.AutoPublishAlias", "ChatFunction.SnapStart"} <= set(removed)
    stripped = translate(for_moto)
    assert not resources_of_type(stripped, "AWS::Lambda::Alias")
    assert not resources_of_type(stripped, "AWS::Lambda::Version")


def test_functions_skip_the_pydantic_plugin_scan(sam: dict[str, Any]) -> None:
    """No pydantic plugin is used; scanning every installed distribution for one is cold-start time."""
    assert sam["Globals"]["Function"]["Environment"]["Variables"]["PYDANTIC_DISABLE_PLUGINS"] == "__all__"


# ------------------------------------------------------------------ the support policy (docs/POLICY.md)


def _policy_document(sam: dict[str, Any], threshold: int) -> dict[str, Any]:
    """The template's version 1 of the policy as CloudFormation resolves it with RefundThresholdCents=threshold."""
    value = sam["Resources"]["SupportPolicyParameter"]["Properties"]["Value"]["Fn::Sub"]
    assert isinstance(value, str)
    assert set(re.findall(r"\$\{([^}]*)\}", value)) == {"RefundThresholdCents"}  # nothing else substituted
    return dict(json.loads(value.replace("${RefundThresholdCents}", str(threshold))))


@pytest.mark.parametrize("threshold", [0, 5000, 123_456])
def test_the_templates_policy_is_the_models_default(sam: dict[str, Any], threshold: int) -> None:
    from support_agent.policy.model import SupportPolicy, default_policy

    document = _policy_document(sam, threshold)
    assert document == default_policy(threshold).model_dump(mode="json")
    assert SupportPolicy.model_validate(document) == default_policy(threshold)


def test_the_policy_parameter(sam: dict[str, Any], cfn: dict[str, Any]) -> None:
    parameter = cfn["Resources"]["SupportPolicyParameter"]
    assert parameter["Type"] == "AWS::SSM::Parameter"
    props = parameter["Properties"]
    assert props["Name"] == {"Fn::Sub": "/${AWS::StackName}/support-policy"}
    assert props["Type"] == "String"  # versioned; CloudFormation cannot create a SecureString, and it holds no secret
    # The parameter's ARN in the grants is its name's: a name starting with "/" gives "parameter/<stack>/...".
    assert POLICY_PARAMETER_ARN.endswith(":parameter${SupportPolicyParameter}")
    cache = sam["Parameters"]["PolicyCacheSeconds"]
    assert (cache["Type"], cache["Default"], cache["MinValue"], cache["MaxValue"]) == ("Number", 60, 0, 3600)
    assert sam["Parameters"]["RefundThresholdCents"]["Default"] == 5000


def test_only_the_functions_deciding_actions_read_the_policy(cfn: dict[str, Any]) -> None:
    for function_id in _function_ids(cfn):
        props = cfn["Resources"][function_id]["Properties"]
        env = props.get("Environment", {}).get("Variables", {})
        reads = POLICY_READS & granted_pairs(cfn, function_id)
        if function_id in POLICY_READERS:
            assert env["SUPPORT_POLICY_PARAMETER"] == {"Ref": "SupportPolicyParameter"}
            assert env["POLICY_CACHE_SECONDS"] == {"Ref": "PolicyCacheSeconds"}
            assert reads == POLICY_READS
        else:
            assert "SUPPORT_POLICY_PARAMETER" not in env, function_id
            assert reads == set(), function_id
    assert {f for f, pairs in ALLOWED.items() if pairs >= POLICY_READS} == POLICY_READERS


def test_the_proposal_routes_are_the_chat_functions(sam: dict[str, Any]) -> None:
    routes = {(r.method, r.path, r.function) for r in http_routes(sam)}
    for answer in ("confirm", "decline"):
        assert ("POST", f"/api/conversations/{{id}}/proposals/{{pid}}/{answer}", "ChatFunction") in routes
    assert not {r for r in routes if "/proposals/" in r[1] and r[2] != "ChatFunction"}
