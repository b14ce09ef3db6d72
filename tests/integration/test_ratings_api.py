"""Customer ratings on the deployed template (POST /api/conversations/{id}/rating): a thumb per answered turn, the
closing rating, the caller's own conversation only, 400 for every other body, the per-customer limit, and the
outcome's re-derivation asked for only once an outcome was stored."""

from __future__ import annotations

import time
from typing import Any

import boto3
import pytest

from support_agent.ids import new_conversation_id
from support_agent.store.ratings import partition
from support_agent.store.turns import new_turn_id, turn_ms
from tests.integration.conftest import Api
from tests.support.openapi import assert_documented
from tests.support.scripted import answer

Answer = tuple[int, Any, dict[str, str]]


def token(api: Api, customer: int) -> str:
    return api.token(f"customer-{customer}", customer_id=customer)


def chat(api: Api, customer: int, cid: str | None = None, reply: str = "Happy to help.") -> dict[str, Any]:
    api.model.script = [answer(reply)]
    status, body, _ = api.call(
        "POST", "/api/chat", {"conversationId": cid, "message": "hello"}, token=token(api, customer)
    )
    assert status == 200, body
    return dict(body)


def rate(api: Api, customer: int, cid: str, body: Any = None, raw: str | None = None) -> Answer:
    path = f"/api/conversations/{cid}/rating"
    status, out, headers = api.call("POST", path, body, token=token(api, customer), raw_body=raw)
    assert_documented("POST", path, status, out, headers)
    return status, out, headers


def items(api: Api, cid: str) -> list[dict[str, Any]]:
    out = boto3.client("dynamodb").query(
        TableName=api.stack.function_env("ChatFunction")["CONVERSATIONS_TABLE"],
        KeyConditionExpression="conversation_id = :p",
        ExpressionAttributeValues={":p": {"S": partition(cid)}},
        ConsistentRead=True,
    )
    return list(out["Items"])


def header(api: Api, cid: str) -> dict[str, Any]:
    key = {"conversation_id": {"S": cid}, "seq": {"N": "0"}}
    table = api.stack.function_env("ChatFunction")["CONVERSATIONS_TABLE"]
    return dict(boto3.client("dynamodb").get_item(TableName=table, Key=key, ConsistentRead=True)["Item"])


def test_a_thumb_on_my_answer_is_stored_once_and_a_changed_vote_replaces_it(api: Api) -> None:
    first = chat(api, 51)
    cid, turn = first["conversationId"], first["turnId"]
    status, body, _ = rate(api, 51, cid, {"turnId": turn, "thumb": "up"})
    assert status == 200, body
    assert {k: body[k] for k in ("conversationId", "turnId", "thumb", "score")} == {
        "conversationId": cid,
        "turnId": turn,
        "thumb": "up",
        "score": None,
    }
    again = rate(api, 51, cid, {"turnId": turn, "thumb": "up"})
    assert again[0] == 200, again  # resent: idempotent
    (item,) = items(api, cid)
    assert (item["seq"]["N"], item["turn_id"]["S"], item["thumb"]["S"]) == (str(turn_ms(turn)), turn, "up")
    second = chat(api, 51, cid, "And another answer.")
    status, body, _ = rate(api, 51, cid, {"turnId": turn, "thumb": "down"})  # changed: the last vote wins
    assert (status, body["thumb"]) == (200, "down")
    assert rate(api, 51, cid, {"turnId": second["turnId"], "thumb": "up"})[0] == 200
    got = {i["turn_id"]["S"]: i["thumb"]["S"] for i in items(api, cid)}
    assert got == {turn: "down", second["turnId"]: "up"}


def test_the_closing_rating_is_stored_stripped_and_replaced_by_a_later_one(api: Api) -> None:
    cid = chat(api, 52)["conversationId"]
    status, body, _ = rate(api, 52, cid, {"score": 2, "comment": "  too slow \n"})
    assert status == 200, body
    assert (body["score"], body["comment"], body["turnId"], body["thumb"]) == (2, "too slow", None, None)
    status, body, _ = rate(api, 52, cid, {"score": 5.0})  # JSON Schema's integer (schemathesis sends these)
    assert (status, body["score"], body["comment"]) == (200, 5, "")
    (item,) = items(api, cid)
    assert (item["seq"]["N"], item["score"]["N"]) == ("0", "5") and "comment" not in item


def _turn_record(api: Api, cid: str, status: str) -> str:
    """A turn record of the conversation that did not complete with an answer."""
    turn = new_turn_id()
    boto3.client("dynamodb").put_item(
        TableName=api.stack.function_env("ChatFunction")["CONVERSATIONS_TABLE"],
        Item={
            "conversation_id": {"S": f"turn#{cid}"},
            "seq": {"N": str(turn_ms(turn))},
            "turn_id": {"S": turn},
            "conversation": {"S": cid},
            "customer_id": {"N": "53"},
            "status": {"S": status},
            "fingerprint": {"S": "x"},
            "created_at": {"S": "2025-06-01T00:00:00Z"},
        },
    )
    return turn


def test_only_my_conversation_and_its_answered_turns_can_be_rated(api: Api) -> None:
    mine = chat(api, 53)
    cid, turn = mine["conversationId"], mine["turnId"]
    other = chat(api, 53)  # another conversation of the same customer: its turn is not of this one
    refused = [
        (54, cid, {"turnId": turn, "thumb": "up"}),  # another customer's conversation reads as unknown
        (54, cid, {"score": 4}),
        (53, new_conversation_id(), {"score": 4}),
        (53, "not-a-conversation", {"score": 4}),
        (53, cid, {"turnId": new_turn_id(), "thumb": "up"}),
        (53, cid, {"turnId": other["turnId"], "thumb": "up"}),
        (53, cid, {"turnId": _turn_record(api, cid, "running"), "thumb": "down"}),
        (53, cid, {"turnId": _turn_record(api, cid, "failed"), "thumb": "down"}),
    ]
    for customer, conversation, body in refused:
        status, out, _ = rate(api, customer, conversation, body)
        assert (status, out["error"]["code"]) == (404, "not_found"), (customer, conversation, body, out)
    assert items(api, cid) == []


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"turnId": "turn_x", "thumb": "up"},
        {"thumb": "up"},
        {"turnId": "TURN", "thumb": "sideways"},
        {"score": 3, "turnId": "TURN", "thumb": "up"},  # both forms at once
        {"score": 0},
        {"score": 6},
        {"score": "5"},
        {"score": 4.5},
        {"score": True},
        {"score": 3, "comment": "x" * 501},
        {"score": 3, "comment": None},
        {"score": 3, "customerId": 8},
        [{"score": 3}],
    ],
)
def test_every_other_body_is_a_400_in_json_and_stores_nothing(api: Api, body: Any) -> None:
    first = chat(api, 55)
    cid = first["conversationId"]
    if isinstance(body, dict) and body.get("turnId") == "TURN":
        body = {**body, "turnId": first["turnId"]}
    status, out, _ = rate(api, 55, cid, body)
    assert (status, out["error"]["code"]) == (400, "bad_request"), out
    assert items(api, cid) == []


def test_malformed_json_is_a_400(api: Api) -> None:
    cid = chat(api, 55)["conversationId"]
    status, out, _ = rate(api, 55, cid, raw='{"score": 3')
    assert (status, out["error"]["code"]) == (400, "bad_request"), out


def test_ratings_have_their_own_per_customer_limit(api: Api) -> None:
    assert api.stack.function_env("ChatFunction")["RATINGS_PER_MINUTE"] == "20"  # the template's default
    cid = chat(api, 56)["conversationId"]
    other = chat(api, 57)["conversationId"]
    api.overrides["RATINGS_PER_MINUTE"] = "3"
    api.current = ""  # re-apply the function's environment with the override
    api.use_function("ChatFunction")
    left = 60 - time.time() % 60
    if left < 5:
        time.sleep(left + 0.05)
    minute = int(time.time() // 60)
    assert [rate(api, 56, cid, {"score": s})[0] for s in (1, 2, 3)] == [200] * 3
    status, body, headers = rate(api, 56, cid, {"score": 4})
    assert (status, body["error"]["code"]) == (429, "rate_limited"), body
    assert 1 <= int(headers["Retry-After"]) <= 60
    assert rate(api, 57, other, {"score": 4})[0] == 200  # another customer rates on
    assert chat(api, 56, cid)["conversationId"] == cid  # and this one's turns are counted apart
    assert int(time.time() // 60) == minute, "the test ran across a minute boundary"
    (item,) = items(api, cid)
    assert item["score"]["N"] == "3"  # the refused rating stored nothing


def test_a_rating_asks_for_the_outcome_again_only_once_one_was_stored(api: Api) -> None:
    first = chat(api, 58)
    cid = first["conversationId"]
    marks = ("outcome_due", "quiet_check_at")
    before = {k: header(api, cid).get(k) for k in marks}
    assert rate(api, 58, cid, {"turnId": first["turnId"], "thumb": "down"})[0] == 200
    assert {k: header(api, cid).get(k) for k in marks} == before  # still active: its pending check reads it
    # The outcome was stored (outcome_at) and the conversation settled (no mark left): the rating asks again.
    boto3.client("dynamodb").update_item(
        TableName=api.stack.function_env("ChatFunction")["CONVERSATIONS_TABLE"],
        Key={"conversation_id": {"S": cid}, "seq": {"N": "0"}},
        UpdateExpression="SET outcome_at = :at REMOVE outcome_due, quiet_check_at",
        ExpressionAttributeValues={":at": {"S": "2025-06-01T00:00:00Z"}},
    )
    start = int(time.time())
    assert rate(api, 58, cid, {"score": 1, "comment": "no"})[0] == 200
    got = header(api, cid)
    assert got["outcome_due"] == {"S": "1"}
    assert start <= int(got["quiet_check_at"]["N"]) <= int(time.time())
