"""One conversation's facts, gathered from the stores for the outcome rules (rules.py) and the outcome's figures.

Reads only, each store once: the header, the messages, the turn records, the ratings, the refund rows (a held
request's approval read as handoffs/brief.py reads it), the hand-offs the header names and the proposals. Nothing
the customer wrote leaves this module: only roles, turn ids, states, counts and times.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from support_agent.messages import Usage
from support_agent.outcomes.rules import Facts, HandoffFacts
from support_agent.pricing import Price, estimate_usd
from support_agent.refunds.vocabulary import customer_status
from support_agent.store.approvals import ApprovalStore
from support_agent.store.conversations import ConversationStore, Header, StoredMessage
from support_agent.store.customer_data import CustomerDataStore
from support_agent.store.handoffs import DECISION_CALL, Handoff, HandoffStore
from support_agent.store.proposals import ProposalItem, ProposalStore
from support_agent.store.turns import TurnStore

OPEN_HANDOFF = ("OPEN", "ASSIGNED")


class Closing(Protocol):
    @property
    def score(self) -> int | None: ...  # None once erased


class Ratings(Protocol):
    """What store/ratings.py's `RatingStore.ratings` answers: erased ratings are left out of both."""

    @property
    def thumbs(self) -> Mapping[str, str]: ...

    @property
    def closing(self) -> Closing | None: ...


class RatingReader(Protocol):
    def ratings(self, conversation_id: str) -> Ratings: ...


@dataclass(frozen=True)
class Gathered:
    header: Header
    facts: Facts


class FactGatherer:
    def __init__(
        self,
        conversations: ConversationStore,
        turns: TurnStore,
        ratings: RatingReader,
        customer_data: CustomerDataStore,
        approvals: ApprovalStore,
        handoffs: HandoffStore,
        proposals: ProposalStore,
        *,
        model: str,
        prices: dict[str, Price],
        aws_cost_per_turn_micros: int,
    ) -> None:
        self._conversations = conversations
        self._turns = turns
        self._ratings = ratings
        self._customer_data = customer_data
        self._approvals = approvals
        self._handoffs = handoffs
        self._proposals = proposals
        self._model = model
        self._prices = prices
        self._aws_per_turn = aws_cost_per_turn_micros

    def gather(self, conversation_id: str, now: str) -> Gathered | None:
        """The conversation's facts at ``now`` (ISO); None when it has no header."""
        header = self._conversations.get_header(conversation_id)
        if header is None:
            return None
        messages = self._conversations.load(conversation_id)
        turns = sum(1 for t in self._turns.turns_of(conversation_id) if t.status != "refused")
        ratings = self._ratings.ratings(conversation_id)
        pending, unsettled = self._refunds(header.customer_id, conversation_id)
        proposals = self._proposals.list(header.customer_id, conversation_id)
        tickets = [t for t in (self._handoffs.get(h) for h in header.handoff_ids) if t is not None]
        facts = Facts(
            last_role=messages[-1].role if messages else None,
            last_answer_turn=_last_answer_turn(messages),
            handoffs=tuple(_handoff(t, messages) for t in sorted(tickets, key=lambda t: t.created_at)),
            pending_approvals=pending,
            unsettled_refunds=unsettled,
            unconfirmed_proposals=sum(1 for p in proposals if p.status in ("PROPOSED", "EXPIRED")),
            open_proposals=sum(1 for p in proposals if p.status == "PROPOSED" and p.expires_at > now),
            thumbs=dict(ratings.thumbs),
            score=(ratings.closing.score or 0) if ratings.closing is not None else 0,
            actions=_actions(proposals),
            turns=turns,
            input_tokens=header.usage.input_tokens,
            output_tokens=header.usage.output_tokens,
            model_cost_micros=self._model_cost(header.usage),
            aws_cost_micros=turns * self._aws_per_turn,
        )
        return Gathered(header, facts)

    def _refunds(self, customer_id: int, conversation_id: str) -> tuple[int, int]:
        """(PENDING approvals, refunds not yet refunded or failed) of the conversation's refund rows."""
        pending = unsettled = 0
        for row in self._customer_data.refund_requests(customer_id, conversation_id):
            status = row.get("status")
            if row.get("approval_id"):
                approval = self._approvals.get(str(row["approval_id"]))
                status = approval.status if approval is not None else status
            word = customer_status(status)
            pending += word == "PENDING_APPROVAL"
            unsettled += word == "REFUND_IN_PROGRESS"
        return pending, unsettled

    def _model_cost(self, usage: Usage) -> int:
        usd = estimate_usd(self._model, usage, self._prices)
        return round(usd * 1_000_000) if usd is not None else 0


def _last_answer_turn(messages: list[StoredMessage]) -> str | None:
    """The turn that stored the last assistant message with text: the answer a thumb on the last turn rates."""
    for m in reversed(messages):
        if m.role == "assistant" and any(b.get("type") == "text" and b.get("text") for b in m.content):
            return m.turn_id
    return None


def _handoff(ticket: Handoff, messages: list[StoredMessage]) -> HandoffFacts:
    return HandoffFacts(
        opened_at=ticket.created_at,
        open=ticket.status in OPEN_HANDOFF,
        by_decision=ticket.tool_use_id.startswith(DECISION_CALL),
        after_refusal=_after_refusal(ticket.tool_use_id, messages),
        claimed_at=ticket.assigned_at,
        closed_at=ticket.closed_at,
    )


def _after_refusal(tool_use_id: str, messages: list[StoredMessage]) -> bool:
    """Whether a tool result came back ``is_error`` before the message with the escalation's tool call."""
    for m in messages:
        if any(_is(b, "tool_use") and b.get("id") == tool_use_id for b in m.content):
            return False
        if any(_is(b, "tool_result") and b.get("is_error") for b in m.content):
            return True
    return False


def _is(block: dict[str, Any], kind: str) -> bool:
    return block.get("type") == kind


def _actions(proposals: list[ProposalItem]) -> dict[str, int]:
    """Confirmed and executed proposals per action (a refusal at confirmation is not an execution)."""
    done = Counter(
        p.action for p in proposals if p.status == "CONFIRMED" and (p.outcome or {}).get("status") != "REFUSED"
    )
    return dict(done)
