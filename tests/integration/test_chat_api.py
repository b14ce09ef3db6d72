"""POST /api/chat and the conversation reads, through API Gateway v2 events on the deployed template."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import boto3

from support_agent.agent import history as hist
from support_agent.messages import Usage
from tests.integration.conftest import Api
from tests.support.openapi import assert_documented
from tests.support.routes import CHAT_ROUTES
from tests.support.scripted import answer, seed_scenario, tool_use, tools
from tests.support.transport import HttpFailure


def chat(api: Api, message: str, cid: str | None = None, **kw: Any) -> tuple[int, Any, dict[str, str]]:
    return api.call("POST", "/api/chat", {"conversationId": cid, "message": message}, **kw)


def audit_rows(api: Api, cid: str) -> list[dict[str, Any]]:
    table = api.stack.function_env("ChatFunction")["AUDIT_TABLE"]
    out = boto3.client("dynamodb").query(
        TableName=table,
        KeyConditionExpression="#s = :s",
        ExpressionAttributeNames={"#s": "stream"},
        ExpressionAttributeValues={":s": {"S": cid}},
    )
    return out["Items"]


def test_every_template_route_is_served(api: Api) -> None:
    assert {(r.method, r.path) for r in api.stack.routes if r.function == "ChatFunction"} >= CHAT_ROUTES
    status, body, _ = api.call("GET", "/api/health", token=None)
    assert (status, body) == (200, {"status": "ok"})


def test_seed_scenario_and_reader_view(api: Api) -> None:
    api.model.script = seed_scenario(
        "customer request",
        "Order 1042 was delivered. The refund of 189.00 needs a teammate's approval.",
        (Usage(1000, 50), Usage(1100, 60), Usage(210, 77)),
    )
    status, body, _ = chat(api, "Where is my order 1042? Also refund it.")
    assert status == 200, body
    assert body["stopReason"] == "end_turn" and body["iterations"] == 3
    assert (body["inputTokens"], body["outputTokens"]) == (2310, 187)
    assert body["conversationId"].startswith("conv_")
    calls = [c for it in body["trace"] for c in it["toolCalls"]]
    assert [c["name"] for c in calls] == ["lookup_order", "request_refund"]
    approval_id = calls[1]["result"]["approval_id"]
    # The wire request carried cache_control marks; the stored history does not.
    status, view, _ = api.call("GET", f"/api/conversations/{body['conversationId']}")
    assert status == 200, view
    assert "cache_control" not in json.dumps(view)
    roles = [m["role"] for m in view["messages"]]
    assert roles == ["user", "assistant", "assistant", "assistant"]
    assert view["messages"][1]["toolCalls"][0]["result"]["status"] == "DELIVERED"  # fence removed
    assert view["refunds"] == [
        {
            "approvalId": approval_id,
            "refundId": None,
            "orderId": 1042,
            "amountCents": 18900,
            "currency": "USD",
            "status": "PENDING_APPROVAL",
        }
    ]
    rows = audit_rows(api, body["conversationId"])
    assert sum(1 for r in rows if r["action"]["S"] == "tool_call") == len(calls)
    # The conversation is listed for its owner only.
    status, listing, _ = api.call("GET", "/api/conversations")
    assert body["conversationId"] in [c["conversationId"] for c in listing["conversations"]]
    status, listing8, _ = api.call("GET", "/api/conversations", token=api.token("customer-8", customer_id=8))
    assert body["conversationId"] not in [c["conversationId"] for c in listing8["conversations"]]


def test_history_replay_across_turns(api: Api) -> None:
    api.model.script = [answer("Hello Dana")]
    _, first, _ = chat(api, "hi")
    api.model.script = [answer("Still here")]
    status, second, _ = chat(api, "are you there?", first["conversationId"])
    assert status == 200 and second["conversationId"] == first["conversationId"]
    sent = api.model.requests[-1].messages
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert hist.problems(sent) == []


def test_cross_customer_access(api: Api) -> None:
    api.model.script = [tools(tool_use("lookup_order", {"order_id": 2002})), answer("Not found.")]
    status, body, _ = chat(api, "I am customer 8, show order 2002")
    assert status == 200
    result = body["trace"][0]["toolCalls"][0]["result"]
    assert "not found" in result["error"] and "Headlamp" not in json.dumps(body)
    # Another customer's conversation is a 404, exactly like a missing one.
    other = api.token("customer-8", customer_id=8)
    s1, b1, _ = api.call("GET", f"/api/conversations/{body['conversationId']}", token=other)
    s2, b2, _ = api.call("GET", "/api/conversations/conv_01JF3Q4Z9X8Y7W6V5T4S3R2Q1P", token=other)
    assert (s1, b1) == (s2, b2) == (404, {"error": {"code": "not_found", "message": "conversation not found"}})
    s3, _, _ = chat(api, "continue", body["conversationId"], token=other)
    assert s3 == 404


def test_identity_never_from_the_body(api: Api) -> None:
    status, body, _ = api.call("POST", "/api/chat", {"message": "hi", "customerId": 8})
    assert status == 400 and body["error"]["code"] == "bad_request"


def _error(status: int, code: str, resp: tuple[int, Any, dict[str, str]]) -> None:
    assert resp[0] == status, resp
    assert resp[1]["error"]["code"] == code and resp[1]["error"]["message"]


def test_400s(api: Api) -> None:
    _error(400, "bad_request", api.call("POST", "/api/chat", raw_body="{not json"))
    _error(400, "bad_request", api.call("POST", "/api/chat", {"message": 42}))
    _error(400, "bad_request", api.call("POST", "/api/chat", {}))
    _error(400, "bad_request", api.call("POST", "/api/chat", {"message": "hi", "conversationId": "conv_x#1"}))
    _error(400, "bad_request", api.call("POST", "/api/chat", {"message": "   "}))
    _error(400, "bad_request", api.call("GET", "/api/conversations?nextToken=garbage"))


def test_401s_and_403(api: Api) -> None:
    _error(401, "unauthorized", api.call("POST", "/api/chat", {"message": "hi"}, token=None))
    _error(401, "unauthorized", api.call("POST", "/api/chat", {"message": "hi"}, token="not.a.jwt"))
    expired = api.token(ttl_seconds=-120)
    _error(401, "unauthorized", api.call("POST", "/api/chat", {"message": "hi"}, token=expired))
    no_customer = api.token("customer-x", "customer", None)
    _error(401, "unauthorized", api.call("POST", "/api/chat", {"message": "hi"}, token=no_customer))
    _error(403, "forbidden", api.call("POST", "/api/chat", {"message": "hi"}, token=api.lead()))
    _error(403, "forbidden", api.call("GET", "/api/conversations", token=api.lead()))
    assert api.model.requests == []


def test_404_unknown_route(api: Api) -> None:
    _error(404, "not_found", api.call("GET", "/api/nope"))
    _error(404, "not_found", api.call("GET", "/api/conversations/not-an-id"))


def test_409_concurrent_turn(api: Api) -> None:
    api.model.script = [answer("hi")]
    _, first, _ = chat(api, "hello")
    cid = first["conversationId"]
    entered, release = threading.Event(), threading.Event()

    def block() -> None:
        entered.set()
        release.wait(10)

    api.model.on_call = block
    api.model.script = [answer("slow answer")]
    results: list[Any] = []
    t = threading.Thread(target=lambda: results.append(chat(api, "slow", cid)))
    t.start()
    assert entered.wait(10)
    api.model.on_call = None
    _error(409, "conflict", chat(api, "fast", cid))
    release.set()
    t.join(10)
    assert results[0][0] == 200


def test_413(api: Api) -> None:
    _error(413, "too_large", api.call("POST", "/api/chat", raw_body="x" * 20000))
    _error(413, "too_large", api.call("POST", "/api/chat", {"message": "y" * 4001}))


def test_429_token_budget(api: Api) -> None:
    api.overrides["CONVERSATION_TOKEN_BUDGET"] = "500"
    api.current = ""
    api.model.script = [answer("long", Usage(400, 200))]
    _, first, _ = chat(api, "hello")
    _error(429, "token_budget_exhausted", chat(api, "more", first["conversationId"]))


def test_502_model_refused(api: Api) -> None:
    upstream = "not authorized: arn:aws:iam::123456789012:role/ChatFunctionRole on arn:aws:bedrock:us-east-1::model/x"
    api.model.script = [
        HttpFailure(400, {"type": "error", "error": {"type": "invalid_request_error", "message": upstream}})
    ]
    status, body, headers = chat(api, "hello")
    _error(502, "model_error", (status, body, headers))
    assert len(api.model.requests) == 1  # no retry
    # The provider's words stay in our log: every customer would otherwise read the account and the role.
    assert body["error"]["message"] == "the model API refused the request (HTTP 400 invalid_request_error)"
    assert "123456789012" not in json.dumps(body)
    assert_documented("POST", "/api/chat", status, body, headers)


def test_503_model_unavailable_with_retry_after(api: Api) -> None:
    overloaded = HttpFailure(
        529, {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}, {"retry-after": "0"}
    )
    api.model.script = [overloaded, overloaded]
    started = time.monotonic()
    status, body, headers = chat(api, "hello")
    _error(503, "model_unavailable", (status, body, headers))
    assert int(headers["Retry-After"]) >= 1
    assert len(api.model.requests) == 2 and time.monotonic() - started < 10
    # Nothing of the failed turn was stored: the client may resend.
    _, listing, _ = api.call("GET", "/api/conversations")
    assert all(c["title"] != "hello" or c["conversationId"] for c in listing["conversations"])
