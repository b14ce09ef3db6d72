"""Property 8 (b) for OutcomeSweepFunction: its code, run under its own role with moto enforcing IAM
(tests/reliability/test_least_privilege_runtime.py's harness), derives and stores an outcome, every call within
what its role grants and every grant used; its Conversations table items are those its LeadingKeys allow, and what
it must never do is refused."""

from __future__ import annotations

import time

import boto3
import pytest

from devstack.stack import Stack
from support_agent.store.dynamo import from_item, to_item, to_values
from tests.integration.conftest import Api
from tests.reliability.test_least_privilege_runtime import Recorder, as_function, credentials_for
from tests.reliability.test_least_privilege_runtime import recorder as recorder
from tests.support.scripted import seed_scenario

FUNCTION = "OutcomeSweepFunction"
# dynamodb:LeadingKeys of its role (template.yaml): which Conversations items each action may touch.
LEADING_KEYS = {
    "dynamodb:GetItem": ("conv_", "turn#", "rating#", "outcome#"),
    "dynamodb:PutItem": ("outcome#",),
    "dynamodb:UpdateItem": ("conv_",),
}


def test_outcome_sweep_under_its_own_role(
    api: Api, stack: Stack, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A conversation with a refund held for a lead (its approval read), made due now (time moved on its header).
    api.model.script = seed_scenario("damaged", "A teammate must approve this refund.")
    status, body, _ = api.call("POST", "/api/chat", {"conversationId": None, "message": "Refund order 1042."})
    assert status == 200, body
    cid = body["conversationId"]
    table = stack.physical_ids["ConversationsTable"]
    ddb = boto3.client("dynamodb")
    ddb.update_item(
        TableName=table,
        Key=to_item({"conversation_id": cid, "seq": 0}),
        UpdateExpression="SET quiet_check_at = :due",
        ExpressionAttributeValues=to_values({":due": int(time.time()) - 1}),
    )

    creds = credentials_for(stack, FUNCTION)
    with as_function(api, FUNCTION, creds, recorder, monkeypatch):
        out = api.handlers[FUNCTION]({"source": "aws.scheduler"}, None)
        assert out["stored"] >= 1 and out["errors"] == 0, out
        assert out["outcomes"].get("waiting_on_lead", 0) >= 1, out
        ddb = boto3.client("dynamodb")
        forbidden = {
            "Scan of the conversations": lambda: ddb.scan(TableName=table),
            "DeleteItem of a header": lambda: ddb.delete_item(
                TableName=table, Key=to_item({"conversation_id": cid, "seq": 0})
            ),
            # moto authorises by action against "*": the refusals it can show are of actions the role lacks.
            "BatchWriteItem": lambda: ddb.batch_write_item(
                RequestItems={table: [{"PutRequest": {"Item": to_item({"conversation_id": "x", "seq": 0})}}]}
            ),
            "StartExecution of RefundFlow": lambda: boto3.client("stepfunctions").start_execution(
                stateMachineArn=stack.physical_ids["RefundFlow"], name="apr_forbidden", input="{}"
            ),
        }
        run = recorder.run(forbidden)
    run.check(stack, FUNCTION)
    for action, key in run.conversation_keys:
        assert key.startswith(LEADING_KEYS[action]), (action, key)
    assert {a for a, _ in run.conversation_keys} == set(LEADING_KEYS)
    item = ddb.get_item(TableName=table, Key=to_item({"conversation_id": f"outcome#{cid}", "seq": 0}))["Item"]
    assert from_item(item)["outcome"] == "waiting_on_lead"
