"""A task as data (``evals/tasks/*.yaml``): the seed state, who the customer is and what they want, how they talk
(scripted turns, or a goal for a model-driven customer), and what must be true at the end.

Ids in a task are labels (``o1``, ``i1``): each trial seeds its own customers and orders under fresh numeric ids, so
trials never see each other's state, and ``{o1}`` in any text is replaced by the order's id of that trial (``{me}``:
the customer's own id, ``{name}``: their name). Amounts are cents, currency USD.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

OrderStatus = Literal["PROCESSING", "SHIPPED", "DELIVERED", "CANCELLED"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OrderSeed(_Strict):
    status: OrderStatus
    total_cents: int = Field(..., ge=1)
    refunded_cents: int = Field(0, ge=0)  # an earlier refund, already settled at the provider
    placed_days_ago: int = Field(3, ge=0)
    item: str = "Trail running shoes"
    note: str = ""  # free text on the order (where an injection hides)
    with_payment: bool = True  # a card payment on file (pi_eval_<order id>)


class InvoiceSeed(_Strict):
    order: str  # the label of the order it bills
    memo: str = ""


class CustomerSeed(_Strict):
    name: str
    orders: dict[str, OrderSeed] = Field(default_factory=dict)
    invoices: dict[str, InvoiceSeed] = Field(default_factory=dict)


class Turn(_Strict):
    """One step of the scripted customer: say something, or press a button the chat page shows."""

    say: str | None = None
    press: Literal["confirm", "decline"] | None = None  # on the newest proposal of the conversation
    new_conversation: bool = False  # start a fresh conversation with this turn
    # Send `Prefer: respond-async`: the turn goes to the queue at once (a long turn's path without a slow model).
    respond_async: bool = False

    @model_validator(mode="after")
    def _one(self) -> Turn:
        if (self.say is None) == (self.press is None):
            raise ValueError("a turn either says something or presses a button")
        return self


class Expected(_Strict):
    """The end state. Orders and refunds by label; only what is named is checked, except where said."""

    order_status: dict[str, OrderStatus] = Field(default_factory=dict)
    # Every refund the provider holds for the customer's orders, per order label (an order not named: none).
    provider_refunds: dict[str, list[int]] = Field(default_factory=dict)
    # Approvals raised, per order label, with their status (PENDING, APPROVED, REJECTED, …); not named: none.
    approvals: dict[str, list[str]] = Field(default_factory=dict)
    handoffs: int = 0  # hand-offs opened for the customer
    addresses: dict[str, str] = Field(default_factory=dict)  # order label -> the new address's line1
    reply_contains: list[str] = Field(default_factory=list)  # in the final reply (case-insensitive)
    tools_called: list[str] = Field(default_factory=list)  # each called at least once
    tools_not_called: list[str] = Field(default_factory=list)
    # HTTP statuses the customer's turns answered with an error, in order (a model fault's 503 or 502); empty: none.
    turn_errors: list[int] = Field(default_factory=list)


class Forbidden(_Strict):
    """Effects that fail a trial whatever the reply says (each counted in the report: must be 0)."""

    # Any provider refund, approval, order change or hand-off beyond `Expected` (always checked).
    unexpected_effects: bool = True
    # Another customer's order ids, names or notes in a reply the customer sees (always checked).
    other_customers_data: bool = True
    # A direct refund pushing an order's refunded + reserved over the policy's threshold without a lead.
    refund_over_threshold: bool = True


class Limits(_Strict):
    max_turns: int = Field(default=8, ge=1, le=40)  # the customer's turns (the model-driven customer's stop rule)
    max_iterations: int = Field(default=8, ge=1)  # model calls per turn, as the service counts them
    max_tokens: int = Field(default=200_000, ge=1)  # input + output over the task


class Task(_Strict):
    id: str = Field(..., pattern=r"^[a-z0-9][a-z0-9-]{2,60}$")
    tests: str = Field(..., min_length=10)  # what it tests, one sentence
    category: Literal[
        "lookup",
        "refund",
        "approval",
        "split",
        "cross-customer",
        "injection",
        "handoff",
        "long-turn",
        "model-error",
        "action",
    ]
    customer: CustomerSeed
    others: list[CustomerSeed] = Field(default_factory=list)  # other customers (probes, injections)
    goal: str  # what the customer wants, for the model-driven customer (and the report)
    knows: str = ""  # what the customer knows (order numbers, amounts), for the model-driven customer
    turns: list[Turn] = Field(..., min_length=1)  # the scripted customer's turns, in order
    expect: Expected = Expected()
    forbidden: Forbidden = Forbidden()
    limits: Limits = Limits()
    # The local stack's faults for this task (the simulated model's): e.g. a 529 on the first model call.
    # devstack/simulated_model/faults.py `arm_task_faults` says what each does.
    model_faults: list[
        Literal["overloaded_once", "server_error_once", "overloaded_always", "refused_once", "slow_turn"]
    ] = Field(default_factory=list)

    @model_validator(mode="after")
    def _labels(self) -> Task:
        labels = set(self.customer.orders)
        for other in self.others:
            labels |= set(other.orders)
        named = set(self.expect.order_status) | set(self.expect.provider_refunds) | set(self.expect.approvals)
        named |= set(self.expect.addresses)
        unknown = sorted(named - labels)
        if unknown:
            raise ValueError(f"expect names orders the seed does not have: {', '.join(unknown)}")
        return self


def load(path: Path) -> Task:
    return Task.model_validate(yaml.safe_load(path.read_text()))


def load_all(directory: Path, only: str | None = None) -> list[Task]:
    """Every task of ``directory`` (``only``: a comma-separated list of ids or categories)."""
    tasks = [load(p) for p in sorted(directory.glob("*.yaml"))]
    if only:
        wanted = {w.strip() for w in only.split(",") if w.strip()}
        tasks = [t for t in tasks if t.id in wanted or t.category in wanted]
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError("two tasks share an id")
    return tasks
