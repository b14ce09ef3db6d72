"""Erasure of a customer's conversations on the deployed template: tombstones, valid history, intact audit."""

from __future__ import annotations

import json
import time
from typing import Any

import boto3

from support_agent.agent import history as hist
from support_agent.store.erasure import ERASED
from tests.integration.conftest import Api
from tests.support.openapi import assert_documented
from tests.support.scripted import answer, tool_use, tools

SECRET_WORDS = ("Elm Street", "allergic", "1042")


def table(api: Api, name: str) -> str:
    return api.stack.function_env("ApprovalsFunction")[name]


def chat(api: Api, message: str, cid: str | None = None, customer: int = 7) -> dict[str, Any]:
    token = api.token(f"customer-{customer}", customer_id=customer)
    status, body, headers = api.call("POST", "/api/chat", {"conversationId": cid, "message": message}, token=token)
    assert status == 200, body
    assert_documented("POST", "/api/chat", status, body, headers)
    return dict(body)


def stored(api: Api, cid: str) -> list[dict[str, Any]]:
    out = boto3.client("dynamodb").query(
        TableName=table(api, "CONVERSATIONS_TABLE"),
        KeyConditionExpression="conversation_id = :c AND seq > :z",
        ExpressionAttributeValues={":c": {"S": cid}, ":z": {"N": "0"}},
        ConsistentRead=True,
    )
    return [{"role": i["role"]["S"], "content": json.loads(i["content"]["S"])} for i in out["Items"]]


def audit_items(api: Api, customer: int) -> list[dict[str, Any]]:
    out = boto3.client("dynamodb").query(
        TableName=table(api, "AUDIT_TABLE"),
        IndexName="by_customer",
        KeyConditionExpression="customer_id = :c",
        ExpressionAttributeValues={":c": {"N": str(customer)}},
    )
    return sorted(out["Items"], key=lambda i: i["event_id"]["S"])


def erase(api: Api, customer: int, body: Any = None, token: str | None = "lead") -> tuple[int, Any, dict[str, str]]:
    return api.call("POST", f"/api/customers/{customer}/erase", body, token=api.lead() if token == "lead" else token)


def a_conversation_with_tools(api: Api, customer: int = 7) -> str:
    api.model.script = [
        tools(tool_use("lookup_order", {"order_id": 1042})),
        tools(tool_use("request_refund", {"order_id": 1042, "amount_cents": 18900, "reason": "allergic reaction"})),
        answer("Order 1042 is delivered; a teammate will approve the refund. Noted: you live on Elm Street."),
    ]
    first = chat(api, "I live on Elm Street and I'm allergic to the dye. Refund order 1042.", customer=customer)
    api.model.script = [answer("You're welcome, see you on Elm Street.")]
    chat(api, "Thanks!", first["conversationId"], customer=customer)
    return str(first["conversationId"])


def test_only_leads_erase(api: Api) -> None:
    assert erase(api, 7, token=None)[0] == 401
    status, body, _ = erase(api, 7, token=api.token())
    assert (status, body["error"]["code"]) == (403, "forbidden")
    status, body, _ = api.call("POST", "/api/customers/seven/erase", None, token=api.lead())
    assert (status, body["error"]["code"]) == (400, "bad_request")
    status, body, _ = erase(api, 7, {"reason": "x", "customerId": 8})
    assert (status, body["error"]["code"]) == (400, "bad_request")
    assert_documented("POST", "/api/customers/7/erase", status, body)


def test_erasure_tombstones_keeps_the_audit_trail_and_the_conversation_goes_on(api: Api) -> None:
    cid = a_conversation_with_tools(api)
    other = a_conversation_with_tools(api, customer=8)
    before = stored(api, cid)
    other_before = stored(api, other)
    audit_before = audit_items(api, 7)
    assert sum(1 for r in audit_before if r["action"]["S"] == "tool_call") == 2
    approval_id = next(r["approval_id"]["S"] for r in audit_before if "approval_id" in r)

    status, body, headers = erase(api, 7, {"reason": "GDPR request #123"})
    assert status == 200, body
    assert_documented("POST", "/api/customers/7/erase", status, body, headers)
    assert body["customerId"] == 7 and body["complete"] is True and body["skipped"] == []
    assert body["conversations"] >= 1
    assert body["messages"] >= len(before)

    # Content gone, structure kept: same roles, block types, tool ids and names.
    after = stored(api, cid)
    raw = json.dumps(after)
    assert not [w for w in SECRET_WORDS if w in raw], raw
    assert [m["role"] for m in after] == [m["role"] for m in before]
    for old, new in zip(before, after, strict=True):
        assert [b["type"] for b in new["content"]] == [b["type"] for b in old["content"] if "thinking" not in b["type"]]
        for o, n in zip(old["content"], new["content"], strict=True):
            assert (n.get("id"), n.get("tool_use_id"), n.get("name")) == (
                o.get("id"),
                o.get("tool_use_id"),
                o.get("name"),
            )
            if n["type"] == "text":
                assert n["text"] == ERASED
            elif n["type"] == "tool_use":
                assert n["input"] == {}
            elif n["type"] == "tool_result":
                assert n["content"] == ERASED
    assert hist.problems(after) == []
    assert stored(api, other) == other_before, "another customer's conversation is untouched"

    # The audit trail is intact (rows unchanged), plus one customer_erased row with the counts.
    audit_after = audit_items(api, 7)
    assert audit_after[: len(audit_before)] == audit_before
    (erased_row,) = audit_after[len(audit_before) :]
    assert erased_row["action"]["S"] == "customer_erased"
    assert erased_row["event_id"]["S"] == body["auditEventId"]
    assert erased_row["actor"]["S"] == "lead-1"
    assert json.loads(erased_row["output"]["S"])["messages"] == body["messages"]
    assert json.loads(erased_row["input"]["S"]) == {"reason": "GDPR request #123"}
    status, trail, _ = api.call("GET", "/api/audit?customerId=7", token=api.lead())
    assert status == 200
    assert_documented("GET", "/api/audit", status, trail)
    assert [r["action"] for r in trail["records"]][-1] == "customer_erased"
    # Money records are not conversation content: the approval raised in it is still there.
    status, approval, _ = api.call("GET", f"/api/approvals/{approval_id}", token=api.lead())
    assert (status, approval["amountCents"]) == (200, 18900)
    assert_documented("GET", f"/api/approvals/{approval_id}", status, approval)

    # The owner reads tombstones; the list keeps the conversation, without its title (it quoted the message).
    status, view, _ = api.call("GET", f"/api/conversations/{cid}")
    assert status == 200
    assert_documented("GET", f"/api/conversations/{cid}", status, view)
    assert {m["text"] for m in view["messages"] if m["text"]} == {ERASED}
    assert not [w for w in SECRET_WORDS if w in json.dumps(view["messages"])]
    status, listing, _ = api.call("GET", "/api/conversations")
    assert [c["title"] for c in listing["conversations"] if c["conversationId"] == cid] == [""]

    # The conversation goes on: the model gets a valid history of tombstones.
    api.model.requests.clear()
    api.model.script = [answer("How can I help?")]
    chat(api, "Hello again", cid)
    (request,) = api.model.requests
    assert hist.problems(request.messages) == []
    sent = json.dumps(request.messages)
    assert ERASED in sent and not [w for w in SECRET_WORDS if w in sent]
    assert hist.problems(stored(api, cid)) == []

    # Idempotent: a second erasure tombstones only what is new (the two messages of the last turn).
    status, again, _ = erase(api, 7)
    assert (status, again["messages"], again["complete"]) == (200, 2, True)


def test_a_conversation_in_a_turn_is_skipped_then_finished(api: Api) -> None:
    api.model.script = [answer("Noted, Elm Street.")]
    cid = chat(api, "Ship it to Elm Street", customer=9)["conversationId"]
    ddb = boto3.client("dynamodb")
    key = {"conversation_id": {"S": cid}, "seq": {"N": "0"}}
    ddb.update_item(  # a turn holds the lease
        TableName=table(api, "CONVERSATIONS_TABLE"),
        Key=key,
        UpdateExpression="SET lease_owner = :o, lease_expires_at = :u",
        ExpressionAttributeValues={":o": {"S": "req-busy"}, ":u": {"N": str(int(time.time()) + 60)}},
    )
    status, body, _ = erase(api, 9)
    assert status == 200
    assert (body["complete"], body["skipped"], body["conversations"], body["messages"]) == (False, [cid], 0, 0)
    assert "Elm Street" in json.dumps(stored(api, cid)), "nothing erased under a running turn"
    assert audit_items(api, 9)[-1]["outcome"]["S"] == "partial"
    header = ddb.get_item(TableName=table(api, "CONVERSATIONS_TABLE"), Key=key)["Item"]
    assert header["lease_owner"] == {"S": "req-busy"}, "the turn's lease is left alone"

    ddb.update_item(
        TableName=table(api, "CONVERSATIONS_TABLE"), Key=key, UpdateExpression="REMOVE lease_owner, lease_expires_at"
    )
    status, body, _ = erase(api, 9)
    assert (status, body["complete"], body["conversations"], body["messages"]) == (200, True, 1, 2)
    assert "Elm Street" not in json.dumps(stored(api, cid))
    header = ddb.get_item(TableName=table(api, "CONVERSATIONS_TABLE"), Key=key)["Item"]
    assert "lease_owner" not in header and "erased_at" in header and "title" not in header


def test_a_customer_without_conversations_is_erased_trivially(api: Api) -> None:
    status, body, _ = erase(api, 4242)
    assert status == 200
    assert (body["conversations"], body["messages"], body["complete"]) == (0, 0, True)
    assert audit_items(api, 4242)[-1]["action"]["S"] == "customer_erased"
