"""The MCP tools (mcp/our_tools.py) on moto: scoping, keys, held refunds and their dedupe item, hand-offs, audit."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from support_agent.auth import Principal
from support_agent.mcp.our_tools import McpServices, key_item, server_key, tool_definitions
from support_agent.mcp.our_tools import call_tool as _call_tool
from support_agent.refunds.requests import held_sk
from support_agent.store.approvals import ApprovalStore
from support_agent.store.audit import AuditStore
from support_agent.store.dynamo import to_item
from support_agent.store.takeover import Takeover
from support_agent.tools.registry import ToolOutcome
from support_agent.wiring import build_mcp_services
from tests.reliability.checks import World, check_money
from tests.support.aws import serialised_moto
from tests.support.harness import Harness
from tests.support.threads import run_together

CLIENT = "test-client"


def customer(cid: int) -> Principal:
    return Principal(f"customer-{cid}", "customer", cid)


@pytest.fixture
def mcp(harness: Harness) -> McpServices:
    return build_mcp_services(harness.settings, harness.ddb, harness.sqs)


def call(mcp: McpServices, cid: int, name: str, args: dict[str, Any] | None, key: str | None = None) -> ToolOutcome:
    return _call_tool(mcp, customer(cid), name, args, key, CLIENT)


def world(h: Harness) -> World:
    return World.of_settings(h.ddb, h.settings)


def audit_store(h: Harness) -> AuditStore:
    s = h.settings
    return AuditStore(h.ddb, s.audit_table, s.conversations_table, s.approvals_table, s.customer_data_table)


def approvals(h: Harness) -> ApprovalStore:
    s = h.settings
    return ApprovalStore(h.ddb, s.approvals_table, s.customer_data_table, s.audit_table, s.conversations_table)


def rows(h: Harness, cid: int, prefix: str) -> list[dict[str, Any]]:
    return world(h).customer_rows(cid, prefix)


def open_approvals(h: Harness, cid: int) -> list[dict[str, Any]]:
    return [
        a
        for a in world(h).scan(h.settings.approvals_table)
        if a.get("entity") == "APPROVAL" and int(a["customer_id"]) == cid
    ]


REFUND = {"order_id": 1043, "amount_cents": 500, "reason": "arrived damaged"}


def test_definitions_are_the_registry_tools_with_annotations(harness: Harness, mcp: McpServices) -> None:
    defs = {d["name"]: d for d in tool_definitions(mcp.registry)}
    assert list(defs) == mcp.registry.names()
    for spec in mcp.registry.specs:
        assert defs[spec["name"]]["inputSchema"] == spec["input_schema"]
        assert defs[spec["name"]]["description"] == spec["description"]
    assert defs["lookup_order"]["annotations"]["readOnlyHint"] is True
    assert defs["list_invoices"]["annotations"]["readOnlyHint"] is True
    for name in ("request_refund", "escalate_to_human"):
        hints = defs[name]["annotations"]
        assert hints["readOnlyHint"] is False and hints["destructiveHint"] is True and hints["idempotentHint"] is True


def test_scoping_and_the_audit_stream(harness: Harness, mcp: McpServices) -> None:
    own = call(mcp, 7, "lookup_order", {"order_id": 1043})
    assert not own.is_error and own.result["order_id"] == 1043
    other = call(mcp, 8, "lookup_order", {"order_id": 1043})
    missing = call(mcp, 8, "lookup_order", {"order_id": 999_999})
    assert other.is_error and other.result == {"error": "order 1043 was not found for this customer"}
    assert missing.result["error"].replace("999999", "1043") == other.result["error"]
    smuggled = call(mcp, 8, "lookup_order", {"order_id": 1043, "customer_id": 7})
    assert smuggled.is_error and smuggled.outcome == "invalid_input"
    invoices = call(mcp, 8, "list_invoices", {"order_id": 1043})
    assert invoices.is_error

    store = audit_store(harness)
    mine = store.list_stream("mcp#7")
    assert [r["tool"] for r in mine] == ["lookup_order"]
    assert mine[0]["origin"] == "mcp" and mine[0]["client"] == CLIENT and mine[0]["actor"] == "customer-7"
    theirs = store.list_stream("mcp#8")
    assert len(theirs) == 4 and {r["origin"] for r in theirs} == {"mcp"}
    for stream in ("mcp#7", "mcp#8"):
        verdict = store.verify_stream(stream)
        assert verdict["status"] == "ok" and verdict["chainStartsAt"] == 1, verdict
    # The head's item is never listed as a customer's conversation.
    head = harness.ddb.get_item(
        TableName=harness.settings.conversations_table,
        Key={"conversation_id": {"S": "mcp#8"}, "seq": {"N": "0"}},
    )["Item"]
    assert "customer_id" not in head and "updated_at" not in head and head["audit_n"] == {"N": "4"}


def test_a_keyed_refund_under_the_threshold_is_one_direct_refund(harness: Harness, mcp: McpServices) -> None:
    first = call(mcp, 7, "request_refund", REFUND, key="k-1")
    assert not first.is_error and first.result["status"] == "REFUNDED", first.result
    again = call(mcp, 7, "request_refund", REFUND, key="k-1")
    assert again.result == first.result and again.outcome == "ok"
    ledger = [r for r in rows(harness, 7, "REFUND#") if r.get("kind") == "direct"]
    assert len(ledger) == 1 and ledger[0]["refund_key"] == server_key(7, "k-1")
    assert not ledger[0].get("conversation_id")
    assert harness.order(1043).refunded_cents == 500
    check_money(world(harness), 7)
    assert audit_store(harness).verify_trail("mcp#7")["status"] == "ok"


def test_a_key_reused_with_other_arguments_or_another_tool_is_refused(harness: Harness, mcp: McpServices) -> None:
    """A key is bound to (tool, arguments): a mistaken reuse is an error, never the first call's answer."""
    first = call(mcp, 7, "request_refund", REFUND, key="k-r")
    assert first.result["status"] == "REFUNDED", first.result
    reordered = call(mcp, 7, "request_refund", dict(reversed(REFUND.items())), key="k-r")  # the same arguments
    assert reordered.result == first.result and not reordered.is_error
    other = call(mcp, 7, "request_refund", {**REFUND, "amount_cents": 900}, key="k-r")
    elsewhere = call(mcp, 7, "escalate_to_human", {"reason": "a person"}, key="k-r")
    for refused in (other, elsewhere):
        assert refused.is_error and refused.outcome == "invalid_input", refused
        assert refused.result["code"] == "idempotency_key_reused"
        assert refused.result["error"].startswith("idempotency_key_reused:")
    # Nothing written for the refused calls: one refund of the first amount, no ticket; each call audited.
    ledger = [r for r in rows(harness, 7, "REFUND#") if r.get("kind") == "direct"]
    assert [(r["refund_key"], r["amount_cents"]) for r in ledger] == [(server_key(7, "k-r"), 500)]
    assert harness.order(1043).refunded_cents == 500
    assert not [i for i in world(harness).scan(harness.settings.approvals_table) if i.get("entity") == "HANDOFF"]
    trail = audit_store(harness).list_stream("mcp#7")
    assert [(r["tool"], r["outcome"]) for r in trail] == [
        ("request_refund", "ok"),
        ("request_refund", "ok"),
        ("request_refund", "invalid_input"),
        ("escalate_to_human", "invalid_input"),
    ]
    assert "idempotency_key_reused" in trail[2]["output"]
    assert audit_store(harness).verify_trail("mcp#7")["status"] == "ok"
    check_money(world(harness), 7)


def test_invalid_arguments_do_not_bind_a_key(harness: Harness, mcp: McpServices) -> None:
    bad = call(mcp, 7, "request_refund", {**REFUND, "amount_cents": "500"}, key="k-fix")
    assert bad.is_error and bad.outcome == "invalid_input" and "code" not in bad.result
    fixed = call(mcp, 7, "request_refund", REFUND, key="k-fix")
    assert fixed.result["status"] == "REFUNDED", fixed.result


def test_a_key_used_before_keys_were_bound_is_bound_by_its_next_call(harness: Harness, mcp: McpServices) -> None:
    """A key whose refund predates the binding item (removed here) answers its record to the same arguments, and
    from then on is bound to them."""
    first = call(mcp, 7, "request_refund", REFUND, key="k-old")
    harness.ddb.delete_item(TableName=harness.settings.conversations_table, Key=to_item(key_item(7, "k-old")))
    again = call(mcp, 7, "request_refund", REFUND, key="k-old")
    assert again.result == first.result and not again.is_error
    other = call(mcp, 7, "request_refund", {**REFUND, "amount_cents": 900}, key="k-old")
    assert other.is_error and other.result["code"] == "idempotency_key_reused"
    assert len([r for r in rows(harness, 7, "REFUND#") if r.get("kind") == "direct"]) == 1
    check_money(world(harness), 7)


def test_two_customers_one_key_two_refunds(harness: Harness, mcp: McpServices) -> None:
    a = call(mcp, 7, "request_refund", REFUND, key="1")
    b = call(mcp, 8, "request_refund", {"order_id": 2001, "amount_cents": 500, "reason": "late"}, key="1")
    assert a.result["status"] == b.result["status"] == "REFUNDED"
    keys = {r["refund_key"] for cid in (7, 8) for r in rows(harness, cid, "REFUND#")}
    assert keys == {server_key(7, "1"), server_key(8, "1")} and len(keys) == 2
    check_money(world(harness), 7)
    check_money(world(harness), 8)


def test_a_keyed_refund_over_the_threshold_is_one_approval(harness: Harness, mcp: McpServices) -> None:
    big = {"order_id": 1042, "amount_cents": 9000, "reason": "broken"}
    first = call(mcp, 7, "request_refund", big, key="big")
    assert first.result["status"] == "PENDING_APPROVAL"
    assert call(mcp, 7, "request_refund", big, key="big").result == first.result
    assert len(open_approvals(harness, 7)) == 1
    check_money(world(harness), 7)


def test_without_a_key_any_amount_is_held_and_asked_again_answers_the_same(harness: Harness, mcp: McpServices) -> None:
    first = call(mcp, 7, "request_refund", REFUND)
    assert first.result["status"] == "PENDING_APPROVAL", first.result
    again = call(mcp, 7, "request_refund", REFUND)
    assert again.result["approval_id"] == first.result["approval_id"]
    (approval,) = open_approvals(harness, 7)
    assert approval["status"] == "PENDING" and not approval.get("conversation_id")
    assert rows(harness, 7, "REFUND#") and not [r for r in rows(harness, 7, "REFUND#") if r.get("kind") == "direct"]
    order = harness.order(1043)
    assert order.reserved_cents == 500 and order.refunded_cents == 0
    # A different amount is another request.
    other = call(mcp, 7, "request_refund", {**REFUND, "amount_cents": 400})
    assert other.result["approval_id"] != first.result["approval_id"]
    check_money(world(harness), 7)


def test_concurrent_identical_held_requests_make_one_approval(harness: Harness, mcp: McpServices) -> None:
    results: list[ToolOutcome] = []
    start = threading.Barrier(6)

    def one() -> None:
        start.wait()
        results.append(call(mcp, 7, "request_refund", REFUND))

    with serialised_moto():
        run_together([one] * 6, timeout=None)
    assert len(results) == 6 and not [r for r in results if r.is_error], [r.result for r in results]
    assert len({r.result["approval_id"] for r in results}) == 1
    assert len(open_approvals(harness, 7)) == 1
    assert harness.order(1043).reserved_cents == 500
    check_money(world(harness), 7)
    assert audit_store(harness).verify_stream("mcp#7")["rows"] == 6
    assert audit_store(harness).verify_stream("mcp#7")["status"] == "ok"


@pytest.mark.parametrize("decision", ["reject", "expire", "approve"])
def test_every_decision_releases_the_request(harness: Harness, mcp: McpServices, decision: str) -> None:
    first = call(mcp, 7, "request_refund", REFUND).result["approval_id"]
    assert rows(harness, 7, held_sk(1043, 500))
    store = approvals(harness)
    if decision == "approve":
        store.approve(first, "lead-1", "2026-12-01T00:00:00Z")
    else:
        to = {"reject": "REJECTED", "expire": "EXPIRED"}[decision]
        store.release(first, "PENDING", to, "lead-1", f"approval_{to.lower()}", "2026-12-01T00:00:00Z")
    (released,) = rows(harness, 7, held_sk(1043, 500))  # released by the decision (no role may delete)
    assert (released["approval_id"], released["released_at"]) == (first, "2026-12-01T00:00:00Z")
    second = call(mcp, 7, "request_refund", REFUND)
    assert second.result["status"] == "PENDING_APPROVAL"
    assert second.result["approval_id"] != first
    assert rows(harness, 7, held_sk(1043, 500))[0]["approval_id"] == second.result["approval_id"]
    check_money(world(harness), 7)


def test_a_stale_dedupe_item_is_replaced(harness: Harness, mcp: McpServices) -> None:
    """A dedupe item whose approval was decided by a writer that did not remove it never blocks a new request."""
    first = call(mcp, 7, "request_refund", REFUND).result["approval_id"]
    bare = ApprovalStore(
        harness.ddb,
        harness.settings.approvals_table,
        harness.settings.customer_data_table,
        harness.settings.audit_table,
    )
    harness.ddb.update_item(  # as if decided before the decision removed dedupe items
        TableName=harness.settings.approvals_table,
        Key={"approval_id": {"S": first}},
        UpdateExpression="REMOVE dedupe_sk",
    )
    bare.release(first, "PENDING", "REJECTED", "lead-1", "approval_rejected", "2026-12-01T00:00:00Z")
    assert rows(harness, 7, held_sk(1043, 500))[0]["approval_id"] == first
    second = call(mcp, 7, "request_refund", REFUND).result
    assert second["status"] == "PENDING_APPROVAL" and second["approval_id"] != first
    check_money(world(harness), 7)


def test_escalate_without_a_key_reuses_the_open_handoff(harness: Harness, mcp: McpServices) -> None:
    first = call(mcp, 7, "escalate_to_human", {"reason": "I want a person"})
    second = call(mcp, 7, "escalate_to_human", {"reason": "still waiting"})
    assert first.result["status"] == "HANDOFF_OPENED"
    assert second.result == {**first.result, "status": "HANDOFF_ALREADY_OPEN"}
    tickets = [i for i in world(harness).scan(harness.settings.approvals_table) if i.get("entity") == "HANDOFF"]
    assert len(tickets) == 1 and not tickets[0].get("conversation_id")
    # Another customer's hand-off is its own.
    assert call(mcp, 8, "escalate_to_human", {"reason": "me too"}).result["handoff_id"] != first.result["handoff_id"]
    # Closing it frees the customer's slot.
    s = harness.settings
    Takeover(harness.ddb, s.approvals_table, s.conversations_table, s.audit_table).close(
        first.result["handoff_id"], Principal("lead-1", "support_lead"), "2026-12-01T00:00:00Z"
    )
    third = call(mcp, 7, "escalate_to_human", {"reason": "again"})
    assert third.result["status"] == "HANDOFF_OPENED" and third.result["handoff_id"] != first.result["handoff_id"]
    assert audit_store(harness).verify_trail("mcp#7")["status"] == "ok"


def test_escalate_with_a_key_is_once_per_key(harness: Harness, mcp: McpServices) -> None:
    first = call(mcp, 7, "escalate_to_human", {"reason": "a person"}, key="h-1")
    again = call(mcp, 7, "escalate_to_human", {"reason": "a person"}, key="h-1")
    assert first.result["status"] == "HANDOFF_OPENED" and again.result == first.result
    tickets = [i for i in world(harness).scan(harness.settings.approvals_table) if i.get("entity") == "HANDOFF"]
    assert len(tickets) == 1


def test_a_lead_principal_is_refused(harness: Harness, mcp: McpServices) -> None:
    out = _call_tool(mcp, Principal("lead-1", "support_lead"), "lookup_order", {"order_id": 1043}, None, CLIENT)
    assert out.is_error
