"""OutcomeSweepFunction's logic on the template deployed into moto (docs/OUTCOMES.md).

Conversations are real ones, through the chat API with the scripted model; time is moved on the sweeper's side
only (its clock), to the header's own check time: a conversation quiet for ConversationQuietMinutes (the template's
30) gets its outcome, activity after it asks for a later check, a rating after it re-derives it (revised_at), and an
approval still PENDING keeps it non-final, checked again every hour until the lead decides.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import boto3

from support_agent import wiring
from support_agent.config import get_settings
from support_agent.messages import Usage
from support_agent.outcomes.sweep import OutcomeSweeper
from support_agent.store.conversations import ConversationStore
from support_agent.store.dynamo import from_item, to_item, to_values
from support_agent.store.ratings import RatingStore
from tests.integration.conftest import Api
from tests.support.scripted import answer, seed_scenario

QUIET = 30 * 60


def chat(api: Api, message: str, cid: str | None = None) -> dict[str, Any]:
    api.use_function("ChatFunction")
    status, body, _ = api.call("POST", "/api/chat", {"conversationId": cid, "message": message})
    assert status == 200, body
    return body


def sweeper(api: Api, at: int) -> OutcomeSweeper:
    """The deployed function's sweeper, its clock at epoch second ``at``."""
    api.use_function("OutcomeSweepFunction")
    moment = datetime.fromtimestamp(at, UTC)
    return wiring.build_outcome_sweeper(get_settings(), boto3.client("dynamodb"), clock=lambda: moment)


def table(api: Api) -> str:
    return api.stack.function_env("ChatFunction")["CONVERSATIONS_TABLE"]


def header(api: Api, cid: str) -> dict[str, Any]:
    out = boto3.client("dynamodb").get_item(TableName=table(api), Key=to_item({"conversation_id": cid, "seq": 0}))
    return from_item(out["Item"])


def outcome(api: Api, cid: str) -> dict[str, Any] | None:
    key = to_item({"conversation_id": f"outcome#{cid}", "seq": 0})
    out = boto3.client("dynamodb").get_item(TableName=table(api), Key=key, ConsistentRead=True)
    return from_item(out["Item"]) if "Item" in out else None


def test_a_quiet_conversation_gets_its_outcome_once(api: Api) -> None:
    api.model.script = [answer("Your order 1042 was delivered.", Usage(100, 20))]
    before = int(time.time())
    cid = chat(api, "Where is my order?")["conversationId"]
    marks = header(api, cid)
    assert marks["outcome_due"] == "1"
    assert before + QUIET <= marks["quiet_check_at"] <= int(time.time()) + QUIET
    due = marks["quiet_check_at"]

    assert sweeper(api, due - 1).run().stored >= 0 and outcome(api, cid) is None  # not quiet for long enough yet
    summary = sweeper(api, due).run()
    assert summary.stored >= 1 and summary.errors == 0
    item = outcome(api, cid)
    assert item is not None
    assert (item["outcome"], item["reason"], item["final"], item["definition_version"]) == (
        "resolved_by_agent",
        "",
        True,
        1,
    )
    assert (item["turns"], item["input_tokens"], item["output_tokens"]) == (1, 100, 20)
    assert item["model_cost_micros"] == 600  # claude-sonnet-4-5: 100 x 3 + 20 x 15 USD per million
    assert item["aws_cost_micros"] == 51  # AwsCostPerTurnMicros' default
    assert (item["thumbs_up"], item["thumbs_down"], item["score"], item["handoffs"]) == (0, 0, 0, 0)
    assert item["quiet_day"] == item["quiet_at"][:10] and "revised_at" not in item
    assert "customer_id" not in item and "Where is my order" not in str(item)
    after = header(api, cid)
    assert "outcome_due" not in after and "quiet_check_at" not in after and after["outcome_at"] == item["derived_at"]
    # The day's index lists it; a second run finds nothing due for it.
    by_day = boto3.client("dynamodb").query(
        TableName=table(api),
        IndexName="outcomes_by_day",
        KeyConditionExpression="quiet_day = :d",
        ExpressionAttributeValues=to_values({":d": item["quiet_day"]}),
    )
    assert f"outcome#{cid}" in {i["conversation_id"]["S"] for i in by_day["Items"]}
    assert all(d.conversation_id != cid for d in sweeper(api, due + 60).outcomes.due(due + 60, 100))


def test_activity_after_the_outcome_asks_for_a_later_check_and_revises_it(api: Api) -> None:
    api.model.script = [answer("Delivered.", Usage(100, 20)), answer("You are welcome.", Usage(100, 20))]
    cid = chat(api, "Where is my order?")["conversationId"]
    first_check = header(api, cid)["quiet_check_at"]
    sweeper(api, first_check).run()
    first = outcome(api, cid)
    assert first is not None and first["turns"] == 1

    chat(api, "Thanks!", cid)
    second_check = header(api, cid)["quiet_check_at"]
    assert header(api, cid)["outcome_due"] == "1" and second_check >= first_check
    sweeper(api, second_check - 1).run()
    assert outcome(api, cid) == first  # not quiet again yet
    sweeper(api, second_check).run()
    revised = outcome(api, cid)
    assert revised is not None and revised["turns"] == 2 and revised["aws_cost_micros"] == 102
    assert revised["revised_at"] and revised["derived_at"] == first["derived_at"]
    assert revised["quiet_at"] == first["quiet_at"]  # the first quiet's day keeps it


def test_a_rating_after_the_outcome_re_derives_it(api: Api) -> None:
    api.model.script = [answer("Delivered.", Usage(100, 20))]
    cid = chat(api, "Where is my order?")["conversationId"]
    check = header(api, cid)["quiet_check_at"]
    sweeper(api, check).run()
    stored = outcome(api, cid)
    assert stored is not None and stored["outcome"] == "resolved_by_agent"

    (answered,) = [
        m for m in ConversationStore(boto3.client("dynamodb"), table(api)).load(cid) if m.role == "assistant"
    ]
    ratings = RatingStore(boto3.client("dynamodb"), table(api))
    ratings.put_thumb(cid, str(answered.turn_id), "down", "2030-01-01T00:00:00.000Z")
    asked = check + 120
    assert ratings.request_revision(cid, asked)
    sweeper(api, asked).run()
    revised = outcome(api, cid)
    assert revised is not None
    assert (revised["outcome"], revised["reason"], revised["thumbs_down"]) == ("abandoned", "rated_down", 1)
    assert revised["revised_at"] and revised["derived_at"] == stored["derived_at"]
    assert "outcome_due" not in header(api, cid)


def test_a_pending_approval_is_not_final_until_the_lead_decides(api: Api) -> None:
    api.model.script = seed_scenario("damaged", "A teammate must approve this refund.")
    body = chat(api, "Refund order 1042, please.")
    cid = body["conversationId"]
    approval_id = next(
        c["result"]["approval_id"] for it in body["trace"] for c in it["toolCalls"] if c["name"] == "request_refund"
    )
    check = header(api, cid)["quiet_check_at"]
    sweeper(api, check).run()
    waiting = outcome(api, cid)
    assert waiting is not None
    assert (waiting["outcome"], waiting["final"], waiting["pending_approvals"]) == ("waiting_on_lead", False, 1)
    marks = header(api, cid)
    assert marks["outcome_due"] == "1" and marks["quiet_check_at"] == check + 3600  # again in an hour

    sweeper(api, check + 3600).run()  # still pending: checked again, nothing changed
    assert outcome(api, cid) == waiting and header(api, cid)["quiet_check_at"] == check + 7200

    api.use_function("ApprovalsFunction")
    status, decided, _ = api.call(
        "POST", f"/api/approvals/{approval_id}/reject", {"reason": "not eligible"}, token=api.lead()
    )
    assert status == 200, decided
    sweeper(api, check + 7200).run()
    final = outcome(api, cid)
    assert final is not None
    assert (final["outcome"], final["final"], final["pending_approvals"]) == ("resolved_by_agent", True, 0)
    assert final["revised_at"] and "outcome_due" not in header(api, cid)
