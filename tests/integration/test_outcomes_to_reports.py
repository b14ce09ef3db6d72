"""Issue 35 end to end on the deployed template: a day of conversations through the real routes → outcomes → the
daily rollup → the leads' report, equal to figures computed by hand here; then an erasure, after which the day's
ratings drop by exactly the erased customer's and no comment or customer id is anywhere in what is stored or shown.

The test writes no outcome and no rollup item: the customers chat and rate through ChatFunction (the scripted
model), a lead approves a held refund (RefundFlow runs in moto) and closes a hand-off through ApprovalsFunction,
OutcomeSweepFunction's sweeper runs with its clock moved past quiet (as test_outcome_sweep does), then
DailyRollupFunction's handler. Times stamped by the routes are real, so the decision and close times are computed
from the stamps the lead's API shows; the rollup's own clock is the sweep's. Near midnight (UTC) the refunds' and
hand-offs' day (when they were created) may precede the outcomes' day (when they went quiet): each figure is read
on its own day.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from devstack.seed import put_order
from support_agent.clock import parse_iso
from support_agent.store.dynamo import from_item, to_values
from support_agent.store.ratings import RatingStore
from tests.integration.conftest import Api
from tests.integration.test_lead_api import wait_status
from tests.integration.test_outcome_sweep import header, outcome, sweeper, table
from tests.integration.test_reports_api import raw, run_rollup
from tests.support.scripted import answer, tool_use, tools

# Customers not in the demo data, with ids that no count of the day can spell.
LOOKUP, DIRECT, HELD, PERSON, UNHAPPY = 880001, 880002, 880003, 880004, 880005
CUSTOMERS = (LOOKUP, DIRECT, HELD, PERSON, UNHAPPY)
DIRECT_CENTS, HELD_CENTS = 3_000, 18_900  # under and over RefundThresholdCents (5000)
PRAISE, COMPLAINT = "Lovely service, Kestrel", "Not helpful at all, Quokka"
# Every model response is Usage(100, 20): claude-sonnet-4-5 at 3 and 15 USD per million is 600 micro-dollars.
RESPONSE_MICROS, TURN_MICROS = 600, 51  # AwsCostPerTurnMicros' default


def token(api: Api, customer: int) -> str:
    return api.token(f"customer-{customer}", customer_id=customer)


def chat(api: Api, customer: int, message: str, script: list[Any], cid: str | None = None) -> dict[str, Any]:
    api.model.script = script
    status, body, _ = api.call(
        "POST", "/api/chat", {"conversationId": cid, "message": message}, token=token(api, customer)
    )
    assert status == 200, body
    assert api.model.script == [], "the turn did not use its whole script"
    return dict(body)


def rate(api: Api, customer: int, cid: str, body: dict[str, Any]) -> None:
    status, out, _ = api.call("POST", f"/api/conversations/{cid}/rating", body, token=token(api, customer))
    assert status == 200, out


def result_of(turn: dict[str, Any], tool: str) -> dict[str, Any]:
    return next(c["result"] for it in turn["trace"] for c in it["toolCalls"] if c["name"] == tool)


def seconds(start: str, end: str) -> int:
    return round((parse_iso(end) - parse_iso(start)).total_seconds())


def the_day(api: Api) -> dict[str, Any]:
    """The day's five conversations through the routes; what the lead's API showed of the approval and hand-off."""
    ddb, orders = boto3.client("dynamodb"), api.stack.physical_ids["CustomerDataTable"]
    for customer, order_id, total in ((LOOKUP, 55101, 4_000), (DIRECT, 55102, DIRECT_CENTS), (HELD, 55103, HELD_CENTS)):
        put_order(ddb, orders, customer, order_id, total)
    cids: dict[int, str] = {}

    # (a) A lookup answered; thumb up, closing 5 → resolved_by_agent.
    turn = chat(api, LOOKUP, "Where is 55101?", [tools(tool_use("lookup_order", {"order_id": 55101})), answer("Out.")])
    cids[LOOKUP] = turn["conversationId"]
    rate(api, LOOKUP, cids[LOOKUP], {"turnId": turn["turnId"], "thumb": "up"})
    rate(api, LOOKUP, cids[LOOKUP], {"score": 5, "comment": PRAISE})

    # (b) A direct refund under the threshold, refunded in the turn; thumb up → resolved_by_agent.
    refund = {"order_id": 55102, "amount_cents": DIRECT_CENTS, "reason": "late"}
    turn = chat(api, DIRECT, "Refund 55102", [tools(tool_use("request_refund", refund)), answer("Refunded.")])
    cids[DIRECT] = turn["conversationId"]
    assert result_of(turn, "request_refund")["status"] == "REFUNDED"
    rate(api, DIRECT, cids[DIRECT], {"turnId": turn["turnId"], "thumb": "up"})

    # (c) A refund over the threshold, held; a lead approves it and RefundFlow refunds it → resolved_by_agent.
    refund = {"order_id": 55103, "amount_cents": HELD_CENTS, "reason": "damaged"}
    turn = chat(api, HELD, "Refund 55103", [tools(tool_use("request_refund", refund)), answer("A lead will decide.")])
    cids[HELD] = turn["conversationId"]
    held = result_of(turn, "request_refund")
    assert held["status"] == "PENDING_APPROVAL", held
    status, body, _ = api.call("POST", f"/api/approvals/{held['approval_id']}/approve", token=api.lead())
    assert status in (200, 202), body
    approval = wait_status(api, held["approval_id"], "REFUNDED")
    assert approval["status"] == "REFUNDED", approval

    # (d) The customer asks for a person; a lead closes the hand-off → escalated, "requested".
    script = [tools(tool_use("escalate_to_human", {"reason": "wants a person"})), answer("A teammate will join.")]
    turn = chat(api, PERSON, "A human, please", script)
    cids[PERSON] = turn["conversationId"]
    handoff_id = result_of(turn, "escalate_to_human")["handoff_id"]
    status, handoff, _ = api.call("POST", f"/api/handoffs/{handoff_id}/close", {"note": "called"}, token=api.lead())
    assert (status, handoff["status"]) == (200, "CLOSED"), handoff

    # (e) Two answers: the first rated up, the last down, closing 2 with a comment → abandoned, "rated_down".
    first = chat(api, UNHAPPY, "Hello", [answer("Hello! How can I help?")])
    cids[UNHAPPY] = first["conversationId"]
    last = chat(api, UNHAPPY, "My parcel?", [answer("I cannot tell.")], cids[UNHAPPY])
    rate(api, UNHAPPY, cids[UNHAPPY], {"turnId": first["turnId"], "thumb": "up"})
    rate(api, UNHAPPY, cids[UNHAPPY], {"turnId": last["turnId"], "thumb": "down"})
    rate(api, UNHAPPY, cids[UNHAPPY], {"score": 2, "comment": COMPLAINT})
    return {"cids": cids, "approval": approval, "handoff": handoff}


def report(api: Api, first: str, last: str) -> dict[str, dict[str, Any]]:
    status, body, _ = api.call("GET", f"/api/reports/daily?from={first}&to={last}", token=api.lead())
    assert status == 200, body
    text = json.dumps(body)
    assert not [w for w in ("Kestrel", "Quokka", "conv_", "rating#", *map(str, CUSTOMERS)) if w in text], text
    return {d["day"]: d for d in body["days"]}


def stored_rollups(api: Api) -> None:
    """Every stored day: counts only."""
    out = boto3.client("dynamodb").query(
        TableName=table(api),
        KeyConditionExpression="conversation_id = :p",
        ExpressionAttributeValues=to_values({":p": "rollup#daily"}),
        ConsistentRead=True,
    )
    text = json.dumps([from_item(i) for i in out["Items"]], default=str)
    assert out["Items"] and not [w for w in ("Kestrel", "Quokka", "conv_", *map(str, CUSTOMERS)) if w in text]


def assert_outcomes(day: dict[str, Any]) -> None:
    """The outcome items' figures, by hand: five conversations, six turns, ten model responses."""
    assert (day["conversations"], day["turns"]) == (5, 6)
    assert day["outcomes"] == {"resolved_by_agent": 3, "escalated": 1, "abandoned": 1, "waiting_on_lead": 0}
    assert (day["escalation_reasons"], day["abandoned_reasons"]) == ({"requested": 1}, {"rated_down": 1})
    assert (day["resolution_rate"], day["escalation_rate"]) == (0.6, 0.2)
    assert day["actions"] == {}  # refunds are no proposals
    model = 2 * 4 * RESPONSE_MICROS + 2 * RESPONSE_MICROS  # (a)-(d) a tool call and an answer each; (e) two answers
    aws = 6 * TURN_MICROS
    assert (day["model_cost_micros"], day["aws_cost_micros"]) == (model, aws) == (6_000, 306)
    assert day["cost_usd"] == 0.006306
    assert (day["cost_per_conversation_usd"], day["cost_per_resolved_usd"]) == (0.001261, 0.002102)


def assert_money(day: dict[str, Any], seen: dict[str, Any]) -> None:
    """Refunds and hand-offs of the day they were created, the times from the stamps the lead's API showed."""
    refunds = day["refunds"]
    assert (refunds["direct_requested"], refunds["direct_refunded"], refunds["direct_cents"]) == (
        1,
        1,
        {"USD": DIRECT_CENTS},
    )
    assert (refunds["held_requested"], refunds["held_approved"], refunds["approved_refunded"]) == (1, 1, 1)
    assert (refunds["held_rejected"], refunds["held_expired"], refunds["held_pending"]) == (0, 0, 0)
    assert refunds["approved_cents"] == {"USD": HELD_CENTS}
    assert (refunds["refunded"], refunds["refunded_cents"]) == (2, {"USD": DIRECT_CENTS + HELD_CENTS})
    approval = seen["approval"]
    decided = seconds(approval["createdAt"], approval["decidedAt"])
    assert refunds["decision"] == {"count": 1, "median_s": decided, "p95_s": decided}
    settled = refunds["settlement"]
    assert settled["count"] == 2 and 0 <= settled["median_s"] <= settled["p95_s"] <= 20  # the test's span
    handoffs, ticket = day["handoffs"], seen["handoff"]
    assert (handoffs["opened"], handoffs["claimed"], handoffs["closed"], handoffs["returned_to_bot"]) == (1, 0, 1, 0)
    closed = seconds(ticket["createdAt"], ticket["closedAt"])
    assert handoffs["to_claim"] == {"count": 0, "median_s": None, "p95_s": None}
    assert handoffs["to_close"] == {"count": 1, "median_s": closed, "p95_s": closed}


def assert_csv(api: Api, first: str, last: str, day: str) -> None:
    status, text, _ = raw(api, f"/api/reports/daily?from={first}&to={last}&format=csv", api.lead())
    assert status == 200, text
    names, *rows = [line.split(",") for line in text.splitlines()]
    row = {r[0]: dict(zip(names, r, strict=True)) for r in rows}[day]
    assert (row["conversations"], row["turns"], row["outcomes.resolved_by_agent"], row["outcomes.escalated"]) == (
        "5",
        "6",
        "3",
        "1",
    )
    assert (row["resolution_rate"], row["escalation_rate"], row["csat"], row["thumbs_up_share"]) == (
        "0.6",
        "0.2",
        "0.5",
        "0.75",
    )
    assert (row["ratings.thumbs_up"], row["ratings.thumbs_down"], row["ratings.closing"]) == ("3", "1", "2")
    assert row["complete"] == "False" and row["aws_cost_micros"] == "306"


RATING_FIGURES = ("ratings", "csat", "thumbs_up_share", "thumbs_down_share")


def unrated(day: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in day.items() if k not in RATING_FIGURES}


def erased_ratings(api: Api, cids: dict[int, str]) -> None:
    """The erased customer's rating items hold no thumb, score or comment; another customer's are untouched."""
    ratings = RatingStore(boto3.client("dynamodb"), table(api))
    gone = ratings.ratings(cids[UNHAPPY])
    assert (dict(gone.thumbs), gone.closing) == ({}, None)
    out = boto3.client("dynamodb").query(
        TableName=table(api),
        KeyConditionExpression="conversation_id = :p",
        ExpressionAttributeValues=to_values({":p": f"rating#{cids[UNHAPPY]}"}),
        ConsistentRead=True,
    )
    assert len(out["Items"]) == 3 and all("erased_at" in i for i in out["Items"])
    assert not [i for i in out["Items"] if {"thumb", "score", "comment"} & set(i)]
    closing = ratings.ratings(cids[LOOKUP]).closing
    assert closing is not None and (closing.score, closing.comment) == (5, PRAISE)


def sweep_all(api: Api, cids: dict[int, str]) -> int:
    """The sweeper at the last conversation's quiet time: every outcome stored, each final."""
    due = max(header(api, cid)["quiet_check_at"] for cid in cids.values())
    summary = sweeper(api, due).run()
    assert (summary.stored, summary.errors) == (5, 0), summary
    return int(due)


def test_a_day_of_conversations_becomes_the_hand_computed_report(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = the_day(api)
    cids: dict[int, str] = seen["cids"]
    due = sweep_all(api, cids)
    items = {customer: outcome(api, cid) for customer, cid in cids.items()}
    kinds = {c: (o["outcome"], o["reason"], o["final"]) for c, o in items.items() if o}
    assert kinds == {
        LOOKUP: ("resolved_by_agent", "", True),
        DIRECT: ("resolved_by_agent", "", True),
        HELD: ("resolved_by_agent", "", True),
        PERSON: ("escalated", "requested", True),
        UNHAPPY: ("abandoned", "rated_down", True),
    }
    assert not [o for o in items.values() if o and ("customer_id" in o or "Quokka" in json.dumps(o, default=str))]
    ratings = {c: (o["thumbs_up"], o["thumbs_down"], o["score"]) for c, o in items.items() if o}
    assert ratings == {LOOKUP: (1, 0, 5), DIRECT: (1, 0, 0), HELD: (0, 0, 0), PERSON: (0, 0, 0), UNHAPPY: (1, 1, 2)}
    (outcome_day,) = {o["quiet_day"] for o in items.values() if o}
    money_day = seen["approval"]["createdAt"][:10]
    first, last = min(money_day, outcome_day), outcome_day

    moment = datetime.fromtimestamp(due, UTC)
    assert outcome_day in run_rollup(api, moment, monkeypatch)["days"]
    days = report(api, first, last)
    assert days[outcome_day]["complete"] is False  # the day has not ended at the sweep's time
    assert_outcomes(days[outcome_day])
    assert_money(days[money_day], seen)
    ratings_before = days[outcome_day]["ratings"]
    assert ratings_before == {
        "thumbs_up": 3,
        "thumbs_down": 1,
        "rated_conversations": 3,
        "closing": 2,
        "scores_4_5": 1,
    }
    assert (days[outcome_day]["csat"], days[outcome_day]["thumbs_up_share"]) == (0.5, 0.75)
    assert days[outcome_day]["thumbs_down_share"] == 0.25
    assert_csv(api, first, last, outcome_day)
    stored_rollups(api)
    status, body, _ = api.call("GET", f"/api/reports/daily?from={first}&to={last}", token=token(api, UNHAPPY))
    assert (status, body["error"]["code"]) == (403, "forbidden")

    # The unhappy customer is erased: their thumbs (one up, one down) and closing 2 leave the day's ratings.
    status, erased, _ = api.call("POST", f"/api/customers/{UNHAPPY}/erase", {"reason": "GDPR"}, token=api.lead())
    assert (status, erased["complete"], erased["conversations"]) == (200, True, 1), erased
    later = due + 3600
    assert sweeper(api, later).run().stored == 0  # erasure is no activity: nothing to derive again
    kept = outcome(api, cids[UNHAPPY])
    assert kept is not None and kept["ratings_erased_at"]
    assert (kept["thumbs_up"], kept["thumbs_down"], kept["score"], kept["outcome"]) == (0, 0, 0, "abandoned")
    run_rollup(api, datetime.fromtimestamp(later, UTC), monkeypatch)
    after = report(api, first, last)[outcome_day]
    assert after["ratings"] == {
        "thumbs_up": 3 - 1,
        "thumbs_down": 1 - 1,
        "rated_conversations": 3 - 1,
        "closing": 2 - 1,
        "scores_4_5": 1,
    }
    assert (after["csat"], after["thumbs_up_share"], after["thumbs_down_share"]) == (1.0, 1.0, 0.0)
    assert unrated(after) == unrated(days[outcome_day])  # nothing else moved
    stored_rollups(api)
    erased_ratings(api, cids)
