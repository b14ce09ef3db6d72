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
