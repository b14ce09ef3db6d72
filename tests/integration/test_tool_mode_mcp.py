"""ToolMode=mcp on the deployed template: the chat function reaches its tools over MCP, and the seed scenario
ends REFUNDED exactly as in the default mode (tests/integration/test_lead_api.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devstack.stack import Stack
from support_agent import wiring
from support_agent.auth import Principal
from support_agent.tools.registry import ToolContext
from tests.integration.conftest import Api, deployed_stack
from tests.integration.test_chat_api import audit_rows, chat
from tests.integration.test_lead_api import invariant, order, raise_approval, refund_rows, wait_status
from tests.support.scripted import answer, tool_use, tools


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with deployed_stack({"Transparency": "verbose", "TurnsPerMinute": "1000", "ToolMode": "mcp"}) as deployed:
        yield deployed


def test_the_chat_function_calls_its_tools_over_mcp(api: Api) -> None:
    from support_agent.mcp.inprocess import InProcessMcpTools

    assert api.stack.function_env("ChatFunction")["TOOL_MODE"] == "mcp"
    assert api.stack.function_env("TurnWorkerFunction")["TOOL_MODE"] == "mcp"
    api.model.script = [answer("hello")]
    assert chat(api, "hi")[0] == 200
    assert isinstance(wiring.chat_services().agent.tools, InProcessMcpTools)
    # The model was offered the registry's tools, as in the default mode.
    assert [t["name"] for t in api.model.requests[-1].tools] == [
        "lookup_order",
        "list_invoices",
        "request_refund",
        "escalate_to_human",
        "cancel_order",
        "update_shipping_address",
    ]


def test_seed_scenario_ends_refunded_with_one_audit_row_per_call(api: Api) -> None:
    approval_id, cid = raise_approval(api, 1042, 18900)
    status, body, _ = api.call("POST", f"/api/approvals/{approval_id}/approve", token=api.lead())
    assert status in (200, 202), body
    assert wait_status(api, approval_id, "REFUNDED")["status"] == "REFUNDED"
    o = order(api, 1042)
    invariant(o)
    assert (o["reserved_cents"], o["refunded_cents"]) == (0, 18900)
    assert refund_rows(api, 7, approval_id) == 1
    calls = [r for r in audit_rows(api, cid) if r["action"]["S"] == "tool_call"]
    assert len(calls) == 1 and "origin" not in calls[0]  # the chat's own row: audited once, not as an MCP call


def test_a_direct_refund_repeated_with_its_key_is_made_once(api: Api) -> None:
    api.model.script = [
        tools(tool_use("request_refund", {"order_id": 1043, "amount_cents": 2500, "reason": "late"}, id="toolu_r1")),
        answer("Refunded."),
    ]
    status, body, _ = chat(api, "refund 25 of order 1043")
    assert status == 200, body
    result = body["trace"][0]["toolCalls"][0]["result"]
    assert result["status"] == "REFUNDED", result
    assert order(api, 1043)["refunded_cents"] == 2500
    # The same call again (a retried turn would make it with the same key): the recorded answer, no second refund.
    services = wiring.chat_services()
    stored = services.conversations.load(body["conversationId"])
    (holder,) = [m for m in stored if any(b.get("id") == "toolu_r1" for b in m.content if isinstance(b, dict))]
    ctx = ToolContext(
        Principal("customer-7", "customer", 7), 7, body["conversationId"], holder.seq, "toolu_r1", "req-again", "now"
    )
    again = services.agent.tools.execute(
        "request_refund", {"order_id": 1043, "amount_cents": 2500, "reason": "late"}, ctx
    )
    assert not again.is_error and again.result["status"] == "REFUNDED", again
    assert order(api, 1043)["refunded_cents"] == 2500
