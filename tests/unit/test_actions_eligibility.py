"""Every eligibility rule the support policy gives the declared actions, as pure functions (actions/), and the
proposal's keys and expiry: no table, no loop."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from support_agent.actions.address import Address, UpdateAddressInput, address_eligibility
from support_agent.actions.cancel import CancelOrderInput, cancel_eligibility
from support_agent.actions.proposals import Proposal, expired, proposed_answer
from support_agent.actions.refund import RequestRefundInput, refund_eligibility
from support_agent.policy.model import ORDER_STATUSES, ActionRule, AppliedPolicy, default_policy
from support_agent.store.customer_data import Order
from support_agent.store.proposals import ProposalItem, proposal_id_of, proposal_sk

NOW = datetime(2026, 12, 10, 12, 0, tzinfo=UTC)
DEFAULT = AppliedPolicy(0, default_policy(5000))


def order(status: str, *, available: int = 3200, reserved: int = 0, placed_at: str = "2026-12-01T12:00:00Z") -> Order:
    return Order(
        customer_id=7,
        order_id=1045,
        status=status,
        total_cents=available + reserved,
        currency="USD",
        available_cents=available,
        reserved_cents=reserved,
        placed_at=placed_at,
    )


def with_policy(version: int = 3, **changes: Any) -> AppliedPolicy:
    """The default policy with some of its fields (or actions' rules) replaced."""
    base = default_policy(5000)
    actions = {
        name: changes.pop(name)
        for name in ("request_refund", "cancel_order", "update_shipping_address")
        if name in changes
    }
    policy = base.model_copy(update={**changes, "actions": base.actions.model_copy(update=actions)})
    return AppliedPolicy(version, type(base).model_validate(policy.model_dump()))


def refund(amount: int = 100) -> RequestRefundInput:
    return RequestRefundInput(order_id=1045, amount_cents=amount, reason="broken")


def address(country: str = "US", **fields: Any) -> UpdateAddressInput:
    values = {"name": "Dana", "line1": "1 Main St", "city": "Portland", "postal_code": "97205", "country": country}
    return UpdateAddressInput(order_id=1045, address=Address(**{**values, **fields}))


# -- refunds: the rule's statuses, the window, the amount ---------------------------------------------------------


@pytest.mark.parametrize("status", ORDER_STATUSES)
def test_refund_statuses_by_default_are_todays(status: str) -> None:
    why = refund_eligibility(order(status), refund(), DEFAULT, NOW)
    if status in ("DELIVERED", "SHIPPED"):
        assert why is None
    else:  # the very words of the refusal before the policy existed
        assert why == f"order 1045 is {status}; only delivered or shipped orders can be refunded"


def test_refund_statuses_come_from_the_policy() -> None:
    rule = ActionRule(statuses=("DELIVERED",), needs_confirmation=False, approval_threshold_cents=5000)
    applied = with_policy(request_refund=rule)
    assert refund_eligibility(order("DELIVERED"), refund(), applied, NOW) is None
    assert refund_eligibility(order("SHIPPED"), refund(), applied, NOW) == (
        "order 1045 is SHIPPED; only delivered orders can be refunded"
    )


def test_refund_window_edges() -> None:
    applied = with_policy(refund_window_days=30)
    placed = "2026-11-10T12:00:00Z"  # NOW is exactly 30 days later
    assert refund_eligibility(order("DELIVERED", placed_at=placed), refund(), applied, NOW) is None
    late = NOW + timedelta(milliseconds=1)
    why = refund_eligibility(order("DELIVERED", placed_at=placed), refund(), applied, late)
    assert why == "order 1045 was placed more than 30 days ago; it is past the refund window"
    # No window (the default): any age; no placing time (older data): inside.
    old = "2020-01-01T00:00:00Z"
    assert refund_eligibility(order("DELIVERED", placed_at=old), refund(), DEFAULT, NOW) is None
    assert refund_eligibility(order("DELIVERED", placed_at=""), refund(), applied, NOW) is None


def test_refund_amount_against_what_is_left() -> None:
    assert refund_eligibility(order("DELIVERED", available=3200), refund(3200), DEFAULT, NOW) is None
    assert refund_eligibility(order("DELIVERED", available=3200), refund(3201), DEFAULT, NOW) == (
        "order 1045 has 3200 cents left to refund; 3201 is too much"
    )


# -- cancel_order ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ORDER_STATUSES)
def test_cancel_only_before_shipment_by_default(status: str) -> None:
    why = cancel_eligibility(order(status), CancelOrderInput(order_id=1045, reason="x"), DEFAULT, NOW)
    assert (why is None) == (status == "PROCESSING")
    if why is not None:
        assert why == f"order 1045 is {status}; only processing orders can be cancelled"


def test_cancel_statuses_come_from_the_policy_and_a_pending_refund_waits() -> None:
    rule = ActionRule(statuses=("PROCESSING", "SHIPPED"), needs_confirmation=True, approval_threshold_cents=100)
    applied = with_policy(cancel_order=rule)
    args = CancelOrderInput(order_id=1045, reason="x")
    assert cancel_eligibility(order("SHIPPED"), args, applied, NOW) is None
    assert "processing or shipped" in str(cancel_eligibility(order("DELIVERED"), args, applied, NOW))
    waiting = cancel_eligibility(order("PROCESSING", available=2000, reserved=1200), args, applied, NOW)
    assert waiting is not None and "waiting for a support lead" in waiting


# -- update_shipping_address -------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ORDER_STATUSES)
def test_address_only_before_shipment_by_default(status: str) -> None:
    why = address_eligibility(order(status), address(), DEFAULT, NOW)
    assert (why is None) == (status == "PROCESSING")
    if why is not None:
        assert why == f"order 1045 is {status}; only the address of processing orders can be changed"


@pytest.mark.parametrize("country", ["US", "CA", "GB", "IE", "DE", "FR", "NL", "AU", "JP", "BR"])
def test_address_country_in_the_policys_list(country: str) -> None:
    why = address_eligibility(order("PROCESSING"), address(country), DEFAULT, NOW)
    assert (why is None) == (country in DEFAULT.policy.countries)
    only_jp = with_policy(countries=("JP",))
    assert (address_eligibility(order("PROCESSING"), address(country), only_jp, NOW) is None) == (country == "JP")


@pytest.mark.parametrize(
    "bad",
    [
        {"country": "us"},
        {"country": "USA"},
        {"name": ""},
        {"line1": "x" * 201},
        {"postal_code": "1" * 21},
        {"city": " "},  # stripped: empty
        {"region": "r" * 101},
        {"phone": "555"},  # extra fields refused
    ],
)
def test_address_model_refuses(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        address(**bad)


def test_address_input_is_strict_like_refunds() -> None:
    good = {"name": "D", "line1": "1", "city": "C", "postal_code": "1", "country": "US"}
    for raw in ({"order_id": "1045", "address": good}, {"order_id": 1045, "address": good, "customer_id": 8}):
        with pytest.raises(ValidationError):
            UpdateAddressInput.model_validate(raw)
    with pytest.raises(ValidationError):
        CancelOrderInput.model_validate({"order_id": 1045.0, "reason": "x"})


# -- MCP exposure, keys, expiry ------------------------------------------------------------------------------------


def test_actions_that_need_confirmation_are_not_offered_over_mcp() -> None:
    from support_agent.actions.address import AddressChange, address_action
    from support_agent.actions.cancel import Cancellation, cancel_action

    # Their declarations only: nothing is called.
    cancel = cancel_action(Cancellation(None, None, None))  # type: ignore[arg-type]
    change = address_action(AddressChange(None))  # type: ignore[arg-type]
    assert not cancel.offered_over_mcp(DEFAULT) and not change.offered_over_mcp(DEFAULT)
    rule = ActionRule(statuses=("PROCESSING",), needs_confirmation=False, approval_threshold_cents=5000)
    assert cancel.offered_over_mcp(with_policy(cancel_order=rule))


def test_proposal_id_is_derived_from_the_calls_keys() -> None:
    pid = proposal_id_of("conv_01JTESTTESTTESTTESTTESTTE", 3, "toolu_1")
    assert pid == proposal_id_of("conv_01JTESTTESTTESTTESTTESTTE", 3, "toolu_1")  # a replay finds the same one
    others = {
        proposal_id_of("conv_01JTESTTESTTESTTESTTESTTF", 3, "toolu_1"),
        proposal_id_of("conv_01JTESTTESTTESTTESTTESTTE", 4, "toolu_1"),
        proposal_id_of("conv_01JTESTTESTTESTTESTTESTTE", 3, "toolu_2"),
        proposal_id_of("mcp", 7, "toolu_1"),
    }
    assert pid not in others and len(others) == 4
    assert pid.startswith("prp_") and len(pid) == 36
    assert proposal_sk("conv_x", pid) == f"PROPOSAL#conv_x#{pid}"


def item(status: str = "PROPOSED", expires_at: str = "2026-12-10T12:15:00.000Z") -> ProposalItem:
    return ProposalItem(
        customer_id=7,
        sk="PROPOSAL#conv_x#prp_1",
        proposal_id="prp_1",
        conversation_id="conv_x",
        seq=3,
        tool_use_id="toolu_1",
        action="cancel_order",
        order_id=1045,
        input={"order_id": 1045, "reason": "x"},
        summary="Cancel order 1045.",
        status=status,  # type: ignore[arg-type]
        created_at="2026-12-10T12:00:00.000Z",
        expires_at=expires_at,
        policy_version=4,
    )


def test_proposal_expiry_edges() -> None:
    assert not expired(item(), "2026-12-10T12:15:00.000Z")  # at expires_at: still confirmable
    assert expired(item(), "2026-12-10T12:15:00.001Z")
    # Shown EXPIRED once past it and never decided; a decided one keeps its status.
    assert Proposal.of(item(), "2026-12-10T12:15:00.001Z").status == "EXPIRED"
    assert Proposal.of(item("CONFIRMED"), "2026-12-10T13:00:00.000Z").status == "CONFIRMED"
    assert Proposal.of(item(), "2026-12-10T12:00:01.000Z").status == "PROPOSED"


def test_the_proposed_answer_says_what_and_until_when() -> None:
    answer = proposed_answer(item())
    assert {k: answer[k] for k in ("status", "proposal_id", "action", "summary", "expires_at", "policy_version")} == {
        "status": "PROPOSED",
        "proposal_id": "prp_1",
        "action": "cancel_order",
        "summary": "Cancel order 1045.",
        "expires_at": "2026-12-10T12:15:00.000Z",
        "policy_version": 4,
    }


def test_an_unreadable_policy_decides_nothing() -> None:
    """No version of the policy can be applied: the tool answers is_error (offer a person), nothing is called; the
    routes answer the same error as 503 (the contract's policy_unavailable)."""
    from support_agent.actions.cancel import Cancellation, cancel_action
    from support_agent.auth import Principal
    from support_agent.contract import status_and_code
    from support_agent.errors import PolicyUnavailable
    from support_agent.tools.actions import POLICY_UNAVAILABLE, action_tool
    from support_agent.tools.registry import ToolContext, ToolRegistry

    class Unreadable:
        def current(self) -> AppliedPolicy:
            raise PolicyUnavailable("no version of the support policy validates")

    cancel = cancel_action(Cancellation(None, None, None))  # type: ignore[arg-type]
    tool = action_tool(cancel, Unreadable(), None)  # type: ignore[arg-type]  # the desk is never reached
    ctx = ToolContext(Principal("customer-7", "customer", 7), 7, "conv_x", 3, "toolu_1", "req", "2026-12-05T00:00:00Z")
    out = ToolRegistry([tool]).execute("cancel_order", {"order_id": 1045, "reason": "x"}, ctx)
    assert out.is_error and out.result == {"error": POLICY_UNAVAILABLE}
    assert status_and_code(PolicyUnavailable("x")) == (503, "policy_unavailable")
