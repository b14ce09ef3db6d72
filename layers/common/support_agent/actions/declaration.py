"""A declared action: everything the rest of the code needs to know of one thing the agent may do for a customer.

The loop names no tool: the registry offers each declaration as a tool (tools/actions.py), the policy decides
whether a call executes at once or becomes a proposal the customer confirms (actions/proposals.py), the MCP server
offers only those that need no confirmation (mcp/our_tools.py). A declaration holds no state: its functions
receive the order, the input, the policy as read now and the call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from support_agent.policy.model import AppliedPolicy
from support_agent.refunds.decide import RefundCall
from support_agent.store.audit import Streams
from support_agent.store.customer_data import Order
from support_agent.store.proposals import ProposalItem

In = TypeVar("In", bound=BaseModel)
Call = RefundCall  # who asks and the call's keys: a tool's `ToolContext`, or a confirmed proposal's `ProposalCall`


class Refused(Exception):
    """Why the action may not run, in the customers' words (a tool answers it as its error); nothing was written."""


def not_found(order_id: int) -> Refused:
    # Identical for a missing order and another customer's: nothing leaks through the wording.
    return Refused(f"order {order_id} was not found for this customer")


@dataclass(frozen=True)
class Effect:
    """What a confirmed action did: its ``outcome`` (the customers' vocabulary), the ``items`` written atomically with
    the proposal's end (an order's conditional update), why it is refused when one of those fails (``refused``: the
    order moved on), the confirmation row's ``audit_input`` (an address change's old and new address: the audit
    row's, never the customer's view) and the ``streams`` the effect wrote (a refund's key, an approval)."""

    outcome: dict[str, Any]
    items: tuple[dict[str, Any], ...] = ()
    refused: str = ""
    audit_input: dict[str, Any] | None = None
    streams: Streams = field(default_factory=Streams)


@dataclass(frozen=True)
class Action(Generic[In]):
    """One action. ``rule``: its rule's name in the policy (policy/model.py ``ACTIONS``). ``eligible``: None, or why
    the policy refuses it on this order now (the customers' words). ``summary``: what will happen, in plain words
    (what the customer confirms). ``execute``: the confirmed proposal's effect, keyed by the proposal (resumed after
    a crash, never done twice). ``execute_now``: an action that may also run without a proposal when its rule needs
    no confirmation (refunds, as today); None: it always goes through a proposal, confirmed at once when the rule
    needs none. ``recorded``/``streams``: what an ``execute_now`` call recorded and which audit streams it wrote.
    ``audit_stream``: where its effect is audited (documentation and the trail). ``vocabulary``: its outcomes'
    statuses and what each tells the customer."""

    name: str
    description: str
    input_model: type[In]
    rule: str
    eligible: Callable[[Order, In, AppliedPolicy, datetime], str | None]
    summary: Callable[[Order, In], str]
    execute: Callable[[ProposalItem, In, Call], Effect]
    audit_stream: str
    vocabulary: Mapping[str, str]
    execute_now: Callable[[In, Call, AppliedPolicy], dict[str, Any]] | None = None
    recorded: Callable[[Call], dict[str, Any] | None] | None = None
    streams: Callable[[Mapping[str, Any], Call], Streams] | None = None

    def order_id(self, args: In) -> int:
        return int(args.order_id)  # type: ignore[attr-defined]

    def needs_confirmation(self, applied: AppliedPolicy) -> bool:
        return applied.policy.rule(self.rule).needs_confirmation

    def offered_over_mcp(self, applied: AppliedPolicy) -> bool:
        """Over MCP there is no conversation to confirm in: an action the customer must confirm is not offered."""
        return not self.needs_confirmation(applied)

    def terms(self, applied: AppliedPolicy) -> dict[str, Any]:
        """What the rule says, kept on a confirmed proposal: its execution applies the version confirmed under."""
        rule = applied.policy.rule(self.rule)
        return {"statuses": list(rule.statuses), "threshold_cents": rule.approval_threshold_cents}
