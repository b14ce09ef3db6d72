"""Idempotency-Key on POST /api/chat and the turn records, on the deployed template: a resend gets the turn's
answer again without a model call, a tool or a rate-limit token; another body is a 422; two at once make one
turn; a refused first attempt leaves the key free; a new conversation resent stays one conversation; the key's
window ends; GET /api/conversations/{id}/turns/{turnId}; erasure removes the turn records' text."""

from __future__ import annotations

import threading
import time
from typing import Any

import boto3

from support_agent.store.dynamo import to_item
from support_agent.store.turns import TurnStore, fingerprint
from tests.integration.conftest import Api
from tests.support.aws import serialised_moto
from tests.support.scripted import answer, tool_use, tools


def table(api: Api) -> str:
    return api.stack.physical_ids["ConversationsTable"]


def chat(api: Api, body: dict[str, Any], key: str | None, token: str = "default") -> tuple[int, Any, dict[str, str]]:
    return api.call("POST", "/api/chat", body, token=token, headers={"idempotency-key": key} if key else None)


def test_a_resend_after_completion_gets_the_same_answer_without_running_again(api: Api) -> None:
    api.model.script = [tools(tool_use("lookup_order", {"order_id": 1042})), answer("Order 1042 shipped.")]
    body = {"conversationId": None, "message": "Where is 1042?"}
    status, first, headers = chat(api, body, "key-complete-1")
    assert status == 200 and "Idempotent-Replayed" not in headers
    assert first["turnId"].startswith("turn_")
    calls = len(api.model.requests)
    status, again, headers = chat(api, body, "key-complete-1")
    assert (status, again, headers.get("Idempotent-Replayed")) == (200, first, "true")
    assert len(api.model.requests) == calls  # no model call, no tool
    # A new conversation resent stays one conversation: the id was allocated with the claim.
    _, listed, _ = api.call("GET", "/api/conversations")
    assert [c["conversationId"] for c in listed["conversations"]].count(first["conversationId"]) == 1
    # Its record: completed, with the same body.
    status, view, _ = api.call("GET", f"/api/conversations/{first['conversationId']}/turns/{first['turnId']}")
    assert (status, view["status"], view["response"], view["error"]) == (200, "completed", first, None)
    other = api.token("customer-8", "customer", 8)
    path = f"/api/conversations/{first['conversationId']}/turns/{first['turnId']}"
    assert api.call("GET", path, token=other)[0] == 404  # not yours reads as missing
    assert api.call("GET", f"/api/conversations/{first['conversationId']}/turns/turn_nope")[0] == 404


def test_the_same_key_with_another_body_is_422_and_a_malformed_key_400(api: Api) -> None:
    api.model.script = [answer("Hello.")]
    assert chat(api, {"message": "hi"}, "key-reuse-1")[0] == 200
    status, body, _ = chat(api, {"message": "something else"}, "key-reuse-1")
    assert (status, body["error"]["code"]) == (422, "idempotency_key_reused")
    for bad in ("", "x" * 256, "has space", "naïve"):
        status, body, _ = (
            chat(api, {"message": "hi"}, bad)
            if bad
            else api.call("POST", "/api/chat", {"message": "hi"}, headers={"idempotency-key": ""})
        )
        assert (status, body["error"]["code"]) == (400, "bad_request"), bad
    # Another customer's identical key is another key (the scope is the customer).
    api.model.script = [answer("Hello Sam.")]
    assert chat(api, {"message": "something else"}, "key-reuse-1", api.token("customer-8", "customer", 8))[0] == 200


def test_a_resend_while_the_turn_runs_gets_202_and_its_location(api: Api) -> None:
    turns = TurnStore(boto3.client("dynamodb"), table(api))
    body = {"conversationId": None, "message": "still thinking"}
    claim = turns.claim(
        7,
        "customer-7",
        "key-running-1",
        fingerprint(None, body["message"]),
        "conv_01JZZZZZZZZZZZZZZZZZZZZZZZ",
        True,
        body["message"],
        now="2026-12-03T00:00:00Z",
        now_epoch=int(time.time()),
        running_seconds=60,
    )
    assert claim.turn is not None
    status, running, headers = chat(api, body, "key-running-1")
    assert status == 202, running
    cid = claim.turn.conversation_id
    assert running == {
        "conversationId": cid,
        "turnId": claim.turn.turn_id,
        "status": "running",
        "eventsUrl": f"/api/conversations/{cid}/events",
    }
    assert headers["Location"] == f"/api/conversations/{claim.turn.conversation_id}/turns/{claim.turn.turn_id}"
    assert api.model.requests == []


def test_two_requests_with_one_key_at_once_make_one_turn(api: Api) -> None:
    gate = threading.Event()
    api.model.on_call = lambda: gate.wait(5)  # the first turn is inside its model call when the second arrives
    api.model.script = [answer("Once.")]
    body = {"conversationId": None, "message": "only once please"}
    api.call("GET", "/api/health")  # the handler loaded before the race
    out: list[tuple[int, Any]] = []

    def send() -> None:
        status, answer_body, _ = chat(api, body, "key-race-1")
        out.append((status, answer_body))

    threads = [threading.Thread(target=send) for _ in range(2)]
    with serialised_moto():
        for t in threads:
            t.start()
        time.sleep(0.5)
        gate.set()
        for t in threads:
            t.join(30)
    assert sorted(s for s, _ in out) == [200, 202], out
    assert len(api.model.requests) == 1
    assert len({b["turnId"] for _, b in out}) == 1


def test_a_refused_first_attempt_leaves_the_key_free(api: Api) -> None:
    api.model.script = [answer("First.")]
    _, first, _ = chat(api, {"message": "start"}, None)
    cid = first["conversationId"]
    ddb = boto3.client("dynamodb")
    ddb.update_item(  # another turn holds the lease
        TableName=table(api),
        Key=to_item({"conversation_id": cid, "seq": 0}),
        UpdateExpression="SET lease_owner = :o, lease_expires_at = :u",
        ExpressionAttributeValues=to_item({":o": "someone-else", ":u": int(time.time()) + 60}),
    )
    body = {"conversationId": cid, "message": "and now?"}
    status, refused, _ = chat(api, body, "key-refused-1")
    assert (status, refused["error"]["code"]) == (409, "conflict")
    ddb.update_item(
        TableName=table(api),
        Key=to_item({"conversation_id": cid, "seq": 0}),
        UpdateExpression="REMOVE lease_owner, lease_expires_at",
    )
    api.model.script = [answer("Now.")]
    status, done, headers = chat(api, body, "key-refused-1")
    assert (status, done["reply"], headers.get("Idempotent-Replayed")) == (200, "Now.", None)
    turns = TurnStore(ddb, table(api)).turns_of(cid)
    assert sorted(t.status for t in turns) == ["completed", "completed", "refused"]
    (refused_turn,) = [t for t in turns if t.status == "refused"]
    assert refused_turn.message is None  # never ran: its message is not kept
    # Another customer's conversation: refused as missing, and nothing of the message is left in its partition.
    other = api.token("customer-8", "customer", 8)
    status, _, _ = chat(api, {"conversationId": cid, "message": "my card is 4242"}, "key-refused-2", other)
    assert status == 404
    items = ddb.query(
        TableName=table(api),
        KeyConditionExpression="conversation_id = :c",
        ExpressionAttributeValues={":c": {"S": f"turn#{cid}"}},
    )["Items"]
    # A request's fingerprint is a SHA-256 hex digest: any four digits turn up in one now and then (CI saw "4242").
    assert "4242" not in str([{k: v for k, v in item.items() if k != "fingerprint"} for item in items])
    assert all(len(item["fingerprint"]["S"]) == 64 for item in items)  # the hash alone, never the message


def test_the_keys_window_ends(api: Api) -> None:
    api.model.script = [answer("Old.")]
    assert chat(api, {"message": "old"}, "key-window-1")[0] == 200
    ddb = boto3.client("dynamodb")
    ddb.update_item(
        TableName=table(api),
        Key=to_item(TurnStore._key_key(7, "key-window-1")),
        UpdateExpression="SET expires_at = :past",
        ExpressionAttributeValues=to_item({":past": int(time.time()) - 1}),
    )
    api.model.script = [answer("New.")]
    status, body, _ = chat(api, {"message": "a new request"}, "key-window-1")
    assert (status, body["reply"]) == (200, "New.")


def test_erasure_removes_the_turn_records_text(api: Api) -> None:
    api.model.script = [answer("Noted.")]
    sam = api.token("customer-8", "customer", 8)
    _, done, _ = chat(api, {"message": "my secret address is 1 Main St"}, "key-erase-1", sam)
    assert api.call("POST", "/api/customers/8/erase", {}, token=api.lead())[0] == 200
    (turn,) = TurnStore(boto3.client("dynamodb"), table(api)).turns_of(done["conversationId"])
    key = TurnStore._turn_key(done["conversationId"], turn.turn_id)
    item = boto3.client("dynamodb").get_item(TableName=table(api), Key=to_item(key))["Item"]
    assert "message_text" not in item and "reply_body" not in item and "erased_at" in item
    assert "1 Main St" not in str(item)
