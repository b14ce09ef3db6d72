"""The support policy's model (policy/model.py): what it refuses at load, and the refund window's edges."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from support_agent.policy.model import ACTIONS, ORDER_STATUSES, SupportPolicy, default_policy

DELETE = object()  # a `document` change that removes the field


def document(**changes: Any) -> dict[str, Any]:
    """The default policy as published JSON, with ``changes`` applied (``actions.cancel_order.x`` paths)."""
    doc = default_policy(5000).model_dump(mode="json")
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = doc
        for key in parents:
            node = node[key]
        if value is DELETE:
            del node[leaf]
        else:
            node[leaf] = value
    return doc


def refused(doc: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        SupportPolicy.model_validate(doc)
    return str(caught.value)


def test_the_default_is_todays_rules() -> None:
    policy = default_policy(7000)
    assert policy.refund_window_days is None
    assert policy.rule("request_refund").statuses == ("DELIVERED", "SHIPPED")  # REFUNDABLE_STATUSES today
    assert policy.rule("request_refund").needs_confirmation is False  # the seed's flow is unchanged
    assert policy.rule("request_refund").approval_threshold_cents == 7000
    assert policy.rule("cancel_order").approval_threshold_cents == 7000
    assert policy.rule("cancel_order").statuses == ("PROCESSING",)
    assert policy.rule("update_shipping_address").approval_threshold_cents is None
    assert all(policy.rule(a).needs_confirmation for a in ("cancel_order", "update_shipping_address"))
    assert set(ACTIONS) == set(type(policy.actions).model_fields)
    assert "CANCELLED" in ORDER_STATUSES


def test_the_default_round_trips_through_its_json() -> None:
    policy = default_policy(1234)
    assert SupportPolicy.model_validate_json(policy.model_dump_json()) == policy


@pytest.mark.parametrize("status", ["RETURNED", "processing", ""])
def test_an_unknown_status_is_refused(status: str) -> None:
    message = refused(document(actions__cancel_order__statuses=["PROCESSING", status]))
    assert "unknown order status" in message and "cancel_order" in message


def test_a_status_listed_twice_is_refused() -> None:
    assert "listed twice" in refused(document(actions__request_refund__statuses=["SHIPPED", "SHIPPED"]))


def test_an_action_allowed_in_no_status_is_refused() -> None:
    assert "statuses" in refused(document(actions__update_shipping_address__statuses=[]))


@pytest.mark.parametrize("action", ["request_refund", "cancel_order"])
def test_a_money_action_without_a_threshold_is_refused(action: str) -> None:
    assert f"actions.{action}.approval_threshold_cents is required" in refused(
        document(**{f"actions__{action}__approval_threshold_cents": None})
    )
    assert "approval_threshold_cents is required" in refused(
        document(**{f"actions__{action}__approval_threshold_cents": DELETE})
    )


def test_the_address_action_has_no_threshold() -> None:
    message = refused(document(actions__update_shipping_address__approval_threshold_cents=100))
    assert "moves no money" in message


@pytest.mark.parametrize("cents", [-1, 100_000_001])
def test_a_threshold_out_of_bounds_is_refused(cents: int) -> None:
    refused(document(actions__request_refund__approval_threshold_cents=cents))


def test_zero_threshold_means_every_refund_waits_for_a_lead() -> None:
    policy = SupportPolicy.model_validate(document(actions__request_refund__approval_threshold_cents=0))
    assert policy.rule("request_refund").approval_threshold_cents == 0


@pytest.mark.parametrize("countries", [["us"], ["USA"], ["U1"], ["ÜS"], [], ["US", "US"]])
def test_bad_countries_are_refused(countries: list[str]) -> None:
    refused(document(countries=countries))


def test_good_countries_load() -> None:
    assert SupportPolicy.model_validate(document(countries=["US", "JP"])).countries == ("US", "JP")


@pytest.mark.parametrize(("ttl", "ok"), [(59, False), (60, True), (7 * 86_400, True), (7 * 86_400 + 1, False)])
def test_proposal_ttl_bounds(ttl: int, ok: bool) -> None:
    if ok:
        assert SupportPolicy.model_validate(document(proposal_ttl_seconds=ttl)).proposal_ttl_seconds == ttl
    else:
        refused(document(proposal_ttl_seconds=ttl))


@pytest.mark.parametrize(("days", "ok"), [(0, False), (1, True), (3650, True), (3651, False)])
def test_refund_window_bounds(days: int, ok: bool) -> None:
    if ok:
        assert SupportPolicy.model_validate(document(refund_window_days=days)).refund_window_days == days
    else:
        refused(document(refund_window_days=days))


@pytest.mark.parametrize(
    "changes",
    [
        {"version": 3},  # the version is SSM's, never the document's
        {"actions__request_refund__max_cents": 10},
        {"actions__refund_everything": {"statuses": ["SHIPPED"], "needs_confirmation": False}},
    ],
)
def test_extra_fields_are_refused(changes: dict[str, Any]) -> None:
    assert "Extra inputs are not permitted" in refused(document(**changes))


@pytest.mark.parametrize(
    "missing", ["countries", "actions", "actions__cancel_order", "actions__cancel_order__needs_confirmation"]
)
def test_required_fields(missing: str) -> None:
    refused(document(**{missing: DELETE}))


def test_malformed_json_is_refused() -> None:
    with pytest.raises(ValidationError):
        SupportPolicy.model_validate_json('{"countries": ["US"],')


PLACED = "2026-03-01T10:00:00.000Z"
PLACED_AT = datetime(2026, 3, 1, 10, tzinfo=UTC)


def test_refund_window_edges() -> None:
    policy = SupportPolicy.model_validate(document(refund_window_days=30))
    assert policy.within_refund_window(PLACED, PLACED_AT)
    assert policy.within_refund_window(PLACED, PLACED_AT + timedelta(days=30))  # the last moment is inside
    assert not policy.within_refund_window(PLACED, PLACED_AT + timedelta(days=30, milliseconds=1))
    assert not policy.within_refund_window("2026-03-01T10:00:00+00:00", PLACED_AT + timedelta(days=31))


def test_no_window_and_no_placing_time_never_close_the_window() -> None:
    years_later = PLACED_AT + timedelta(days=3650)
    assert default_policy().within_refund_window(PLACED, years_later)
    assert SupportPolicy.model_validate(document(refund_window_days=1)).within_refund_window("", years_later)


def test_the_policy_is_frozen() -> None:
    policy = default_policy()
    with pytest.raises(ValidationError):
        policy.refund_window_days = 3  # type: ignore[misc]
