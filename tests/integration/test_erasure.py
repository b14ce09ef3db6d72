"""Erasure of a customer's conversations on the deployed template: tombstones, valid history, intact audit."""

from __future__ import annotations

import json
import time
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from support_agent import wiring
from support_agent.agent import history as hist
from support_agent.store import erasure
from support_agent.store.erasure import ERASED
from tests.integration.conftest import Api
from tests.support.openapi import assert_documented
from tests.support.scripted import answer, seed_scenario

SECRET_WORDS = ("Elm Street", "allergic", "1042")


def table(api: Api, name: str) -> str:
    return api.stack.function_env("ApprovalsFunction")[name]


def chat(api: Api, message: str, cid: str | None = None, customer: int = 7) -> dict[str, Any]:
    token = api.token(f"customer-{customer}", customer_id=customer)
    status, body, headers = api.call("POST", "/api/chat", {"conversationId": cid, "message": message}, token=token)
    assert status == 200, body
    assert_documented("POST", "/api/chat", status, body, headers)
    return dict(body)


def message_items(api: Api, cid: str) -> list[dict[str, Any]]:
    out = boto3.client("dynamodb").query(
        TableName=table(api, "CONVERSATIONS_TABLE"),
        KeyConditionExpression="conversation_id = :c AND seq > :z",
        ExpressionAttributeValues={":c": {"S": cid}, ":z": {"N": "0"}},
        ConsistentRead=True,
    )
    return list(out["Items"])


def stored(api: Api, cid: str) -> list[dict[str, Any]]:
    return [{"role": i["role"]["S"], "content": json.loads(i["content"]["S"])} for i in message_items(api, cid)]


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
    api.model.script = seed_scenario(
        "allergic reaction",
        "Order 1042 is delivered; a teammate will approve the refund. Noted: you live on Elm Street.",
    )
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

    # The audit trail is intact (rows unchanged), plus the erasure's rows: one conversation_erased row per
    # transaction of tombstones (one here: 8 messages), written with them, and the customer_erased summary.
    audit_after = audit_items(api, 7)
    assert audit_after[: len(audit_before)] == audit_before
    new_rows = audit_after[len(audit_before) :]
    (erased_row,) = [r for r in new_rows if r["action"]["S"] == "customer_erased"]
    (chunk_row,) = [r for r in new_rows if r["action"]["S"] == "conversation_erased"]
    assert len(new_rows) == 2
    assert erased_row["event_id"]["S"] == body["auditEventId"]
    for row in (erased_row, chunk_row):
        assert row["actor"]["S"] == "lead-1"
        assert json.loads(row["input"]["S"]) == {"reason": "GDPR request #123"}
    assert chunk_row["request_id"] == erased_row["request_id"]
    assert (chunk_row["stream"]["S"], chunk_row["conversation_id"]["S"]) == (cid, cid)
    assert json.loads(chunk_row["output"]["S"]) == {"messages": len(before), "seqs": list(range(1, len(before) + 1))}
    assert json.loads(erased_row["output"]["S"])["messages"] == body["messages"]
    status, trail, _ = api.call("GET", "/api/audit?customerId=7", token=api.lead())
    assert status == 200
    assert_documented("GET", "/api/audit", status, trail)
    assert {"conversation_erased", "customer_erased"} <= {r["action"] for r in trail["records"]}
    status, trail, _ = api.call("GET", f"/api/audit?conversationId={cid}", token=api.lead())
    assert status == 200
    assert [r["actor"] for r in trail["records"] if r["action"] == "conversation_erased"] == ["lead-1"]
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


def tombstoned(api: Api, cids: list[str]) -> set[tuple[str, int]]:
    return {(cid, int(i["seq"]["N"])) for cid in cids for i in message_items(api, cid) if "erased_at" in i}


def audited(api: Api, customer: int) -> dict[tuple[str, int], dict[str, Any]]:
    """(conversation, seq) -> the conversation_erased row that covers that tombstone."""
    return {
        (row["conversation_id"]["S"], seq): row
        for row in audit_items(api, customer)
        if row["action"]["S"] == "conversation_erased"
        for seq in json.loads(row["output"]["S"])["seqs"]
    }


def test_a_throttle_midway_leaves_every_tombstone_audited_and_calling_again_finishes(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    customer = 12
    cids = sorted(a_conversation_with_tools(api, customer) for _ in range(2))
    total = sum(len(stored(api, cid)) for cid in cids)
    monkeypatch.setattr(erasure, "CHUNK_MESSAGES", 3, raising=False)  # several transactions per conversation
    api.use_function("ApprovalsFunction")
    client = wiring.client("dynamodb")  # the client the route's eraser uses
    transactions: list[int] = []

    def throttle_the_second(**_: Any) -> None:
        transactions.append(1)
        if len(transactions) == 2:
            error = {"Code": "ThrottlingException", "Message": "Rate of requests exceeds the allowed throughput."}
            raise ClientError({"Error": error}, "TransactWriteItems")

    client.meta.events.register("before-call.dynamodb.TransactWriteItems", throttle_the_second, unique_id="throttle")
    try:
        with pytest.raises(ClientError, match="ThrottlingException"):
            erase(api, customer, {"reason": "erasure request #9"})
    finally:
        client.meta.events.unregister("before-call.dynamodb.TransactWriteItems", unique_id="throttle")

    # Partial: some messages erased, some not, and every tombstone written is covered by an audit row naming the lead.
    done = tombstoned(api, cids)
    assert 0 < len(done) < total
    rows = audited(api, customer)
    assert set(rows) == done
    for row in rows.values():
        assert (row["actor"]["S"], row["stream"]["S"]) == ("lead-1", row["conversation_id"]["S"])
        assert json.loads(row["input"]["S"]) == {"reason": "erasure request #9"}
        assert row["request_id"]["S"].startswith("it-")
    assert not [r for r in audit_items(api, customer) if r["action"]["S"] == "customer_erased"]
    header = boto3.client("dynamodb").get_item(
        TableName=table(api, "CONVERSATIONS_TABLE"), Key={"conversation_id": {"S": cids[0]}, "seq": {"N": "0"}}
    )["Item"]
    assert "lease_owner" not in header and "erased_at" not in header, "lease released, not marked erased"

    # Calling again finishes the job; the counts add up, per call and overall.
    status, body, _ = erase(api, customer)
    assert (status, body["complete"], body["conversations"]) == (200, True, 2)
    assert body["messages"] == total - len(done)
    assert tombstoned(api, cids) == {(c, s) for c in cids for s in range(1, len(stored(api, c)) + 1)}
    rows = audited(api, customer)
    assert len(rows) == total
    summary = next(r for r in audit_items(api, customer) if r["event_id"]["S"] == body["auditEventId"])
    this_call = {r["event_id"]["S"]: r for r in rows.values() if r["request_id"] == summary["request_id"]}
    assert sum(json.loads(r["output"]["S"])["messages"] for r in this_call.values()) == body["messages"]
    assert json.loads(summary["output"]["S"])["messages"] == body["messages"]
    for cid in cids:
        assert not [w for w in SECRET_WORDS if w in json.dumps(stored(api, cid))]
        assert hist.problems(stored(api, cid)) == []


def _rate(api: Api, customer: int, cid: str, body: dict[str, Any]) -> None:
    token = api.token(f"customer-{customer}", customer_id=customer)
    status, out, _ = api.call("POST", f"/api/conversations/{cid}/rating", body, token=token)
    assert status == 200, out


def _item(api: Api, key: str, seq: int = 0) -> dict[str, Any]:
    out = boto3.client("dynamodb").get_item(
        TableName=table(api, "CONVERSATIONS_TABLE"),
        Key={"conversation_id": {"S": key}, "seq": {"N": str(seq)}},
        ConsistentRead=True,
    )
    return dict(out.get("Item", {}))


def _rating_items(api: Api, cid: str) -> list[dict[str, Any]]:
    out = boto3.client("dynamodb").query(
        TableName=table(api, "CONVERSATIONS_TABLE"),
        KeyConditionExpression="conversation_id = :p",
        ExpressionAttributeValues={":p": {"S": f"rating#{cid}"}},
        ConsistentRead=True,
    )
    return list(out["Items"])


def test_erasure_removes_the_ratings_and_comments_and_the_stored_outcomes_rating_figures(api: Api) -> None:
    """The customer's thumbs, score and comment go with the conversation, and the outcome already stored counts
    none of them any more (later rollups read it); a conversation without an outcome gets none, and another
    customer's ratings stay."""
    api.model.script = [answer("Sorry about that.") for _ in range(3)]
    rated, unsettled, other = (chat(api, "hello", customer=c) for c in (61, 61, 62))
    for first, customer in ((rated, 61), (unsettled, 61), (other, 62)):
        _rate(api, customer, first["conversationId"], {"turnId": first["turnId"], "thumb": "down"})
        _rate(api, customer, first["conversationId"], {"score": 2, "comment": "I live on Elm Street"})
    cid = rated["conversationId"]
    figures = {"thumbs_up": {"N": "0"}, "thumbs_down": {"N": "1"}, "score": {"N": "2"}, "turns": {"N": "1"}}
    boto3.client("dynamodb").put_item(
        TableName=table(api, "CONVERSATIONS_TABLE"),
        Item={"conversation_id": {"S": f"outcome#{cid}"}, "seq": {"N": "0"}, "outcome": {"S": "abandoned"}, **figures},
    )

    status, body, _ = erase(api, 61)
    assert (status, body["complete"], body["conversations"]) == (200, True, 2), body

    for conversation in (cid, unsettled["conversationId"]):
        left = _rating_items(api, conversation)
        assert len(left) == 2  # kept as tombstones (no role holds DeleteItem), holding nothing
        for item in left:
            assert not {"thumb", "score", "comment"} & item.keys(), item
            assert "erased_at" in item
        assert "Elm Street" not in json.dumps(left)
    outcome = _item(api, f"outcome#{cid}")
    assert {k: outcome[k] for k in ("thumbs_up", "thumbs_down", "score")} == {
        k: {"N": "0"} for k in figures if k != "turns"
    }
    assert outcome["turns"] == {"N": "1"} and outcome["outcome"] == {"S": "abandoned"}  # the rest is not the customer's
    assert "ratings_erased_at" in outcome
    assert _item(api, f"outcome#{unsettled['conversationId']}") == {}, "no outcome item is created"
    kept = {i.get("thumb", {}).get("S") or i["score"]["N"] for i in _rating_items(api, other["conversationId"])}
    assert kept == {"down", "2"}, "another customer's ratings stay"
