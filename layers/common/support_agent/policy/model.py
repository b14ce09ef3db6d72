"""The support policy: what the agent may do, on which orders, above what a lead decides, and what the customer
confirms first. One document, validated here at load; a document that does not validate is never applied
(policy/source.py keeps the newest version that does).

The version a decision applied is SSM's ``Version`` of the parameter the document was read from
(`AppliedPolicy.version`), never a field inside the document: a publisher cannot mislabel one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# Every order status the data knows. PROCESSING is the one before shipment.
ORDER_STATUSES = ("PROCESSING", "SHIPPED", "DELIVERED", "CANCELLED")
# The declared actions the policy governs (actions/): each has its rule below.
ACTIONS = ("request_refund", "cancel_order", "update_shipping_address")


class ActionRule(BaseModel):
    """One action's rule: the order statuses that allow it, whether the customer confirms it first, and above
    what amount a support lead decides (``None``: never; an action that moves no money has none)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    statuses: tuple[str, ...] = Field(..., min_length=1)
    needs_confirmation: bool
    approval_threshold_cents: int | None = Field(None, ge=0, le=100_000_000)

    @field_validator("statuses")
    @classmethod
    def _known(cls, statuses: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(statuses) - set(ORDER_STATUSES))
        if unknown:
            raise ValueError(f"unknown order status {', '.join(unknown)}; known: {', '.join(ORDER_STATUSES)}")
        if len(set(statuses)) != len(statuses):
            raise ValueError("a status is listed twice")
        return statuses


class Actions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    request_refund: ActionRule
    cancel_order: ActionRule
    update_shipping_address: ActionRule


class SupportPolicy(BaseModel):
    """The document (docs/POLICY.md names every field, its default and how to publish and roll back)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Days after an order was placed during which it may be refunded; None: no window (the default).
    refund_window_days: int | None = Field(None, ge=1, le=3650)
    # Countries a shipping address may be in (ISO 3166-1 alpha-2).
    countries: tuple[str, ...] = Field(..., min_length=1)
    # How long a proposal waits for the customer's Confirm or Decline.
    proposal_ttl_seconds: int = Field(900, ge=60, le=7 * 86_400)
    actions: Actions

    @field_validator("countries")
    @classmethod
    def _iso(cls, countries: tuple[str, ...]) -> tuple[str, ...]:
        bad = [c for c in countries if len(c) != 2 or not c.isascii() or not c.isalpha() or not c.isupper()]
        if bad:
            raise ValueError(f"countries are ISO 3166-1 alpha-2 codes in capitals; not: {', '.join(bad[:5])}")
        if len(set(countries)) != len(countries):
            raise ValueError("a country is listed twice")
        return countries

    @model_validator(mode="after")
    def _money_has_a_threshold(self) -> SupportPolicy:
        for name in ("request_refund", "cancel_order"):
            if getattr(self.actions, name).approval_threshold_cents is None:
                raise ValueError(f"actions.{name}.approval_threshold_cents is required: it moves money")
        if self.actions.update_shipping_address.approval_threshold_cents is not None:
            raise ValueError("actions.update_shipping_address moves no money: it has no approval threshold")
        return self

    def rule(self, action: str) -> ActionRule:
        rule: ActionRule = getattr(self.actions, action)
        return rule

    def within_refund_window(self, placed_at: str, now: datetime) -> bool:
        """An order placed at ``placed_at`` (ISO 8601) is still in the refund window at ``now``; an order with
        no placing time is (today's data predates the window)."""
        if self.refund_window_days is None or not placed_at:
            return True
        placed = datetime.fromisoformat(placed_at.replace("Z", "+00:00"))
        return now <= placed + timedelta(days=self.refund_window_days)


def default_policy(refund_threshold_cents: int = 5000) -> SupportPolicy:
    """Today's rules as a policy: what the template publishes as version 1 (with its RefundThresholdCents)."""
    return SupportPolicy(
        refund_window_days=None,
        countries=("US", "CA", "GB", "IE", "DE", "FR", "NL", "AU"),
        proposal_ttl_seconds=900,
        actions=Actions(
            request_refund=ActionRule(
                statuses=("DELIVERED", "SHIPPED"),
                needs_confirmation=False,
                approval_threshold_cents=refund_threshold_cents,
            ),
            cancel_order=ActionRule(
                statuses=("PROCESSING",), needs_confirmation=True, approval_threshold_cents=refund_threshold_cents
            ),
            update_shipping_address=ActionRule(
                statuses=("PROCESSING",), needs_confirmation=True, approval_threshold_cents=None
            ),
        ),
    )


@dataclass(frozen=True)
class AppliedPolicy:
    """A validated policy and the version it was read as (SSM's ``Version``; 0: built in, no store configured)."""

    version: int
    policy: SupportPolicy


class PolicyReader(Protocol):
    """The policy in force now, with the version it was read as (`PolicyUnavailable` when none can be applied)."""

    def current(self) -> AppliedPolicy: ...


@dataclass(frozen=True)
class StaticPolicy:
    """One policy, always: the built-in default as version 0 (no parameter configured), or a test's own."""

    applied: AppliedPolicy

    def current(self) -> AppliedPolicy:
        return self.applied
