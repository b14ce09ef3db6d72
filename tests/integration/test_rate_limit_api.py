"""The per-customer turn limit on the deployed template: 429 rate_limited with Retry-After, per customer."""

from __future__ import annotations

import time
from typing import Any

import boto3
import pytest

from support_agent.store.ratelimit import KEY_PREFIX
from tests.integration.conftest import Api
from tests.support.openapi import assert_documented
from tests.support.scripted import answer

LIMIT = 2


@pytest.fixture
def limited(api: Api) -> Api:
    """The chat function with TURNS_PER_MINUTE=2, at least 5 s before the minute turns over (a test takes ~1 s)."""
    api.overrides["TURNS_PER_MINUTE"] = str(LIMIT)
    api.current = ""  # re-apply the function's environment with the override
    api.use_function("ChatFunction")
    left = 60 - time.time() % 60
    if left < 5:
        time.sleep(left + 0.05)
    return api


def chat(api: Api, message: str, customer_id: int = 7) -> tuple[int, Any, dict[str, str]]:
    token = api.token(f"customer-{customer_id}", customer_id=customer_id)
    return api.call("POST", "/api/chat", {"conversationId": None, "message": message}, token=token)


def test_over_the_limit_is_429_with_retry_after_and_others_are_unaffected(limited: Api) -> None:
    api = limited
    api.model.script = [answer("One."), answer("Two."), answer("For customer 8.")]
    minute = int(time.time() // 60)
    ok = [chat(api, f"turn {n}") for n in range(LIMIT)]
    assert [s for s, _, _ in ok] == [200] * LIMIT, ok
    for status, body, headers in ok:
        assert_documented("POST", "/api/chat", status, body, headers)

    status, body, headers = chat(api, "one too many")
    assert (status, body["error"]["code"]) == (429, "rate_limited"), body
    assert_documented("POST", "/api/chat", status, body, headers)
    retry = int(headers["Retry-After"])
    assert 1 <= retry <= 60
    assert abs(retry - (60 - time.time() % 60)) <= 2  # the seconds left in this minute
    assert len(api.model.requests) == LIMIT, "a refused turn never reaches the model"

    status, body, _ = chat(api, "hello from 8", customer_id=8)
    assert status == 200, body
    assert int(time.time() // 60) == minute, "the test ran across a minute boundary"

    # The counter is invisible to the conversation list: exactly the turns that ran are listed.
    status, listing, _ = api.call("GET", "/api/conversations", token=api.token())
    assert status == 200
    assert_documented("GET", "/api/conversations", status, listing)
    ids = [c["conversationId"] for c in listing["conversations"]]
    assert {b["conversationId"] for _, b, _ in ok} <= set(ids)
    assert not [i for i in ids if not i.startswith("conv_")]

    table = api.stack.function_env("ChatFunction")["CONVERSATIONS_TABLE"]
    key = {"conversation_id": {"S": f"{KEY_PREFIX}7#{minute}"}, "seq": {"N": "0"}}
    item = boto3.client("dynamodb").get_item(TableName=table, Key=key)["Item"]
    assert item["count"] == {"N": str(LIMIT)}
    assert int(item["expires_at"]["N"]) > time.time()
    assert "customer_id" not in item


def test_invalid_requests_are_refused_before_they_count(limited: Api) -> None:
    api = limited
    for _ in range(LIMIT + 1):  # blank messages: 400, never counted
        status, body, _ = chat(api, "   ", customer_id=21)
        assert (status, body["error"]["code"]) == (400, "bad_request")
    api.model.script = [answer("Still allowed.")]
    status, body, _ = chat(api, "a real question", customer_id=21)
    assert status == 200, body


READS = 3


@pytest.fixture
def read_limited(api: Api) -> Api:
    """The chat function with READS_PER_MINUTE=3 (and its turn limit high), clear of a minute boundary."""
    assert api.stack.function_env("ChatFunction")["READS_PER_MINUTE"] == "60"  # the template's default
    api.overrides.update(READS_PER_MINUTE=str(READS), TURNS_PER_MINUTE="1000")
    api.current = ""
    api.use_function("ChatFunction")
    left = 60 - time.time() % 60
    if left < 5:
        time.sleep(left + 0.05)
    return api


def test_conversation_reads_have_their_own_per_customer_limit(read_limited: Api) -> None:
    api = read_limited
    api.model.script = [answer("Hello.")]
    _, first, _ = chat(api, "hello", customer_id=31)
    cid = first["conversationId"]
    token = api.token("customer-31", customer_id=31)
    minute = int(time.time() // 60)
    reads = [("GET", "/api/conversations"), ("GET", f"/api/conversations/{cid}"), ("GET", "/api/conversations")]
    for method, path in reads:
        status, body, headers = api.call(method, path, token=token)
        assert status == 200, body
    for path in ("/api/conversations", f"/api/conversations/{cid}"):
        status, body, headers = api.call("GET", path, token=token)
        assert (status, body["error"]["code"]) == (429, "rate_limited"), body
        assert_documented("GET", path, status, body, headers)
        assert 1 <= int(headers["Retry-After"]) <= 60
    # Another customer reads on; this customer's turns are a separate counter and still run.
    assert api.call("GET", "/api/conversations", token=api.token("customer-32", customer_id=32))[0] == 200
    api.model.script = [answer("Still chatting.")]
    assert chat(api, "and a turn", customer_id=31)[0] == 200
    assert int(time.time() // 60) == minute, "the test ran across a minute boundary"

    table = api.stack.function_env("ChatFunction")["CONVERSATIONS_TABLE"]
    ddb = boto3.client("dynamodb")
    reads_key = {"conversation_id": {"S": f"{KEY_PREFIX}reads#31#{minute}"}, "seq": {"N": "0"}}
    turns_key = {"conversation_id": {"S": f"{KEY_PREFIX}31#{minute}"}, "seq": {"N": "0"}}
    assert ddb.get_item(TableName=table, Key=reads_key)["Item"]["count"] == {"N": str(READS)}
    assert ddb.get_item(TableName=table, Key=turns_key)["Item"]["count"] == {"N": "2"}


def test_a_refused_read_costs_no_query(read_limited: Api) -> None:
    """Over the limit, the route answers before it touches the conversations (one UpdateItem, no Query)."""
    api = read_limited
    token = api.token("customer-33", customer_id=33)
    for _ in range(READS):
        assert api.call("GET", "/api/conversations", token=token)[0] == 200
    calls: list[str] = []
    events = boto3._get_default_session().events

    def handler(model: Any, **_kw: Any) -> None:
        calls.append(model.name)

    events.register("before-call.dynamodb", handler)
    api.current = ""
    api.use_function("ChatFunction")  # fresh clients, made after the hook
    try:
        assert api.call("GET", "/api/conversations", token=token)[0] == 429
    finally:
        events.unregister("before-call.dynamodb", handler)
    assert calls == ["UpdateItem"]
