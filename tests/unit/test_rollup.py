"""The daily rollup's arithmetic against a hand-made day (support_agent/reports): outcomes, refunds direct and
approved, nearest-rank percentiles, the ratings' definitions with zero denominators, and what is never stored."""

from __future__ import annotations

import json
from datetime import date
from typing import Any

import pytest

from support_agent.errors import InvalidRequest
from support_agent.reports.reading import MAX_DAYS, ReportDay, day_range
from support_agent.reports.report import day_view, rates, to_csv
from support_agent.reports.rollup import DayRollup, nearest_rank, rollup

DAY = "2030-03-01"


def at(clock: str) -> str:
    return f"{DAY}T{clock}.000Z"


def outcome(kind: str, reason: str = "", **figures: Any) -> dict[str, Any]:
    # What an outcome item holds besides the figures; none of it may reach the rollup.
    return {
        "conversation_id": "outcome#conv_01SECRETCONVERSATION",
        "seq": 0,
        "customer_id": 4242,
        "comment": "the parcel came wet",
        "quiet_day": DAY,
        "quiet_at": at("10:00:00"),
        "outcome": kind,
        "reason": reason,
        **figures,
    }


OUTCOMES = [
    outcome(
        "resolved_by_agent",
        turns=3,
        thumbs_up=2,
        score=5,
        actions={"cancel_order": 1},
        model_cost_micros=1_000,
        aws_cost_micros=153,
    ),
    outcome("resolved_by_agent", turns=2, thumbs_up=1, thumbs_down=1, model_cost_micros=500, aws_cost_micros=102),
    outcome("escalated", "requested", turns=4, score=2, model_cost_micros=2_000, aws_cost_micros=204),
    outcome("escalated", "after_refusal", turns=1, model_cost_micros=245, aws_cost_micros=51),
    outcome("abandoned", "no_answer", turns=1),
    outcome("waiting_on_lead", turns=2, score=4, actions={"cancel_order": 1, "change_address": 2}),
]
LEDGER = [
    {
        "kind": "direct",
        "status": "SUCCEEDED",
        "amount_cents": 500,
        "currency": "usd",
        "customer_id": 4242,
        "created_at": at("10:00:00"),
        "settled_at": at("10:00:04"),
        "updated_at": at("10:00:04"),
    },
    # No settled_at (written before it existed): updated_at is when it settled.
    {
        "kind": "direct",
        "status": "SUCCEEDED",
        "amount_cents": 700,
        "currency": "USD",
        "created_at": at("11:00:00"),
        "updated_at": at("11:01:40"),
    },
    {
        "kind": "direct",
        "status": "FAILED",
        "amount_cents": 300,
        "currency": "USD",
        "created_at": at("12:00:00"),
        "updated_at": at("12:00:09"),
    },
    # An approved refund's row: counted by its approval, not here.
    {
        "kind": "approved",
        "status": "SUCCEEDED",
        "amount_cents": 2_500,
        "currency": "USD",
        "created_at": at("09:10:00"),
        "updated_at": at("09:10:30"),
    },
]
APPROVALS = [
    {
        "status": "REFUNDED",
        "amount_cents": 2_500,
        "currency": "USD",
        "reason": "customer's words",
        "customer_id": 4242,
        "created_at": at("09:00:00"),
        "decided_at": at("09:10:00"),
        "refunded_at": at("09:10:30"),
    },
    {
        "status": "REJECTED",
        "amount_cents": 900,
        "currency": "USD",
        "decision_reason": "a lead's words",
        "created_at": at("12:00:00"),
        "decided_at": at("14:00:00"),
    },
    {
        "status": "EXPIRED",
        "amount_cents": 800,
        "currency": "USD",
        "created_at": at("01:00:00"),
        "decided_at": at("23:00:00"),
    },
    {"status": "PENDING", "amount_cents": 700, "currency": "USD", "created_at": at("22:00:00")},
    {
        "status": "REFUNDED",
        "amount_cents": 1_000,
        "currency": "EUR",
        "created_at": at("13:00:00"),
        "decided_at": at("13:00:20"),
        "refunded_at": at("13:01:00"),
    },
]
TICKETS = [
    {
        "status": "CLOSED",
        "closed_as": "closed",
        "created_at": at("10:00:00"),
        "assigned_at": at("10:05:00"),
        "closed_at": at("10:30:00"),
    },
    {
        "status": "CLOSED",
        "closed_as": "returned_to_bot",
        "created_at": at("11:00:00"),
        "assigned_at": at("11:01:00"),
        "closed_at": at("11:10:00"),
    },
    {"status": "OPEN", "created_at": at("12:00:00"), "reason": "the customer's words"},
    {"status": "ASSIGNED", "created_at": at("13:00:00"), "assigned_at": at("13:20:00")},
]


@pytest.fixture
def day() -> DayRollup:
    return rollup(DAY, OUTCOMES, LEDGER, APPROVALS, TICKETS)


def test_outcomes_turns_reasons_actions_and_costs(day: DayRollup) -> None:
    assert day.conversations == 6 and day.turns == 13
    assert day.outcomes == {"resolved_by_agent": 2, "escalated": 2, "abandoned": 1, "waiting_on_lead": 1}
    assert day.escalation_reasons == {"after_refusal": 1, "requested": 1}
    assert day.abandoned_reasons == {"no_answer": 1}
    assert day.actions == {"cancel_order": 2, "change_address": 2}
    assert (day.model_cost_micros, day.aws_cost_micros) == (3_745, 510)


def test_refunds_direct_and_approved(day: DayRollup) -> None:
    r = day.refunds
    assert (r.direct_requested, r.direct_refunded) == (3, 2)
    assert (r.held_requested, r.held_approved, r.held_rejected, r.held_expired, r.held_pending) == (5, 2, 1, 1, 1)
    assert r.approved_refunded == 2
    assert r.direct_cents == {"USD": 1_200}
    assert r.approved_cents == {"EUR": 1_000, "USD": 2_500}
    assert r.totals() == (4, {"EUR": 1_000, "USD": 3_700})


def test_decision_and_settlement_times(day: DayRollup) -> None:
    # Decisions by a lead (not the expiry, not the pending one): 600, 7200, 20 s.
    decision = day.refunds.decision
    assert (decision.count, decision.median_s, decision.p95_s) == (3, 600, 7_200)
    # Settled: direct 4 s (settled_at) and 100 s (updated_at); approved 630 s and 60 s (refunded_at).
    settlement = day.refunds.settlement
    assert (settlement.count, settlement.median_s, settlement.p95_s) == (4, 60, 630)


def test_handoffs(day: DayRollup) -> None:
    h = day.handoffs
    assert (h.opened, h.claimed, h.closed, h.returned_to_bot) == (4, 3, 1, 1)
    assert (h.to_claim.count, h.to_claim.median_s, h.to_claim.p95_s) == (3, 300, 1_200)
    assert (h.to_close.count, h.to_close.median_s, h.to_close.p95_s) == (2, 600, 1_800)


@pytest.mark.parametrize(
    ("values", "percent", "expected"),
    [
        (list(range(1, 21)), 95, 19),  # rank ceil(0.95 * 20) = 19
        (list(range(1, 21)), 50, 10),  # rank 10: the lower middle value
        (list(range(1, 101)), 95, 95),
        ([30, 10, 20], 50, 20),  # sorted first
        ([7], 95, 7),
        ([7], 50, 7),
        ([], 50, None),
    ],
)
def test_nearest_rank(values: list[int], percent: int, expected: int | None) -> None:
    assert nearest_rank(values, percent) == expected


def test_ratings_and_rates(day: DayRollup) -> None:
    ratings = day.ratings
    assert (ratings.thumbs_up, ratings.thumbs_down) == (3, 1)
    assert ratings.rated_conversations == 4  # thumbs on 1 and 2, a closing rating on 3 and 6
    assert (ratings.closing, ratings.scores_4_5) == (3, 2)
    assert rates(day) == {
        "resolution_rate": 0.3333,
        "escalation_rate": 0.3333,
        "csat": 0.6667,  # 2 of the 3 closing ratings are 4-5
        "thumbs_up_share": 0.75,
        "thumbs_down_share": 0.25,
        "cost_usd": 0.004255,
        "cost_per_conversation_usd": round(0.004255 / 6, 6),
        "cost_per_resolved_usd": round(0.004255 / 2, 6),
    }


def test_zero_denominators_are_none_not_zero() -> None:
    empty = rollup(DAY, [], [], [], [])
    assert rates(empty) == {
        "resolution_rate": None,
        "escalation_rate": None,
        "csat": None,
        "thumbs_up_share": None,
        "thumbs_down_share": None,
        "cost_usd": 0.0,
        "cost_per_conversation_usd": None,
        "cost_per_resolved_usd": None,
    }
    # Thumbs but no closing rating, conversations but none resolved.
    thumbs_only = rollup(DAY, [outcome("escalated", "requested", thumbs_down=2, model_cost_micros=10)], [], [], [])
    computed = rates(thumbs_only)
    assert computed["csat"] is None and computed["thumbs_up_share"] == 0.0 and computed["thumbs_down_share"] == 1.0
    assert computed["resolution_rate"] == 0.0 and computed["cost_per_resolved_usd"] is None
    assert thumbs_only.refunds.decision.median_s is None and thumbs_only.handoffs.to_claim.count == 0


def test_an_erased_customers_ratings_count_for_nothing() -> None:
    erased = outcome("resolved_by_agent", thumbs_up=0, thumbs_down=0, score=0, ratings_erased_at=at("12:00:00"))
    day = rollup(DAY, [erased], [], [], [])
    assert day.ratings.rated_conversations == 0 and rates(day)["csat"] is None


def test_no_comment_customer_or_conversation_reaches_the_stored_rollup(day: DayRollup) -> None:
    stored = json.dumps(day.model_dump())
    for secret in ("4242", "conv_", "SECRET", "wet", "words", "customer"):
        assert secret not in stored, secret
    assert set(day.model_dump()) == {
        "day",
        "conversations",
        "turns",
        "outcomes",
        "escalation_reasons",
        "abandoned_reasons",
        "refunds",
        "handoffs",
        "ratings",
        "actions",
        "model_cost_micros",
        "aws_cost_micros",
    }


def test_the_api_day_and_the_csv(day: DayRollup) -> None:
    view = ReportDay.model_validate(day_view(day, True)).model_dump()
    assert view["refunds"]["refunded"] == 4 and view["refunds"]["refunded_cents"] == {"EUR": 1_000, "USD": 3_700}
    assert view["complete"] is True and view["csat"] == 0.6667
    lines = to_csv([view]).splitlines()
    header, row = lines[0].split(","), lines[1].split(",")
    assert len(lines) == 2 and header[-2:] == ["refunded_cents.EUR", "refunded_cents.USD"]
    values = dict(zip(header, row, strict=True))
    assert values["day"] == DAY and values["conversations"] == "6" and values["resolution_rate"] == "0.3333"
    assert values["refunds.decision.median_s"] == "600" and values["refunded_cents.USD"] == "3700"
    assert values["handoffs.to_close.p95_s"] == "1800"


def test_the_range() -> None:
    today = date(2030, 3, 20)
    assert day_range(None, None, today) == (date(2030, 3, 7), today)  # 14 days ending today
    assert day_range("2030-01-01", "2030-01-01", today) == (date(2030, 1, 1), date(2030, 1, 1))
    assert day_range(None, "2030-02-14", today) == (date(2030, 2, 1), date(2030, 2, 14))
    assert day_range("2030-01-01", "2030-04-02", today)[1] == date(2030, 4, 2)  # 92 days
    for first, last in [
        ("2030-01-01", "2030-04-03"),  # 93 days
        ("2030-03-02", "2030-03-01"),  # from after to
        ("2030-13-01", None),
        ("20300301", None),
        ("2030-3-1", None),
        (None, "yesterday"),
    ]:
        with pytest.raises(InvalidRequest):
            day_range(first, last, today)
    assert MAX_DAYS == 92
