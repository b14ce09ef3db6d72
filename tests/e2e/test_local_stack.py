"""The local stack end to end over HTTP: the seed scenario through approval to REFUNDED."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from devstack.demo import acted, actions, handed_back, run, takeover
from devstack.local import REGION, LocalStack


def test_seed_scenario_through_approval_to_refunded(local_stack: LocalStack) -> None:
    printed: list[str] = []
    outcome = run(local_stack, printed.append)
    turn = outcome["turn"]
    assert turn["stopReason"] == "end_turn" and turn["iterations"] == 3
    assert turn["reply"].startswith("[simulated model]")
    names = [c["name"] for it in turn["trace"] for c in it["toolCalls"]]
    assert names == ["lookup_order", "request_refund"]
    assert outcome["approval"]["status"] == "REFUNDED"
    assert printed[0].startswith("POST /api/chat") and any("[iter 2]" in line for line in printed)


def test_routes_errors_and_pages(local_stack: LocalStack) -> None:
    client = httpx.Client(base_url=local_stack.url, timeout=30)
    assert client.get("/api/health").json() == {"status": "ok"}
    unknown = client.get("/api/nope")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    assert client.post("/api/chat", json={"message": "hi"}).status_code == 401
    lead = local_stack.tokens["leads"][0]["token"]
    forbidden = client.post("/api/chat", json={"message": "hi"}, headers={"Authorization": f"Bearer {lead}"})
    assert forbidden.status_code == 403
    assert "<html" in client.get("/").text.lower() and "<html" in client.get("/lead").text.lower()


def test_follow_up_in_the_same_conversation(local_stack: LocalStack) -> None:
    customer = local_stack.tokens["customers"][1]  # Sam, customer 8
    auth = {"Authorization": f"Bearer {customer['token']}"}
    client = httpx.Client(base_url=local_stack.url, timeout=30)
    first = client.post("/api/chat", json={"message": "What is the status of order 2001?"}, headers=auth).json()
    second = client.post(
        "/api/chat", json={"conversationId": first["conversationId"], "message": "Please refund it."}, headers=auth
    ).json()
    refund = [c for it in second["trace"] for c in it["toolCalls"] if c["name"] == "request_refund"]
    assert refund and refund[0]["input"]["order_id"] == 2001
    view = client.get(f"/api/conversations/{first['conversationId']}", headers=auth).json()
    assert len(view["refunds"]) == 1 and view["refunds"][0]["orderId"] == 2001


def test_make_demo_takeover_a_person_answers_then_hands_back(local_stack: LocalStack) -> None:
    assert local_stack.model is not None
    model = local_stack.model.model
    printed: list[str] = []
    before = model.requests
    outcome = takeover(local_stack, printed.append)
    assert handed_back(outcome), printed
    kept = outcome["kept"]
    assert (kept["httpStatus"], kept["status"], "turnId" in kept) == (202, "assigned", False), kept
    assert (outcome["handoff"]["status"], outcome["handoff"]["closedAs"]) == ("CLOSED", "returned_to_bot")
    assert outcome["after"]["reply"].startswith("[simulated model]") and "1043" in outcome["after"]["reply"]
    # The model ran for the escalation and for the question after the hand-back, never for the kept message:
    # the escalation's two calls (escalate_to_human, then its answer) and the lookup's two.
    assert model.requests - before == 4, (model.requests - before, printed)
    assert any("/claim (agent-1, Riley) -> 200" in line for line in printed), printed


def test_make_demo_actions_cancel_is_confirmed_and_refunded_once_the_shipped_address_refused(
    local_stack: LocalStack,
) -> None:
    printed: list[str] = []
    outcome = actions(local_stack, printed.append)
    assert acted(outcome), printed
    assert outcome["proposed"]["status"] == "PROPOSED" and outcome["confirmed"]["status"] == "CONFIRMED"
    assert outcome["again"]["decidedAt"] == outcome["confirmed"]["decidedAt"]  # the first decision, answered again
    assert [r["amount"] for r in outcome["refunds"]] == [3200], printed  # order 1045's total, refunded once
    assert "SHIPPED" in outcome["address"]["reply"], outcome["address"]["reply"]
    assert any(line.startswith("proposed prp_") for line in printed), printed
    # Every row of a decision names the policy version it applied: the one in force in SSM (the template's 1, or a
    # later one another test of this shared stack published), a refusal's too: the policy said no.
    decisions = outcome["decisions"]
    assert {r["action"] for r in decisions} >= {"tool_call", "proposal_confirmed"}, decisions
    named = [(r["action"], r["tool"], r["policyVersion"]) for r in decisions]
    assert {version for _, _, version in named} == {_policy_in_force(local_stack)}, named


def _policy_in_force(local: LocalStack) -> int | None:
    """The version the functions apply: the newest that validates (devstack/policy.py, as `make policy-show`)."""
    import boto3

    from devstack.policy import applied, versions

    ssm = boto3.client("ssm", endpoint_url=local.moto_url)
    found = applied(versions(ssm, local.stack.physical_ids["SupportPolicyParameter"]))
    return found.version if found is not None else None


def test_a_cancelled_transaction_leaves_the_tables_stream_readable(local_stack: LocalStack) -> None:
    """moto undoes a cancelled TransactWriteItems by putting back a copy of the table, and its stream shard with it:
    every shard iterator handed out before then read the discarded shard, and the stack's stream pollers (the
    WebSocket's pushes, the audit watcher) saw nothing new for the rest of the session
    (devstack.local._streams_kept_through_rollbacks). The reader goes on; the cancelled writes left no record."""
    import boto3
    from botocore.exceptions import ClientError

    session = boto3.Session(region_name=REGION, aws_access_key_id="local", aws_secret_access_key="local")
    ddb = session.client("dynamodb", endpoint_url=local_stack.moto_url)
    streams = session.client("dynamodbstreams", endpoint_url=local_stack.moto_url)
    table = local_stack.stack.physical_ids["ConversationsTable"]
    arn = ddb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    (shard,) = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="LATEST")

    conversation = "devstack-test#rollback"

    def key(seq: int) -> dict[str, Any]:
        return {"conversation_id": {"S": conversation}, "seq": {"N": str(seq)}}

    with pytest.raises(ClientError) as cancelled:
        ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": key(1)}},
                {"Put": {"TableName": table, "Item": key(2), "ConditionExpression": "attribute_exists(seq)"}},
            ]
        )
    assert cancelled.value.response["Error"]["Code"] == "TransactionCanceledException"
    ddb.put_item(TableName=table, Item=key(3))

    got = streams.get_records(ShardIterator=iterator["ShardIterator"])["Records"]
    mine = [
        r["dynamodb"]["Keys"]["seq"]["N"] for r in got if r["dynamodb"]["Keys"]["conversation_id"]["S"] == conversation
    ]
    assert mine == ["3"], got
    assert "Item" not in ddb.get_item(TableName=table, Key=key(1), ConsistentRead=True)
