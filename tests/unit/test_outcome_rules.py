"""The outcome rules (support_agent/outcomes/rules.py, definition version 1) on constructed histories."""

from __future__ import annotations

from dataclasses import replace

import pytest

from support_agent.outcomes.rules import DEFINITION_VERSION, Facts, HandoffFacts, Outcome, derive

ANSWERED = Facts(last_role="assistant", last_answer_turn="turn_B")
OPENED = "2030-03-01T12:00:00.000Z"


def handoff(*, open: bool = False, by_decision: bool = False, after_refusal: bool = False) -> HandoffFacts:
    return HandoffFacts(OPENED, open=open, by_decision=by_decision, after_refusal=after_refusal)


def test_an_answered_conversation_with_nothing_pending_is_resolved_by_the_agent_and_final() -> None:
    assert derive(ANSWERED) == Outcome("resolved_by_agent", "", True, DEFINITION_VERSION)
    assert DEFINITION_VERSION == 1


@pytest.mark.parametrize(
    ("ticket", "reason"),
    [
        (handoff(), "requested"),
        (handoff(after_refusal=True), "after_refusal"),
        (handoff(by_decision=True), "lead_decision"),
        (handoff(by_decision=True, after_refusal=True), "lead_decision"),  # a lead's decision names it first
    ],
)
def test_a_hand_off_escalates_with_its_reason_code(ticket: HandoffFacts, reason: str) -> None:
    assert derive(replace(ANSWERED, handoffs=(ticket,))) == Outcome("escalated", reason, True)  # type: ignore[arg-type]


def test_the_first_hand_off_names_the_reason_and_any_open_one_keeps_it_unfinished() -> None:
    facts = replace(ANSWERED, handoffs=(handoff(), handoff(open=True, after_refusal=True)))
    assert derive(facts) == Outcome("escalated", "requested", False)


def test_escalated_wins_over_everything_after_it() -> None:
    facts = Facts(last_role="user", handoffs=(handoff(open=True),), pending_approvals=1, score=1)
    assert derive(facts) == Outcome("escalated", "requested", False)


def test_a_pending_approval_waits_on_a_lead_and_is_not_final() -> None:
    facts = replace(ANSWERED, pending_approvals=1, thumbs={"turn_B": "down"})
    assert derive(facts) == Outcome("waiting_on_lead", "", False)


def test_the_customers_words_last_mean_no_answer() -> None:
    assert derive(Facts(last_role="user")) == Outcome("abandoned", "no_answer", True)


def test_no_messages_at_all_is_no_answer() -> None:
    assert derive(Facts(last_role=None)) == Outcome("abandoned", "no_answer", True)


def test_a_persons_reply_last_is_an_answer() -> None:
    assert derive(Facts(last_role="person")).outcome == "resolved_by_agent"


def test_an_unconfirmed_proposal_is_abandoned_and_not_final_while_it_may_still_be_confirmed() -> None:
    assert derive(replace(ANSWERED, unconfirmed_proposals=1)) == Outcome("abandoned", "unconfirmed_action", True)
    still_open = replace(ANSWERED, unconfirmed_proposals=1, open_proposals=1)
    assert derive(still_open) == Outcome("abandoned", "unconfirmed_action", False)


def test_the_last_answer_rated_down_is_abandoned() -> None:
    facts = replace(ANSWERED, thumbs={"turn_A": "up", "turn_B": "down"})
    assert derive(facts) == Outcome("abandoned", "rated_down", True)


def test_an_earlier_answer_rated_down_but_not_the_last_is_still_resolved() -> None:
    facts = replace(ANSWERED, thumbs={"turn_A": "down", "turn_B": "up"})
    assert derive(facts) == Outcome("resolved_by_agent", "", True)
    assert derive(replace(ANSWERED, thumbs={"turn_A": "down"})).outcome == "resolved_by_agent"


@pytest.mark.parametrize(
    ("score", "outcome"), [(1, "abandoned"), (2, "abandoned"), (3, "resolved_by_agent"), (5, "resolved_by_agent")]
)
def test_a_closing_score_of_two_or_less_rates_the_conversation_down(score: int, outcome: str) -> None:
    assert derive(replace(ANSWERED, score=score)).outcome == outcome


def test_abandoned_reasons_in_order_no_answer_then_unconfirmed_then_rated_down() -> None:
    everything = Facts(last_role="user", unconfirmed_proposals=1, score=1)
    assert derive(everything).reason == "no_answer"
    assert derive(replace(everything, last_role="assistant")).reason == "unconfirmed_action"
    assert derive(replace(everything, last_role="assistant", unconfirmed_proposals=0)).reason == "rated_down"


def test_an_unsettled_refund_keeps_a_resolved_conversation_unfinished() -> None:
    assert derive(replace(ANSWERED, unsettled_refunds=1)) == Outcome("resolved_by_agent", "", False)


def test_a_closed_hand_off_is_still_escalated_and_final() -> None:
    assert derive(replace(ANSWERED, handoffs=(handoff(open=False),))) == Outcome("escalated", "requested", True)
