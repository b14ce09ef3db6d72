"""The outcome rules (docs/OUTCOMES.md, definition version 1): what is stored from what happened, nothing else.

Pure: `derive` reads only its `Facts` (gathered by facts.py), so the definition is tested on constructed histories
and a change of rule is a new ``DEFINITION_VERSION``, stamped on every record it derives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

DEFINITION_VERSION = 1

OutcomeName = Literal["resolved_by_agent", "escalated", "abandoned", "waiting_on_lead"]
# The reason codes: never the model's free-text hand-off reason.
Reason = Literal["", "lead_decision", "after_refusal", "requested", "no_answer", "rated_down", "unconfirmed_action"]
LOW_SCORES = (1, 2)  # a closing score that counts as the customer rating the conversation down


@dataclass(frozen=True)
class HandoffFacts:
    """One hand-off of the conversation, as its ticket says now."""

    opened_at: str
    open: bool  # OPEN or ASSIGNED: a person still has it
    by_decision: bool  # a lead's decision opened it (a cancellation's refund rejected)
    after_refusal: bool  # the model escalated after one of the conversation's tool results came back is_error
    claimed_at: str | None = None
    closed_at: str | None = None


@dataclass(frozen=True)
class Facts:
    """What one conversation's outcome is derived from. ``last_role`` is the last stored message's role (None: no
    message at all); ``last_answer_turn`` the turn that stored the last assistant message with text."""

    last_role: str | None
    last_answer_turn: str | None = None
    handoffs: tuple[HandoffFacts, ...] = ()  # oldest first
    pending_approvals: int = 0
    unsettled_refunds: int = 0  # requested and not yet refunded or failed (a lead's approval included)
    unconfirmed_proposals: int = 0  # left PROPOSED, or EXPIRED without the customer confirming
    open_proposals: int = 0  # PROPOSED and not yet expired: the customer may still confirm
    thumbs: Mapping[str, str] = field(default_factory=dict)  # turn id -> "up" | "down"
    score: int = 0  # the closing rating, 1..5; 0 = none
    actions: Mapping[str, int] = field(default_factory=dict)  # action name -> confirmed executions
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    model_cost_micros: int = 0
    aws_cost_micros: int = 0


@dataclass(frozen=True)
class Outcome:
    outcome: OutcomeName
    reason: Reason
    final: bool  # nothing pending any more: no open hand-off, no PENDING approval, no unsettled refund
    definition_version: int = DEFINITION_VERSION


def derive(facts: Facts) -> Outcome:
    """The first rule that matches: escalated, waiting_on_lead, abandoned, resolved_by_agent."""
    final = not (
        any(h.open for h in facts.handoffs)
        or facts.pending_approvals
        or facts.unsettled_refunds
        or facts.open_proposals
    )
    if facts.handoffs:
        return Outcome("escalated", _escalation(facts.handoffs[0]), final)
    if facts.pending_approvals:
        return Outcome("waiting_on_lead", "", final)
    abandoned = _abandoned(facts)
    if abandoned:
        return Outcome("abandoned", abandoned, final)
    return Outcome("resolved_by_agent", "", final)


def _escalation(first: HandoffFacts) -> Reason:
    if first.by_decision:
        return "lead_decision"
    return "after_refusal" if first.after_refusal else "requested"


def _abandoned(facts: Facts) -> Reason:
    """Why the conversation counts as abandoned; "" when it does not."""
    if facts.last_role in (None, "user"):  # nothing was stored, or the customer's words were the last
        return "no_answer"
    if facts.unconfirmed_proposals:
        return "unconfirmed_action"
    rated_last_down = facts.last_answer_turn is not None and facts.thumbs.get(facts.last_answer_turn) == "down"
    if rated_last_down or facts.score in LOW_SCORES:
        return "rated_down"
    return ""
